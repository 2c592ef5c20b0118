"""A fake measurer for tuner tests (in a module of its own: ``conftest`` is a name several
test folders use, so ``from conftest import ...`` could find another folder's)."""
from __future__ import annotations

from looptune.search import ErrorKind, MeasureResult


class FakeMeasurer:
    """Stands in for the Measurer: a deterministic cost per index, no processes.

    ``cost(index)`` returns seconds, or None for a failed (build_error) candidate; ``on_batch``
    is called before each batch (tests use it to press Ctrl-C mid-run)."""

    def __init__(self, task, cost, on_batch=None):
        self.task, self.cost, self.on_batch = task, cost, on_batch
        self.measured: list[int] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def measure(self, configs):
        if self.on_batch is not None:
            self.on_batch(self)
        for c in configs:
            self.measured.append(c.index)
            sec = self.cost(c.index)
            if sec is None:
                yield MeasureResult(c, [], ErrorKind.BUILD_ERROR, "fake failure",
                                    flop=self.task.flop)
            else:
                yield MeasureResult(c, [sec, sec * 1.1, sec * 0.9], flop=self.task.flop)
