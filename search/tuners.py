"""The simple tuners: random search and grid search.

Both propose configs by index and never propose one twice; with the same ``seed`` on the same
space, ``RandomTuner`` proposes the same sequence.
"""
from __future__ import annotations

from collections.abc import Sequence

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


def make_tuner(name: str, task: Task, seed: int | None = None,
               transfer_logs: Sequence | None = None, **optuna) -> Tuner:
    """A tuner by name (one of :data:`TUNERS`) for ``task``. ``transfer_logs`` (logs of other
    tasks) warm-start the ``gbt`` tuner; ``optuna`` keyword arguments (sampler, storage,
    study_name) go to the Optuna tuner. ``grid`` takes no seed."""
    from ..errors import LooptuneError
    from . import GATuner, GBTTuner, OptunaTuner, SATuner
    classes = {"gbt": GBTTuner, "ga": GATuner, "sa": SATuner, "random": RandomTuner,
               "grid": GridTuner, "optuna": OptunaTuner}
    if name not in classes:
        raise LooptuneError(f"unknown tuner {name!r}; use one of {', '.join(TUNERS)}")
    if transfer_logs and name != "gbt":
        raise LooptuneError(f"transfer logs warm-start the cost model of the gbt tuner; the "
                            f"{name!r} tuner has none: use tuner 'gbt' or drop the logs")
    if name == "grid":
        return GridTuner(task)
    if name == "optuna":
        return OptunaTuner(task, seed=seed, **optuna)
    if name == "gbt":
        return GBTTuner(task, seed=seed, transfer_logs=transfer_logs)
    return classes[name](task, seed=seed)
