"""report.py's timing: interleaved rounds, medians and spreads."""
from __future__ import annotations

import time

import pytest

import looptune.report as report
from looptune.report import Timing, interleaved


def test_interleaved_rounds_rotate_the_order_and_pause_before_each_block(monkeypatch):
    calls: list[str] = []
    sleeps: list[float] = []
    monkeypatch.setattr(report, "MIN_REPEAT_MS", 0.0)
    monkeypatch.setattr(report, "WARMUP_MS", 0.0)
    monkeypatch.setattr(report.time, "sleep", sleeps.append)
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "numpy")}
    out = interleaved(fns, rounds=3)
    assert {k: len(t.results) for k, t in out.items()} == {"a": 3, "b": 3, "numpy": 3}
    # each block: two untimed warm-up calls, then one timed call, all of one side; rounds
    # start a, b, numpy in turn
    blocks = [calls[k:k + 3] for k in range(0, len(calls), 3)]
    assert all(len(set(b)) == 1 for b in blocks) and len(blocks) == 9
    assert [b[0] for b in blocks] == ["a", "b", "numpy", "b", "numpy", "a", "numpy", "a", "b"]
    assert sleeps == [report.SETTLE_S] * 9      # the other side's threads go idle first


def _cold_after_pause(fast_s: float, slow_s: float, cold_s: float):
    """A callable that runs ``slow_s`` per call during the ``cold_s`` after any gap of more
    than 5 ms between calls (threads that slept and wake slowly), ``fast_s`` once warm."""
    state = {"last": -1.0, "woke": 0.0}

    def spin(s):
        end = time.perf_counter() + s
        while time.perf_counter() < end:
            pass

    def fn():
        now = time.perf_counter()
        if now - state["last"] > 5e-3:
            state["woke"] = now
        spin(slow_s if now - state["woke"] < cold_s else fast_s)
        state["last"] = time.perf_counter()
    return fn


@pytest.mark.parametrize("warmup_ms, warm", [(40.0, True), (0.0, False)])
def test_interleaved_times_each_side_once_warm_after_the_pause(monkeypatch, warmup_ms, warm):
    """Each block follows the pause and WARMUP_MS of untimed calls: a side that runs slowly
    for a while after a pause (sleeping OpenMP threads on idle cores) is timed at its steady
    speed; without the warm-up its block measures the wake-up."""
    monkeypatch.setattr(report, "SETTLE_S", 0.01)
    monkeypatch.setattr(report, "MIN_REPEAT_MS", 5.0)
    monkeypatch.setattr(report, "WARMUP_MS", warmup_ms)
    fns = {"ours": _cold_after_pause(2e-4, 2e-3, 0.02), "numpy": lambda: None}
    t = interleaved(fns, rounds=2)["ours"]
    assert (t.median < 6e-4) == warm, t.results


def test_fast_call_binds_the_arguments_of_a_c_module():
    import numpy as np

    import looptune as lt
    from looptune.backends.build import BoundCall
    a = lt.placeholder((8,), name="A")
    b = lt.compute((8,), lambda i: a[i] * 2.0, name="B")
    f = lt.build(lt.create_schedule(b.op), [a, b], name="twice")
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    call = report._fast_call(f, [x, y])
    assert isinstance(call, BoundCall)
    call()
    np.testing.assert_array_equal(y, x * 2)

    seen = []
    plain = report._fast_call(lambda *args: seen.append(args), [x, y])   # no bind(): checked
    plain()
    assert seen == [(x, y)]


def test_side_by_side_runs_every_side_on_the_same_arrays(monkeypatch):
    """Where the arrays lie (4K aliasing of input and output rows) moved softmax 30%: every
    side, and numpy, gets the same arrays, checked against numpy first."""
    from pathlib import Path

    from looptune.operators import load_operators
    examples = Path(__file__).resolve().parents[2] / "examples"
    ops = {o.name: o for o in load_operators(str(examples / "softmax.py"))}
    op, args = ops["softmax"], (8, 40)
    seen = {}
    monkeypatch.setattr(report, "_fast_call", lambda f, a: seen.setdefault(len(seen), a))
    monkeypatch.setattr(report, "interleaved", lambda calls, rounds: {
        k: Timing([1e-3]) for k in calls})
    first, second = op.hand_schedule(*args), op.hand_schedule(*args)
    t, flop = report.timed_side_by_side(op, args, {"a": first, "b": second}, "c", 1)
    assert set(t) == {"a", "b", "numpy"} and flop > 0
    assert len(seen) == 2 and all(x is y for x, y in zip(seen[0], seen[1]))


def test_timing_median_spread_and_text():
    t = Timing([1e-3, 1.2e-3, 0.8e-3])
    assert t.median == 1e-3 and t.spread == pytest.approx(0.2)
    assert str(t) == "1.000 ms ±20.0%"
    assert Timing([0.0, 0.0]).median > 0          # ratios stay defined


@pytest.mark.parametrize("blas, omp, says", [
    ({"loaded_before_looptune": True, "chosen_by": "looptune"}, {}, "numpy was imported before"),
    ({"loaded_before_looptune": False, "chosen_by": "looptune"},
     {"runtime_loaded_before_looptune": True}, "OpenMP runtime was loaded before"),
    ({"loaded_before_looptune": False, "chosen_by": "looptune"},
     {"runtime_loaded_before_looptune": False, "OMP_WAIT_POLICY": "active",
      "GOMP_SPINCOUNT": None}, "OMP_WAIT_POLICY=active"),
    ({"loaded_before_looptune": False, "chosen_by": "looptune"},
     {"runtime_loaded_before_looptune": False, "OMP_WAIT_POLICY": "passive",
      "chosen_by": "user"}, ""),
    ({"loaded_before_looptune": False, "chosen_by": "looptune"},
     {"runtime_loaded_before_looptune": False, "OMP_WAIT_POLICY": None,
      "GOMP_SPINCOUNT": "10000", "chosen_by": "looptune"}, ""),
    ({"loaded_before_looptune": False, "chosen_by": "looptune"},
     {"runtime_loaded_before_looptune": False, "OMP_WAIT_POLICY": None,
      "GOMP_SPINCOUNT": "300000", "chosen_by": "user"}, "GOMP_SPINCOUNT=300000"),
])
def test_the_tables_say_when_a_thread_pool_kept_settings_that_fight(monkeypatch, blas, omp,
                                                                     says):
    import looptune.runtime_env as env
    monkeypatch.setattr(env, "blas_settings", lambda: blas)
    monkeypatch.setattr(env, "openmp_settings", lambda: omp)
    note = report._omp_note()
    assert (says in note) if says else note == ""
