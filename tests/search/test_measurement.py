"""Trustworthy timings: the final re-measure, the median rule in the tuner, the noise guard,
time budgets, the progress bar off a terminal and the OpenMP wait policy."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from looptune.errors import LooptuneError
from looptune.search import (ErrorKind, MeasureOption, Measurer, MeasureResult, RandomTuner,
                             SATuner, create_task, load_best, load_records, log_to_file,
                             progress_bar)

OPT = MeasureOption(n_parallel=4, remeasure_top=3, remeasure_rounds=3)


@pytest.fixture
def task():
    return create_task("test_matmul", (16, 16, 16))


class ScriptedMeasurer:
    """Each config's first measurement comes from ``first``; its re-measures from ``again``
    (both: index -> seconds, or None for a wrong result)."""

    def __init__(self, task, first, again):
        self.task, self.first, self.again = task, first, again
        self.remeasured: list[list[int]] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def _result(self, cfg, sec, kind):
        if sec is None:
            return MeasureResult(cfg, [], ErrorKind.WRONG_RESULT, "wrong", kind=kind)
        return MeasureResult(cfg, [sec], flop=self.task.flop, kind=kind)

    def measure(self, configs):
        for c in configs:
            yield self._result(c, self.first(c.index), "measure")

    def remeasure(self, configs, rounds, stop=None):
        for r in range(rounds):
            self.remeasured.append([c.index for c in configs])
            for c in configs[r % len(configs):] + configs[:r % len(configs)]:
                yield self._result(c, self.again(c.index), "remeasure")


def _install(tuner, first, again):
    m = ScriptedMeasurer(tuner.task, first, again)
    tuner.make_measurer = lambda option: m
    return m


def test_the_best_is_the_median_after_the_final_remeasure(task, tmp_path):
    """The luckiest first measurement loses once the top configs are timed again."""
    tuner = RandomTuner(task, seed=0)
    lucky: list[int] = []

    def first(i):
        if not lucky:
            lucky.append(i)                       # the first config looks 10x faster...
            return 1e-4
        return 1e-3 + i * 1e-9

    m = _install(tuner, first, lambda i: 5e-3 if i == lucky[0] else 1e-3 + i * 1e-9)
    log = tmp_path / "l.jsonl"
    best = tuner.tune(20, OPT, callbacks=[log_to_file(log)])
    assert len(m.remeasured) == 3 and lucky[0] in m.remeasured[0]    # ...so it is re-measured
    assert best.config.index != lucky[0] and best.kind == "remeasure"
    assert best.cost == pytest.approx(1e-3 + best.config.index * 1e-9)
    assert tuner.trials == 20 and len(tuner.history) == 20           # re-measures: no trials
    recs = load_records(log)
    assert sum(r.kind == "remeasure" for r in recs) == 9
    assert load_best(log, task).index == best.config.index          # the log agrees


@pytest.mark.parametrize("anchored", [True, False])
def test_an_anchor_slow_on_its_first_measurement_is_timed_again_and_can_win(task, anchored):
    """The auto scheduler's fallback is measured first, in a cold process: one slow timing
    must not keep it out of the final re-measure (it is an anchor), where it proves fastest.
    Without the anchor it is never timed again."""
    tuner = RandomTuner(task, seed=2)
    order: list[int] = []

    def first(i):
        if not order and anchored:
            tuner.anchors.add(i)                 # as auto_schedule does with its fallback
        order.append(i)
        return 5e-3 if len(order) == 1 else 1e-3 + i * 1e-9     # the first one: unlucky

    m = _install(tuner, first, lambda i: 5e-4 if i == order[0] else 1e-3 + i * 1e-9)
    best = tuner.tune(12, dataclasses.replace(OPT, race_rounds=0))   # the final re-measure only
    anchor = order[0]
    assert len(m.remeasured) == 3
    assert all(len(r) == 3 + anchored and (anchor in r) == anchored for r in m.remeasured)
    assert (best.config.index == anchor) == anchored and best.kind == "remeasure"


def test_a_config_wrong_on_remeasure_is_never_best(task):
    tuner = RandomTuner(task, seed=1)
    fastest: list[int] = []

    def first(i):
        fastest.append(i)
        return 1e-4 if len(fastest) == 1 else 1e-3 + i * 1e-9

    _install(tuner, first, lambda i: None if i == fastest[0] else 1e-3 + i * 1e-9)
    best = tuner.tune(8, OPT)
    assert best.config.index != fastest[0]


def test_remeasure_top_zero_turns_it_off(task):
    tuner = RandomTuner(task, seed=0)
    m = _install(tuner, lambda i: 1e-3 + i * 1e-9, lambda i: 1e-3)
    best = tuner.tune(6, MeasureOption(n_parallel=2, remeasure_top=0, race_rounds=0))
    assert m.remeasured == [] and best.kind == "measure"


def _scripted(task, firsts: list[float], truths: list[float], race_rounds=2, seed=0):
    """A tune of len(firsts) configs, one per batch: the n-th config measured gets
    ``firsts[n]`` on its one measurement and ``truths[n]`` whenever it is timed again."""
    tuner = RandomTuner(task, seed=seed)
    order: list[int] = []

    def first(i):
        order.append(i)
        return firsts[len(order) - 1]

    m = _install(tuner, first, lambda i: truths[order.index(i)])
    opt = MeasureOption(n_parallel=1, remeasure_top=0, race_rounds=race_rounds)
    best = tuner.tune(len(firsts), opt)
    return tuner, best, m, order


def test_a_lucky_sample_must_win_a_race_to_become_the_incumbent(task):
    """The second config's one measurement is twice as fast as the first's, by luck: it is
    raced against the first in 2 interleaved rounds, loses, and the first is returned. Without
    races the lucky one would be (the rule of the luckiest sample)."""
    firsts, truths = [1e-3, 5e-4, 3e-3, 3e-3], [1e-3, 2e-3, 3e-3, 3e-3]
    tuner, best, m, order = _scripted(task, firsts, truths)
    assert m.remeasured == [[order[0], order[1]], [order[0], order[1]]]
    assert tuner.races == 1 and len(tuner.remeasured) == 4 and tuner.trials == 4
    assert best.config.index == order[0] and best.kind == "remeasure"
    assert best.cost == pytest.approx(1e-3)        # the median of its two race timings
    tuner, best, m, order = _scripted(task, firsts, truths, race_rounds=0)
    assert m.remeasured == [] and best.config.index == order[1]


def test_the_bar_of_a_race_is_the_incumbents_first_measurement_and_only_falls(task):
    """Config 1 beats config 0's first timing and wins its race: the bar becomes config 1's
    first timing (0.9). Config 2 (0.95) is not raced; config 3 (0.85) is and loses, leaving
    the bar at 0.9; config 4 (0.88) is raced against config 1 again and wins."""
    firsts = [1.0e-3, 0.9e-3, 0.95e-3, 0.85e-3, 0.88e-3, 2e-3]
    truths = [1.0e-3, 0.8e-3, 0.9e-3, 1.2e-3, 0.7e-3, 2e-3]
    tuner, best, m, order = _scripted(task, firsts, truths)
    c = order
    assert m.remeasured == [[c[0], c[1]]] * 2 + [[c[1], c[3]]] * 2 + [[c[1], c[4]]] * 2
    assert tuner.races == 3 and best.config.index == c[4]
    assert best.cost == pytest.approx(0.7e-3)      # its race timings, not its first (0.88)


def test_a_race_times_every_challenger_of_a_batch_beside_the_incumbent(task):
    tuner = RandomTuner(task, seed=4)
    order: list[int] = []

    def first(i):
        order.append(i)
        return [1e-3, 2e-3, 0.5e-3, 0.6e-3, 3e-3, 3e-3][len(order) - 1]

    truth = {0: 1e-3, 1: 2e-3, 2: 1.5e-3, 3: 0.4e-3, 4: 3e-3, 5: 3e-3}
    m = _install(tuner, first, lambda i: truth[order.index(i)])
    best = tuner.tune(6, MeasureOption(n_parallel=2, remeasure_top=0, race_rounds=3))
    # batch 2 holds two challengers of config 0 (batch 1's best): one race of three, best first
    c = order
    assert [sorted(r) for r in m.remeasured] == [sorted([c[0], c[2], c[3]])] * 3
    assert m.remeasured[0] == [c[0], c[2], c[3]]
    assert tuner.races == 1 and best.config.index == c[3]


def test_a_challenger_that_failed_or_was_wrong_is_never_raced(task):
    firsts = [1e-3, None, 2e-3]
    tuner, best, m, order = _scripted(task, firsts, [1e-3, None, 2e-3])
    assert m.remeasured == [] and tuner.races == 0 and best.config.index == order[0]


def test_resume_keeps_earlier_remeasures(task, tmp_path):
    log = tmp_path / "l.jsonl"
    t1 = RandomTuner(task, seed=0)
    _install(t1, lambda i: 1e-3 + i * 1e-9, lambda i: 2e-3 + i * 1e-9)
    t1.tune(6, OPT, callbacks=[log_to_file(log)])
    t2 = RandomTuner(task, seed=0)
    m2 = _install(t2, lambda i: 1e-3 + i * 1e-9, lambda i: 2e-3 + i * 1e-9)
    best = t2.tune(6, OPT, callbacks=[log_to_file(log)], resume=True)
    assert t2.trials == 6 and len(t2.remeasured) == 9 + 9          # 9 from the log, 9 new
    # the configs whose one measurement beats the confirmed medians are confirmed now, timed
    # beside the best confirmed config (which wins again: 3 + 3 re-measures count, not its
    # one search timing)
    first_best = t1.best.config.index
    assert len(m2.remeasured) == 3 and first_best in m2.remeasured[0]
    assert best.config.index == first_best == load_best(log, task).index
    assert len(best.costs) == 6


# ---- time budgets ---------------------------------------------------------------------------

def test_seconds_is_a_wall_clock_budget(task):
    tuner = RandomTuner(task, seed=0)

    def slow(i):
        time.sleep(0.05)
        return 1e-3
    _install(tuner, slow, lambda i: 1e-3)
    t0 = time.monotonic()
    tuner.tune(seconds=0.5, measure_option=MeasureOption(n_parallel=2, remeasure_top=0))
    elapsed = time.monotonic() - t0
    assert 0.5 <= elapsed < 0.5 + 2 * 2 * 0.05 + 0.5           # at most one batch past it
    assert 4 <= tuner.trials <= 14
    t2 = RandomTuner(task, seed=0)
    _install(t2, lambda i: 1e-3, lambda i: 1e-3)
    t2.tune(5, MeasureOption(n_parallel=2, remeasure_top=0), seconds=60)
    assert t2.trials == 5                                       # n_trial came first


def test_sa_under_a_time_budget_alone_gets_a_trial_estimate(task):
    tuner = SATuner(task, seed=0)
    _install(tuner, lambda i: (time.sleep(0.01), 1e-3 + i * 1e-9)[1], lambda i: 1e-3)
    tuner.tune(seconds=0.3, measure_option=MeasureOption(n_parallel=2, remeasure_top=0))
    assert tuner.trials > 0 and tuner.n_trial_hint >= tuner.trials - 2   # set before a batch
    assert 0 < tuner.temperature <= 1.0


@pytest.mark.parametrize("kwargs, message", [
    ({}, "give n_trial .*, seconds .*, or both"),
    ({"n_trial": -1}, "n_trial must be an int >= 0; got -1"),
    ({"n_trial": 2.5}, "n_trial must be an int >= 0; got 2.5"),
    ({"seconds": 0}, "seconds must be a positive number; got 0"),
    ({"seconds": float("inf")}, "seconds must be a positive number"),
])
def test_budget_errors(task, kwargs, message):
    with pytest.raises(LooptuneError, match=message):
        RandomTuner(task).tune(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"remeasure_top": -1}, "remeasure_top must be an int >= 0; got -1"),
    ({"race_rounds": -1}, "race_rounds must be an int >= 0; got -1"),
    ({"race_rounds": True}, "race_rounds must be an int >= 0; got True"),
    ({"remeasure_rounds": 0}, "remeasure_rounds must be an int >= 1; got 0"),
    ({"noise_retries": 1.5}, "noise_retries must be an int >= 0"),
    ({"noise_threshold": 0}, "noise_threshold must be a fraction in"),
    ({"noise_threshold": 50}, "noise_threshold must be a fraction in"),
])
def test_measure_option_errors(kwargs, message):
    with pytest.raises(LooptuneError, match=message):
        MeasureOption(**kwargs)


# ---- the noise guard ------------------------------------------------------------------------

def _guarded(task, refs, costs, **opt):
    """A Measurer whose runner is replaced by scripted (costs, reference times) pairs."""
    m = Measurer(task, MeasureOption(n_parallel=1, **opt))
    script = iter(zip(costs, refs))

    def run(res, best):
        c, ref = next(script)
        res.costs, res.error_kind = [c], ErrorKind.NONE
        return ref
    m._run = run
    return m


def test_a_candidate_measured_while_the_reference_drifted_is_measured_again(task):
    cfg = task.config_space.get(3)
    refs = [[1e-3, 1e-3], [1e-3, 1e-3],            # calibration
            [1.5e-3, 1e-3],                        # +50%: measure again
            [1.02e-3, 1e-3]]                       # calm: keep this one
    m = _guarded(task, refs, [1e-3, 1e-3, 9e-3, 2e-3])
    out = []
    for _ in range(3):
        res = MeasureResult(cfg)
        m._run_guarded(res, None)
        out.append(res)
    assert [r.noise["retries"] for r in out] == [0, 0, 1]
    assert out[2].costs == [2e-3] and out[2].noise["drift"] == pytest.approx(0.02)
    assert out[2].noise["reference_ms"] == [1.02, 1.0]


def test_the_guard_keeps_the_least_disturbed_run_when_the_noise_persists(task):
    cfg = task.config_space.get(3)
    refs = [[1e-3, 1e-3]] * 2 + [[2e-3, 2e-3], [1.3e-3, 1.3e-3], [1.8e-3, 1.8e-3]]
    m = _guarded(task, refs, [1e-3, 1e-3, 5e-3, 3e-3, 4e-3], noise_retries=2)
    for _ in range(2):
        m._run_guarded(MeasureResult(cfg), None)
    res = MeasureResult(cfg)
    m._run_guarded(res, None)
    assert res.costs == [3e-3] and res.noise["retries"] == 1
    assert res.noise["drift"] == pytest.approx(0.3)


def test_noise_threshold_none_turns_the_guard_off(task):
    m = _guarded(task, [[1e-3, 9e-3]] * 5, [1e-3] * 5, noise_threshold=None)
    res = MeasureResult(task.config_space.get(2))
    m._run_guarded(res, None)
    assert res.noise is None and res.costs == [1e-3]


@pytest.mark.slow
def test_real_measurements_log_the_drift(task, tmp_path):
    """Real workers: the runner times the reference kernel around every candidate."""
    from looptune.search import measure_configs
    opt = MeasureOption(number=1, repeat=2, timeout=20, n_parallel=1)
    res = measure_configs(task, [1, 2, 3], opt)
    assert all(r.ok and r.noise is not None for r in res)
    assert all(len(r.noise["reference_ms"]) == 2 and r.noise["reference_ms"][0] > 0
               for r in res)


# ---- the progress bar off a terminal ------------------------------------------------------

def test_progress_bar_writes_a_line_per_update_off_a_terminal(task):
    tuner = RandomTuner(task, seed=0)
    _install(tuner, lambda i: 1e-3, lambda i: 1e-3)
    out = io.StringIO()                            # not a terminal
    tuner.tune(6, MeasureOption(n_parallel=2), callbacks=[progress_bar(out)])
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 6 + 1                     # a line per trial, then the final one
    assert "6/6 trials" in lines[-1] and "re-measured 9" in lines[-1] and "done in" in lines[-1]


def test_progress_bar_shows_the_raced_incumbent_not_a_lucky_timing(task):
    """The second config's one timing is twice as fast (0.0164 GFLOP/s), by luck: it loses
    its race, and the bar keeps showing the incumbent's 0.0082 (its re-measures)."""
    tuner = RandomTuner(task, seed=0)
    order: list[int] = []

    def first(i):
        order.append(i)
        return [1e-3, 5e-4, 3e-3, 3e-3][len(order) - 1]

    _install(tuner, first, lambda i: 1e-3 if i == order[0] else 2e-3)
    out = io.StringIO()
    tuner.tune(4, MeasureOption(n_parallel=1, remeasure_top=0), callbacks=[progress_bar(out)])
    lines = out.getvalue().splitlines()
    assert tuner.races == 1 and tuner.best.config.index == order[0]
    assert "best 0.01 GFLOP/s" in lines[-1] and "4/4 trials" in lines[-1]
    assert all("best 0.02" not in ln for ln in lines[2:])     # after the race
    assert tuner.incumbent().config.index == order[0]


