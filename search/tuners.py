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


TUNERS = ("gbt", "ga", "sa", "random", "grid", "optuna")


def make_tuner(name: str, task: Task, seed: int | None = None, **optuna) -> Tuner:
    """A tuner by name (one of :data:`TUNERS`) for ``task``; ``optuna`` keyword arguments
    (sampler, storage, study_name) go to the Optuna tuner. ``grid`` takes no seed."""
    from . import GATuner, GBTTuner, OptunaTuner, SATuner
    classes = {"gbt": GBTTuner, "ga": GATuner, "sa": SATuner, "random": RandomTuner,
               "grid": GridTuner, "optuna": OptunaTuner}
    if name not in classes:
        from ..errors import LooptuneError
        raise LooptuneError(f"unknown tuner {name!r}; use one of {', '.join(TUNERS)}")
    if name == "grid":
        return GridTuner(task)
    if name == "optuna":
        return OptunaTuner(task, seed=seed, **optuna)
    return classes[name](task, seed=seed)
