"""Canonical configs and one measurement per program (search/programs.py): knobs a config
does not read are reset before measuring, a program measured before is answered from its
earlier result (the tuner sees the config visited; not a trial, not logged)."""
from __future__ import annotations

import json

import looptune as lt
import pytest
from looptune.schedule.steps import dumps
from looptune.search import MeasureOption, MeasureResult, RandomTuner, SATuner, auto_task
from looptune.search.programs import ProgramSet, canonical
from util import pick_config
from util import softmax as util_softmax

OPT = MeasureOption(number=1, repeat=2, timeout=20, n_parallel=2, remeasure_top=0)


class StepsMeasurer:
    """A measurer without processes: a cost from each program's steps (so equal programs
    cost the same), and the steps of every config it measured."""

    def __init__(self, task):
        self.task, self.steps, self.indices = task, [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def measure(self, configs):
        for c in configs:
            try:
                key = dumps(self.task.instantiate(c)[0].steps)
            except lt.ScheduleError:
                key = f"invalid {c.index}"
            self.steps.append(key)
            self.indices.append(c.index)
            sec = 1e-3 * (1 + (hash(key) % 997) / 997)
            yield MeasureResult(c, [sec, sec], flop=self.task.flop)


def _maxpool(N=1, C=16, H=57, W=61):
    """3x3 max pooling, stride 2, padding 1 (a padded stage), as examples/pooling.py."""
    X = lt.placeholder((N, C, H, W), "float32", name="X")
    pad = lt.compute((N, C, H + 2, W + 2), lambda n, c, y, x: lt.if_then_else(
        lt.all(y >= 1, y < H + 1, x >= 1, x < W + 1), X[n, c, y - 1, x - 1], -1e30),
        name="pad")
    ry, rx = lt.reduce_axis(3, name="ry"), lt.reduce_axis(3, name="rx")
    P = lt.compute((N, C, (H - 1) // 2 + 1, (W - 1) // 2 + 1), lambda n, c, y, x: lt.max(
        pad[n, c, 2 * y + ry, 2 * x + rx], axis=[ry, rx]), name="pool")
    return [X, P]


def test_knobs_a_config_does_not_read_are_reset_to_their_first_choice():
    task = auto_task(util_softmax(N=7, M=45).args)
    sp = task.config_space
    # expx inlined: its knobs (at, vec, width, rows) are never read
    a = pick_config(sp, {"expx.inline": True, "expx.at": "root", "expx.width": 32})
    b = pick_config(sp, {"expx.inline": True, "expx.at": "row"})
    ca, ka = canonical(task, a)
    cb, kb = canonical(task, b)
    assert a.index != b.index and ca.index == cb.index and ka == kb
    assert ca["expx.at"].val == sp.knobs["expx.at"].values[0]
    assert ca["expx.width"].val == sp.knobs["expx.width"].values[0]
    assert ca["expx.inline"].val is True                       # read: kept
    assert canonical(task, ca)[0].index == ca.index           # a fixed point
    # a knob that is read but changes nothing (rowmax per row while its reader expx is at
    # root): a different config, the same program
    c = pick_config(sp, {"expx.inline": False, "expx.at": "root", "rowmax.at": "row"})
    d = pick_config(sp, {"expx.inline": False, "expx.at": "root", "rowmax.at": "root"})
    assert canonical(task, c)[1] == canonical(task, d)[1]


def test_invalid_configs_share_a_key_with_their_canonical_config():
    from looptune.search import create_task
    task = create_task("test_faulty", (8,))
    bad = [c for c in task.config_space if c["mode"].val == "invalid"]
    assert len({canonical(task, c)[1] for c in bad}) == len(bad)   # tile_j read: distinct
    assert all(canonical(task, c)[1].startswith("invalid:") for c in bad)
    raising = next(c for c in task.config_space if c["mode"].val == "raise")
    assert canonical(task, raising) == (raising, None)           # a template bug: measured


def test_hand_templates_are_keyed_by_config_not_by_steps():
    """test_faulty's modes misbehave only in workers: equal steps, different programs."""
    from looptune.search import create_task
    task = create_task("test_faulty", (8,))
    keys = [canonical(task, c)[1] for c in task.config_space]
    assert len({k for k in keys if k}) == 14 and keys.count(None) == 2    # 2 raise


def test_a_batch_with_one_program_twice_measures_it_once():
    task = auto_task(util_softmax(N=7, M=45).args)
    a = pick_config(task.config_space, {"expx.inline": True, "expx.at": "root"})
    b = pick_config(task.config_space, {"expx.inline": True, "expx.at": "row"})
    c = pick_config(task.config_space, {"expx.inline": False})
    tuner = RandomTuner(task, seed=0)
    m = StepsMeasurer(task)
    out = list(tuner.programs.measure(m, [a, b, c, b], tuner))
    assert [fresh for _, fresh in out] == [True, False, True, False]
    assert out[0][0] is out[1][0] is out[3][0]
    assert len(m.indices) == 2 and canonical(task, a)[0].index in tuner.visited


@pytest.mark.parametrize("dag, name", [(lambda: util_softmax(N=37, M=53).args, "softmax"),
                                       (_maxpool, "max_pool2d")])
def test_sa_trials_are_distinct_programs(dag, name):
    """Was 80/200 (softmax) and 84/200 (max_pool2d) distinct programs: every trial is now a
    program not measured before, and measured as its canonical config."""
    task = auto_task(dag())
    tuner = SATuner(task, seed=0)
    m = StepsMeasurer(task)
    tuner.make_measurer = lambda option: m
    tuner.tune(80, OPT)
    assert tuner.trials == len(m.steps) == 80
    assert len(set(m.steps)) == 80
    assert all(canonical(task, task.config_space.get(i))[0].index == i for i in m.indices)
    assert tuner.programs.duplicates > 0                 # proposed again, answered from before


def test_resumed_results_key_their_programs():
    task = auto_task(util_softmax(N=7, M=45).args)
    a = pick_config(task.config_space, {"expx.inline": True, "expx.at": "root"})
    b = pick_config(task.config_space, {"expx.inline": True, "expx.at": "row"})
    tuner = RandomTuner(task, seed=0)
    tuner.load_history([MeasureResult(canonical(task, a)[0], [1e-3], flop=task.flop)])
    m = StepsMeasurer(task)
    ((res, fresh),) = tuner.programs.measure(m, [b], tuner)
    assert not fresh and m.indices == [] and res.costs == [1e-3]
    assert isinstance(tuner.programs, ProgramSet)


@pytest.mark.slow
def test_a_tuned_log_holds_one_record_per_program_the_fallback_first(tmp_path):
    log = tmp_path / "auto.jsonl"
    args = util_softmax(N=9, M=41).args
    lt.search.auto_schedule(args, trials=8, log_file=str(log), tuner="sa",
                            measure_option=OPT)
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    recs = [r for r in recs if r.get("kind", "measure") == "measure"]
    assert len(recs) == 8 and len({r["steps"] for r in recs}) == 8
    assert recs[0]["config"]["index"] == 0            # the fallback is the first trial
    task = auto_task(args)
    for r in recs:
        cfg = task.config_space.get(r["config"]["index"])
        assert canonical(task, cfg)[0].index == cfg.index


@pytest.mark.slow
def test_the_fallback_is_remeasured_beside_the_best_even_when_it_ranks_low(tmp_path):
    """auto_schedule makes config 0 an anchor of the final re-measure: a slow first timing
    (it runs first, in a cold process) cannot leave a pick that is slower than it."""
    log = tmp_path / "auto.jsonl"
    args = util_softmax(N=9, M=41).args
    opt = MeasureOption(number=1, repeat=1, timeout=20, n_parallel=2, remeasure_top=1,
                        remeasure_rounds=2, remeasure_fresh=False, warmup_ms=0,
                        race_rounds=0)     # only the final re-measure times configs again
    lt.search.auto_schedule(args, trials=6, log_file=str(log), tuner="random",
                            measure_option=opt)
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    again = [r["config"]["index"] for r in recs if r.get("kind") == "remeasure"]
    assert again.count(0) == 2                  # in both rounds, whatever its rank
    assert len(again) == 4 or again == [0, 0]  # beside the best (unless config 0 is it)
    # resumed from that log (config 0 not measured again), it is still an anchor
    tuner = RandomTuner(auto_task(args), seed=0)
    lt.search.auto._fallback_first(tuner, opt, [], str(log))
    assert tuner.anchors == {0} and tuner.history == []