# ---- the OpenMP wait policy -----------------------------------------------------------------

_OMP_PROBE = """
import looptune as lt
from looptune.backends.module import openmp_settings
from looptune.search.jobs import pin_openmp_runtime
pin_openmp_runtime()      # spinning threads must not outlive an unloaded runtime at exit
A = lt.placeholder((64,), "float32", name="A")
B = lt.compute((64,), lambda i: A[i] * 2.0, name="B")
s = lt.create_schedule(B)
s[B].parallel(B.op.axis[0])
import numpy as np
f = lt.build(s, [A, B], name="probe_kernel")
f(np.ones(64, np.float32), np.empty(64, np.float32))   # starts the OpenMP runtime
import json, sys
print(json.dumps(openmp_settings()), file=sys.stdout)
"""


def _probe(env_extra: dict, tmp_path) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LOOPTUNE_OPENMP_DEFAULTS")}
    env.update(OMP_DISPLAY_ENV="VERBOSE", LOOPTUNE_CACHE=str(tmp_path / "cache"), **env_extra)
    p = subprocess.run([sys.executable, "-c", _OMP_PROBE], env=env, capture_output=True,
                       text=True, timeout=120, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def test_the_openmp_runtime_starts_with_a_short_spin(tmp_path):
    """libgomp prints the settings it started with (OMP_DISPLAY_ENV): looptune's default is a
    short spin (idle threads sleep after 10000 pauses, ~0.1 ms: back-to-back kernels find
    their threads awake, numpy's BLAS gets the cores back almost at once)."""
    settings, shown = _probe({}, tmp_path)
    assert "GOMP_SPINCOUNT = '10000'" in shown
    assert settings["chosen_by"] == "looptune" and settings["GOMP_SPINCOUNT"] == "10000"
    assert settings["OMP_WAIT_POLICY"] is None
    assert settings["runtime_loaded_before_looptune"] is False


def test_a_peer_process_gets_the_libraries_own_settings_even_after_importing_looptune(
        tmp_path):
    """runtime_env.peer_environment: a process that times another library runs its OpenMP
    runtime with libgomp's own spin, which a looptune import there leaves alone."""
    from looptune.runtime_env import peer_environment
    ours = {k: v for k, v in os.environ.items()
            if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LOOPTUNE_OPENMP_DEFAULTS")}
    ours.update(GOMP_SPINCOUNT="10000", LOOPTUNE_OPENMP_DEFAULTS="1")
    peer = peer_environment(ours)
    assert peer["GOMP_SPINCOUNT"] == "300000" and "LOOPTUNE_OPENMP_DEFAULTS" not in peer
    settings, shown = _probe({"GOMP_SPINCOUNT": peer["GOMP_SPINCOUNT"]}, tmp_path)
    assert "GOMP_SPINCOUNT = '300000'" in shown and settings["chosen_by"] == "user"
    # the user's own choice is theirs everywhere
    users = dict(ours, GOMP_SPINCOUNT="5")
    del users["LOOPTUNE_OPENMP_DEFAULTS"]
    assert peer_environment(users)["GOMP_SPINCOUNT"] == "5"


@pytest.mark.parametrize("env, shown", [
    ({"OMP_WAIT_POLICY": "active"}, "OMP_WAIT_POLICY = 'ACTIVE'"),
    ({"GOMP_SPINCOUNT": "300000"}, "GOMP_SPINCOUNT = '300000'"),     # libgomp's own default
])
def test_a_users_own_openmp_settings_win(tmp_path, env, shown):
    settings, display = _probe(env, tmp_path)
    assert settings["chosen_by"] == "user" and shown in display
    assert "GOMP_SPINCOUNT = '10000'" not in display


# ---- placement: one set of arrays per runner, a new runner per re-measure round -------------

def test_the_runner_times_every_candidate_on_the_same_arrays_refilled_with_canaries(task):
    from looptune.search.jobs import RunnerState
    state = RunnerState(task, MeasureOption(n_parallel=1, noise_threshold=None), None)
    _, tensors = task.instantiate(None)
    first = state.arrays(tensors)
    out = next(k for k in range(len(tensors)) if k not in state.inputs)
    first[out][...] = 7.0                       # what a candidate wrote
    again = state.arrays(tensors)
    assert again[out] is first[out]             # same placement for the next candidate
    assert np.isnan(again[out]).all()           # but an element it never writes is a mismatch
    assert all(again[k] is first[k] and np.array_equal(again[k], state.inputs[k])
               for k in state.inputs)


def test_the_runner_places_every_array_at_each_offset_past_a_cache_line(task):
    """Each placement holds the same inputs and canary-filled outputs, every array starting
    PLACEMENTS[p] bytes past a 64-byte line, kept from one candidate to the next."""
    from looptune.search.jobs import PLACEMENTS, RunnerState
    assert PLACEMENTS == (0, 16)
    state = RunnerState(task, MeasureOption(n_parallel=1, noise_threshold=None), None)
    _, tensors = task.instantiate(None)
    for p, offset in enumerate(PLACEMENTS):
        arrays = state.arrays(tensors, p)
        assert all(a.ctypes.data % 64 == offset for a in arrays)
        assert all(np.array_equal(arrays[k], state.inputs[k]) for k in state.inputs)
        assert state.arrays(tensors, p)[0] is arrays[0]
    assert state.arrays(tensors, 0)[0] is not state.arrays(tensors, 1)[0]


def test_a_candidate_costs_the_mean_of_its_placements():
    """A kernel fast only on aligned arrays (0.1 ms at 0, 0.3 ms at 16 past a line) costs
    0.2 ms in every repeat, never its lucky 0.1."""
    from looptune.backends.module import TimeResult
    from looptune.search.jobs import _time, placed

    class Kernel:
        def __call__(self, *arrays):
            pass

        def time(self, *arrays, number, repeat, warmup, min_repeat_ms):
            return TimeResult([1e-4 if arrays[0].ctypes.data % 64 == 0 else 3e-4] * repeat)
    a = np.zeros(1000, np.float32)
    sets = [[placed(a, 0)], [placed(a, 16)]]
    for flush in (False, True):
        costs = _time(Kernel(), sets, MeasureOption(repeat=3, flush_cache=flush))
        assert costs == pytest.approx([2e-4] * 3)


@pytest.mark.slow
@pytest.mark.parametrize("fresh", [True, False])
def test_each_remeasure_round_runs_in_a_new_runner_process(task, fresh):
    cfgs = [task.config_space.get(i) for i in (1, 2)]
    opt = MeasureOption(n_parallel=1, number=1, repeat=1, noise_threshold=None,
                        remeasure_fresh=fresh)
    with Measurer(task, opt) as m:
        assert all(r.ok for r in m.measure(cfgs))
        before = m._runner.restarts
        out = list(m.remeasure(cfgs, 3))
        assert all(r.ok and r.kind == "remeasure" for r in out) and len(out) == 6
        assert m._runner.restarts - before == (3 if fresh else 0)


def test_remeasure_fresh_must_be_a_bool():
    with pytest.raises(LooptuneError, match="remeasure_fresh must be True or False"):
        MeasureOption(remeasure_fresh="yes")


def test_warmup_ms_must_be_milliseconds():
    for bad in (-1, True, "50"):
        with pytest.raises(LooptuneError, match="warmup_ms must be milliseconds >= 0"):
            MeasureOption(warmup_ms=bad)


def test_warm_up_calls_the_kernel_untimed_for_the_time_asked_and_at_least_min_calls():
    from looptune.backends.module import warm_up
    calls = []

    def run():
        calls.append(1)
        time.sleep(0.002)
    t0 = time.perf_counter()
    n, per_call = warm_up(run, 20)
    assert time.perf_counter() - t0 >= 0.02 and n == len(calls) >= 2
    assert 0.002 <= per_call < 0.02
    calls.clear()
    assert warm_up(run, 0)[0] == 1 == len(calls)
    calls.clear()
    assert warm_up(run, 0, min_calls=2)[0] == 2 == len(calls)


def test_the_runner_warms_each_placement_up_just_before_timing_it(task, monkeypatch):
    """The warm-up (threads awake, the set's data in the caches) of each placement comes
    right before that placement's repeats, after the checked first call: the steady state of
    calls back to back on the same arrays, not the first calls after a switch of arrays."""
    import looptune.search.jobs as jobs
    warmed, timed_since = [], []

    def written() -> list[int]:
        out = [k for k, a in enumerate(outputs) if not np.isnan(a).all()]
        for a in outputs:
            a.fill(np.nan)
        return out

    def fake_warm_up(run, ms, min_calls=1):
        timed_since.append(written())
        run()
        warmed.append((written(), ms))

    monkeypatch.setattr(jobs, "warm_up", fake_warm_up)
    state = jobs.RunnerState(task, MeasureOption(n_parallel=1, noise_threshold=None,
                                                 number=1, repeat=3, warmup_ms=7.0), None)
    outputs = [state.arrays(task.instantiate(None)[1], p)[-1]
               for p in range(len(jobs.PLACEMENTS))]               # each placement's output
    out = jobs.runner_job(state, (task.config_space.get(1).index, None))
    timed_since.append(written())
    assert out["kind"] == "none" and len(out["costs"]) == 3
    assert warmed == [([0], 3.5), ([1], 3.5)]     # each placement warmed, its share of 7 ms
    assert timed_since == [[0], [0], [1]]         # (the checked call,) then each one timed
                                                  # right after its own warm-up


def test_with_flush_cache_every_block_starts_cold(task, monkeypatch):
    from looptune.search import jobs
    events = []
    monkeypatch.setattr(jobs, "_flush_cache", lambda: events.append("flush"))
    monkeypatch.setattr(jobs, "warm_up", lambda run, ms, min_calls=1: events.append("warm"))
    state = jobs.RunnerState(task, MeasureOption(n_parallel=1, noise_threshold=None,
                                                 number=1, repeat=2, flush_cache=True), None)
    out = jobs.runner_job(state, (task.config_space.get(1).index, None))
    assert len(out["costs"]) == 2
    assert events == ["warm"] + ["flush"] * 2 * len(jobs.PLACEMENTS)


def test_the_runner_frees_each_configs_workspaces_after_timing_it(task, monkeypatch):
    """A runner loads hundreds of configs' libraries (they stay loaded); each keeps its
    intermediates between calls (backends/build.py): after timing, a measure job and a
    re-measure round free them, and only after the last timed call."""
    from looptune.search import jobs
    events = []
    real_time = jobs._time
    monkeypatch.setattr(jobs, "_time", lambda f, sets, opt: (events.append("time"),
                                                            real_time(f, sets, opt))[1])
    monkeypatch.setattr(jobs, "_release", lambda f: events.append(("release", f.name)))
    state = jobs.RunnerState(task, MeasureOption(n_parallel=1, noise_threshold=None,
                                                 number=1, repeat=2), None)
    out = jobs.runner_job(state, (task.config_space.get(1).index, None))
    assert out["kind"] == "none"
    assert events == ["time", ("release", task.func_name)]
    events.clear()
    indices = [task.config_space.get(k).index for k in (1, 2)]
    out = jobs.round_job(state, indices, False)
    assert set(out["results"]) == set(indices)
    assert events == [("release", task.func_name)] * 2


# ---- OpenBLAS's idle threads --------------------------------------------------------------

_BLAS_PROBE = """
import sys, time, json
if sys.argv[1] == "numpy-first":
    import numpy
import looptune
import numpy as np
from looptune.runtime_env import blas_settings
a = np.ones((1024, 1024), np.float32)
a @ a
burnt = []
for _ in range(3):
    a @ a
    p0, t0 = time.process_time(), time.thread_time()
    time.sleep(0.05)
    burnt.append((time.process_time() - p0) - (time.thread_time() - t0))
print(json.dumps({**blas_settings(), "idle_cpu_s": sorted(burnt)[1]}))
"""


def _blas_probe(order: str, env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_THREAD_TIMEOUT", "LOOPTUNE_BLAS_DEFAULTS")}
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", _BLAS_PROBE, order], env=env,
                       capture_output=True, text=True, timeout=120, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def _threaded_openblas() -> bool:
    import numpy as np
    cfg = np.show_config(mode="dicts") if "mode" in np.show_config.__code__.co_varnames else {}
    blas = str(cfg.get("Build Dependencies", {}).get("blas", {}).get("name", ""))
    return "openblas" in blas.lower() and (os.cpu_count() or 1) >= 2


@pytest.mark.slow
def test_looptune_shortens_openblas_idle_spin_unless_the_user_chose_one():
    """OpenBLAS's idle threads spin ~0.1 s after each call (on 2 cores our kernel then ran at
    half speed right after numpy's sgemm): imported first, looptune sets its timeout, and the
    idle threads stop burning CPU; the user's own setting wins; imported after numpy it is
    too late, and blas_settings says so."""
    ours = _blas_probe("looptune-first", {})
    assert ours["OPENBLAS_THREAD_TIMEOUT"] == "18" and ours["chosen_by"] == "looptune"
    assert ours["loaded_before_looptune"] is False
    theirs = _blas_probe("looptune-first", {"OPENBLAS_THREAD_TIMEOUT": "28"})
    assert theirs["OPENBLAS_THREAD_TIMEOUT"] == "28" and theirs["chosen_by"] == "user"
    late = _blas_probe("numpy-first", {})
    assert late["loaded_before_looptune"] is True
    if _threaded_openblas():
        # CPU time (not wall time): what the idle threads take, whatever else the machine runs
        assert ours["idle_cpu_s"] < 0.008 and theirs["idle_cpu_s"] > 0.015, (ours, theirs)
