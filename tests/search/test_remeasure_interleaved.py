"""The interleaved re-measure round (search/jobs.py ``round_job``): a round's configs are timed
in turns, block by block, so that a machine whose speed moves in phases (a shared VM's L3 and
memory bandwidth) slows every config alike and their ratios hold."""
from __future__ import annotations

import numpy as np
import pytest

from looptune.errors import LooptuneError
from looptune.search import MeasureOption, Measurer, create_task
from looptune.search import jobs


class PhasedClock:
    """A simulated ``time`` module: the machine runs at full speed, then at half speed, in
    phases of ``phase`` simulated seconds; a kernel call advances the clock by its work over
    the current speed."""

    def __init__(self, phase: float):
        self.now, self.phase = 0.0, phase

    def perf_counter(self) -> float:
        return self.now

    def run(self, work: float) -> None:
        slow = int(self.now / self.phase) % 2 == 1
        self.now += work * (2.0 if slow else 1.0)


class Kernel:
    """A fake compiled function: ``work`` seconds a call at full speed; records its calls."""

    def __init__(self, name: str, work: float, clock: PhasedClock, calls: list):
        self.name, self.work, self.clock, self.calls = name, work, clock, calls

    def __call__(self, *arrays):
        self.calls.append(self.name)
        self.clock.run(self.work)


def _kernels(monkeypatch, works: dict, phase: float):
    clock, calls = PhasedClock(phase), []
    monkeypatch.setattr(jobs, "time", clock)
    return {i: Kernel(i, w, clock, calls) for i, w in works.items()}, calls


def test_configs_are_timed_in_turns_block_by_block_the_order_rotated(monkeypatch):
    funcs, calls = _kernels(monkeypatch, {"a": 1e-3, "b": 1e-3, "c": 1e-3}, phase=1e9)
    opt = MeasureOption(number=2, repeat=3, warmup_ms=0)
    costs = jobs._time_interleaved(funcs, [[]], opt)
    # one warm-up call each, then per repeat one turn each, rotated: an untimed call and a
    # timed block of 2 calls
    assert calls == ["a", "b", "c",
                     "a", "a", "a", "b", "b", "b", "c", "c", "c",
                     "b", "b", "b", "c", "c", "c", "a", "a", "a",
                     "c", "c", "c", "a", "a", "a", "b", "b", "b"]
    assert costs == {i: pytest.approx([1e-3] * 3) for i in "abc"}


def test_each_cost_is_the_mean_over_the_placements(monkeypatch):
    funcs, calls = _kernels(monkeypatch, {"a": 1e-3, "b": 4e-3}, phase=1e9)
    sets = [["set0"], ["set1"]]
    costs = jobs._time_interleaved(funcs, sets, MeasureOption(number=1, repeat=2, warmup_ms=0))
    assert costs == {"a": pytest.approx([1e-3] * 2), "b": pytest.approx([4e-3] * 2)}


def test_interleaved_ratios_hold_where_one_config_after_another_ranks_the_phases(monkeypatch):
    """Two configs, b 10% slower than a, on a machine that runs at half speed every other
    0.25 s (simulated). One after the other (``_time``, as the runner times one candidate), a
    is timed in a slow phase and b in the fast one after it, and b comes out faster; in turns
    both meet each phase alike."""
    works = {"a": 1.0e-3, "b": 1.1e-3}
    opt = MeasureOption(number=4, repeat=25, warmup_ms=0)
    funcs, _ = _kernels(monkeypatch, works, phase=0.25)
    funcs["a"].clock.now = 0.25                      # a slow phase begins
    one_by_one = {i: float(np.mean(jobs._time(_Timed(f), [[]], opt))) for i, f in funcs.items()}
    assert one_by_one["b"] < one_by_one["a"] / 1.5   # the phases decide
    funcs, _ = _kernels(monkeypatch, works, phase=0.25)
    funcs["a"].clock.now = 0.25
    costs = jobs._time_interleaved(funcs, [[]], opt)
    a, b = (float(np.mean(costs[i])) for i in "ab")
    assert b / a == pytest.approx(1.1, rel=0.05)


class _Timed:
    """``Kernel`` with the ``time`` method of a compiled function, on the simulated clock."""

    def __init__(self, kernel: Kernel):
        self.k = kernel

    def __call__(self, *arrays):
        self.k()

    def time(self, *arrays, number, repeat, warmup, min_repeat_ms):
        from looptune.backends.module import TimeResult
        out = []
        for _ in range(repeat):
            t0 = self.k.clock.now
            for _ in range(number):
                self.k()
            out.append((self.k.clock.now - t0) / number)
        return TimeResult(out)


