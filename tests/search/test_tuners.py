"""Tuner logic with a fake measurer: proposals, reproducibility, stopping, resume, Ctrl-C."""
from __future__ import annotations

import io
import os
import signal

import numpy as np
import pytest

from looptune.search import (GATuner, GridTuner, MeasureOption, RandomTuner, SATuner,
                             TuningError, create_task, load_records, log_to_file, progress_bar)

TUNERS = [RandomTuner, GridTuner, GATuner, SATuner]
OPT = MeasureOption(n_parallel=4)


@pytest.fixture(scope="module")
def task():
    return create_task("test_matmul", (16, 16, 16))        # 3000 configs


def _bowl(task):
    """A smooth cost over knob indices: best at one corner of the space, never failing."""
    sp = task.config_space
    target = [d - 1 for d in sp.dims]

    def cost(index):
        v = sp.vector(index)
        return 1e-4 * (1.0 + sum((a - b) ** 2 for a, b in zip(v, target)))
    return cost


def _proposals(cls, task, seed, fake_measure, n=40):
    tuner = cls(task, seed=seed)
    fm = fake_measure(tuner, _bowl(task))
    tuner.tune(n, OPT)
    return fm.measured


@pytest.mark.parametrize("cls", TUNERS)
def test_same_seed_same_proposals(cls, task, fake_measure):
    a = _proposals(cls, task, 7, fake_measure)
    b = _proposals(cls, task, 7, fake_measure)
    assert a == b and len(a) == 40 and len(set(a)) == 40
    if cls is not GridTuner:
        assert _proposals(cls, task, 8, fake_measure) != a
    else:
        assert a == list(range(40))


@pytest.mark.parametrize("cls", [RandomTuner, GATuner, SATuner])
def test_same_seed_same_batches_without_feedback(cls, task):
    def first_batches(seed):
        t = cls(task, seed=seed)
        return [[c.index for c in t.next_batch(5)] for _ in range(3)]
    assert first_batches(3) == first_batches(3)


@pytest.mark.parametrize("cls", TUNERS)
def test_stops_when_the_space_is_exhausted(cls, fake_measure):
    small = create_task("test_faulty", (8,))               # 16 configs
    tuner = cls(small, seed=1)
    fm = fake_measure(tuner, lambda i: 1e-3 + i * 1e-6)
    best = tuner.tune(100, OPT)
    assert sorted(fm.measured) == list(range(16))
    assert tuner.trials == 16 and best.config.index == 0


@pytest.mark.parametrize("cls", TUNERS)
def test_early_stopping(cls, task, fake_measure):
    tuner = cls(task, seed=2)
    fm = fake_measure(tuner, lambda i: 1e-3)               # nothing ever improves on trial 1
    tuner.tune(200, MeasureOption(n_parallel=1), early_stopping=5)
    assert len(fm.measured) == 6


def test_ga_and_sa_find_better_configs_than_random(task, fake_measure):
    cost = _bowl(task)
    bests = {}
    for cls in TUNERS:
        tuner = cls(task, seed=0)
        fake_measure(tuner, cost)
        bests[cls.__name__] = tuner.tune(120, OPT).cost
    assert bests["GATuner"] < bests["RandomTuner"]
    assert bests["SATuner"] < bests["RandomTuner"]
    assert bests["GATuner"] < 0.1 * np.mean([cost(i) for i in range(0, 3000, 7)])


def test_ga_generations_elitism_and_no_remeasure(task, fake_measure):
    tuner = GATuner(task, pop_size=8, elite_num=2, seed=4)
    fm = fake_measure(tuner, _bowl(task))
    tuner.tune(48, OPT)
    assert tuner.generations == 6 and len(set(fm.measured)) == 48
    parents = tuner._parents()
    top2 = sorted(tuner.scores, key=lambda i: -tuner.scores[i])[:2]
    assert set(top2) <= set(parents)              # elites stay parents, without re-measuring


def test_sa_temperature_decays(task, fake_measure):
    tuner = SATuner(task, n_chains=3, seed=1)
    fake_measure(tuner, _bowl(task))
    assert tuner.temperature == pytest.approx(1.0)
    tuner.tune(30, OPT)
    assert tuner.temperature == pytest.approx(0.01)
    assert all(ch.point is not None for ch in tuner.chains)


def test_all_failures_raise_a_summary(task, fake_measure):
    tuner = RandomTuner(task, seed=0)
    fake_measure(tuner, lambda i: None)
    with pytest.raises(TuningError, match=r"every one of the 8 candidates .* failed: "
                                          r"8 build_error \(e\.g\. 'fake failure'\)") as ei:
        tuner.tune(8, OPT)
    assert ei.value.kinds == {"build_error": 8}


def test_failures_are_never_best(task, fake_measure):
    tuner = GridTuner(task)
    fake_measure(tuner, lambda i: None if i % 2 else 1e-3 + i * 1e-6)
    assert tuner.tune(10, OPT).config.index == 0


def test_ctrl_c_stops_after_the_batch_in_flight(task, fake_measure, tmp_path):
    tuner = RandomTuner(task, seed=0)
    batches = []

    def press(fm):
        batches.append(len(fm.measured))
        if len(batches) == 3:
            os.kill(os.getpid(), signal.SIGINT)
    fm = fake_measure(tuner, _bowl(task), on_batch=press)
    before = signal.getsignal(signal.SIGINT)     # SIG_IGN under nohup, else Python's own
    best = tuner.tune(100, OPT, callbacks=[log_to_file(tmp_path / "l.jsonl")])
    assert len(fm.measured) == 12 and best is not None         # the third batch completed
    assert len(load_records(tmp_path / "l.jsonl")) == 12
    assert signal.getsignal(signal.SIGINT) is before           # the handler is restored


@pytest.mark.parametrize("cls", TUNERS)
def test_resume_skips_logged_configs_and_continues_the_count(cls, task, fake_measure, tmp_path):
    path = tmp_path / "log.jsonl"
    first = cls(task, seed=5)
    fm1 = fake_measure(first, _bowl(task))
    first.tune(10, OPT, callbacks=[log_to_file(path)])
    second = cls(task, seed=5)
    fm2 = fake_measure(second, _bowl(task))
    best = second.tune(25, OPT, callbacks=[log_to_file(path)], resume=True)
    assert len(fm2.measured) == 15 and not set(fm2.measured) & set(fm1.measured)
    recs = load_records(path, task)
    assert len(recs) == 25 and len({r.index for r in recs}) == 25
    assert best.cost == min(r.cost for r in recs)


def test_resume_needs_a_log(task, fake_measure):
    tuner = RandomTuner(task, seed=0)
    fake_measure(tuner, _bowl(task))
    with pytest.raises(Exception, match="log_to_file"):
        tuner.tune(4, OPT, resume=True)


def test_progress_bar_shows_trials_best_errors_and_eta(task, fake_measure):
    tuner = RandomTuner(task, seed=0)
    fake_measure(tuner, lambda i: None if i % 3 == 0 else 1e-3)
    out = io.StringIO()
    tuner.tune(12, OPT, callbacks=[progress_bar(out, rewrite=True)])
    text = out.getvalue()
    last = text.rstrip("\n").split("\r")[-1]
    assert "\r" in text and text.endswith("\n")
    assert "12/12 trials" in last and "GFLOP/s" in last and "ETA" in last
    n_err = sum(1 for r in tuner.history if not r.ok)
    assert f"errors {n_err} (build_error {n_err})" in last
