"""The looptune command's tests: quick side-by-side timing."""
from __future__ import annotations

import pytest

import looptune.report as report


@pytest.fixture(scope="module", autouse=True)
def quick_side_by_side_timing(request):
    """report.py's interleaved timing (the summary after ``looptune tune``, ``bench``, the
    baselines of ``report -o``) pauses 0.2 s and warms up for 100 ms before each block of at
    least 50 ms, so that its figures can be trusted: a tune's summary (3 sides x 5 rounds)
    took 5.3 s of every tune. These tests check the commands' flow and output, not the
    figures, so the pause, warm-up and block are 10 ms, 5 ms and 5 ms here (module scope:
    module-scoped fixtures that tune get them too). test_report.py checks the timing itself,
    with its own settings."""
    if request.path.name == "test_report.py":
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(report, "SETTLE_S", 0.01)
        mp.setattr(report, "WARMUP_MS", 5.0)
        mp.setattr(report, "MIN_REPEAT_MS", 5.0)
        yield