def test_min_repeat_ms_raises_each_configs_block_to_that_length(monkeypatch):
    funcs, calls = _kernels(monkeypatch, {"fast": 1e-4, "slow": 2e-3}, phase=1e9)
    opt = MeasureOption(number=1, repeat=1, warmup_ms=0, min_repeat_ms=1.0)
    jobs._time_interleaved(funcs, [[]], opt)
    timed = calls[2:]                 # after one warm-up call each; a turn's untimed call
    assert timed.count("fast") == 1 + 11 and timed.count("slow") == 1 + 1


def test_remeasure_interleaved_must_be_a_bool():
    with pytest.raises(LooptuneError, match="remeasure_interleaved must be True or False"):
        MeasureOption(remeasure_interleaved=1)


@pytest.fixture(scope="module")
def task():
    return create_task("test_matmul", (16, 16, 16))


@pytest.mark.parametrize("interleaved", [True, False])
def test_remeasure_rounds_give_every_config_its_costs_both_ways(task, interleaved):
    cfgs = [task.config_space.get(i) for i in (1, 2, 3)]
    opt = MeasureOption(n_parallel=1, number=2, repeat=3, remeasure_fresh=False,
                        remeasure_interleaved=interleaved, noise_threshold=None)
    with Measurer(task, opt) as m:
        assert all(r.ok for r in m.measure(cfgs))
        runs_before = m.runs
        out = list(m.remeasure(cfgs, 2))
    assert [r.config.index for r in out] == [1, 2, 3, 2, 3, 1]
    assert all(r.ok and r.kind == "remeasure" and len(r.costs) == 3 for r in out)
    assert all(r.gflops and r.gflops > 0 for r in out)
    # interleaved: one runner job per round, else one per config
    assert m.runs - runs_before == (2 if interleaved else 6)


def test_an_interleaved_round_is_checked_by_the_noise_guard_as_a_whole(task):
    cfgs = [task.config_space.get(i) for i in (1, 2, 3)]
    opt = MeasureOption(n_parallel=1, number=2, repeat=2, remeasure_fresh=False)
    with Measurer(task, opt) as m:
        list(m.measure(cfgs))
        out = list(m.remeasure(cfgs, 1))
    assert len(out) == 3 and all(r.ok for r in out)
    noise = out[0].noise
    assert noise["interleaved"] == 3 and len(noise["reference_ms"]) == 2 and "drift" in noise
    assert all(r.noise is noise for r in out)        # one round, one reading


def test_a_wrong_config_in_a_round_is_reported_and_the_others_timed(task, monkeypatch):
    """The round checks each config's output before timing: one that differs from the
    reference is a wrong_result, the others are timed as usual."""
    state = jobs.RunnerState(task, MeasureOption(noise_threshold=None, repeat=2), None)
    current, build = [], jobs.build

    def instantiate(cfg):
        current.append(cfg.index)
        return type(task).instantiate(task, cfg)

    def broken_build(*a, **k):
        f = build(*a, **k)
        if current[-1] != 2:
            return f
        return lambda *arrays: (f(*arrays), arrays[-1].__iadd__(1.0))
    monkeypatch.setattr(task, "instantiate", instantiate)
    monkeypatch.setattr(jobs, "build", broken_build)
    out = jobs.round_job(state, [1, 2, 3], guard=False)["results"]
    assert out[2]["kind"] == "wrong_result" and "differs from the reference" in out[2]["msg"]
    assert all(out[i]["kind"] == "none" and len(out[i]["costs"]) == 2 for i in (1, 3))


def test_a_round_job_that_dies_falls_back_to_one_run_per_config(task):
    """A round job that crashes (or hangs, or raises) says nothing of which config was at
    fault: the round is then run one config at a time, which names it."""
    from looptune.search.workers import Outcome
    cfgs = [task.config_space.get(i) for i in (1, 2)]
    opt = MeasureOption(n_parallel=1, number=1, repeat=2, remeasure_fresh=False,
                        noise_threshold=None)
    with Measurer(task, opt) as m:
        list(m.measure(cfgs))
        real_map, sent = m._runner.map, []

        def map_(jobs_, timeout):
            sent.append(jobs_[0][0])
            if jobs_[0][0] == "round":
                return [Outcome("crash", "killed by signal 11", 0.1)]
            return real_map(jobs_, timeout)
        m._runner.map = map_
        out = list(m.remeasure(cfgs, 1))
    assert sent == ["round", 1, 2]
    assert [r.config.index for r in out] == [1, 2] and all(r.ok for r in out)
