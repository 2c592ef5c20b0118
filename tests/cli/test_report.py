"""report.py's timing: interleaved rounds, medians and spreads."""
from __future__ import annotations

import pytest

import looptune.report as report
from looptune.report import Timing, interleaved


def test_interleaved_rounds_rotate_the_order_and_pause_before_each_block(monkeypatch):
    calls: list[str] = []
    sleeps: list[float] = []
    monkeypatch.setattr(report, "MIN_REPEAT_MS", 0.0)
    monkeypatch.setattr(report.time, "sleep", sleeps.append)
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "numpy")}
    out = interleaved(fns, rounds=3)
    assert {k: len(t.results) for k, t in out.items()} == {"a": 3, "b": 3, "numpy": 3}
    blocks = calls[6:]                     # after calibration: 2 calls per side
    # each block: a warm-up call and one timed call; rounds start a, b, numpy in turn
    firsts = [blocks[k] for k in range(0, len(blocks), 2)]
    assert firsts == ["a", "b", "numpy", "b", "numpy", "a", "numpy", "a", "b"]
    assert sleeps == [report.SETTLE_S] * 9      # the other side's threads go idle first


def test_timing_median_spread_and_text():
    t = Timing([1e-3, 1.2e-3, 0.8e-3])
    assert t.median == 1e-3 and t.spread == pytest.approx(0.2)
    assert str(t) == "1.000 ms ±20.0%"
    assert Timing([0.0, 0.0]).median > 0          # ratios stay defined
