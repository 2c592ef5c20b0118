"""The simple tuners: random search and grid search.

Both propose configs by index and never propose one twice; with the same ``seed`` on the same
space, ``RandomTuner`` proposes the same sequence.
"""
from __future__ import annotations

from .space import ConfigEntity
from .task import Task
from .tuner import Tuner


class RandomTuner(Tuner):
    """Uniformly random configs, without repetition."""

    def next_batch(self, n: int) -> list[ConfigEntity]:
        out = []
        while len(out) < n:
            i = self._random_unvisited()
            if i is None:
                break
            self._take(i)
            out.append(self.space.get(i))
        return out


class GridTuner(Tuner):
    """Every config in index order (``seed`` is accepted for a uniform interface)."""

    def __init__(self, task: Task, seed: int | None = None):
        super().__init__(task, seed)
        self._next = 0

    def next_batch(self, n: int) -> list[ConfigEntity]:
        out = []
        size = self.space.size
        while len(out) < n and self._next < size:
            i = self._next
            self._next += 1
            if self._take(i):
                out.append(self.space.get(i))
        return out
