"""The tuner registry (:data:`TUNERS`, :func:`make_tuner`) and the simple tuners: random
search and grid search.

Both simple tuners propose configs by index and never propose one twice; with the same
``seed`` on the same space, ``RandomTuner`` proposes the same sequence. Every place that
takes a tuner by name (the CLI, ``auto_schedule``, ``lt.graph.tune``) looks it up here.
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

from ..errors import LooptuneError
from .ga_tuner import GATuner
from .gbt_tuner import GBTTuner
from .optuna_tuner import OptunaTuner
from .sa_tuner import SATuner
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


TUNERS: dict[str, type[Tuner]] = {"gbt": GBTTuner, "ga": GATuner, "sa": SATuner,
                                   "random": RandomTuner, "grid": GridTuner,
                                   "optuna": OptunaTuner}


def tuner_class(tuner: str | type[Tuner], context: str = "") -> type[Tuner]:
    """The tuner class called ``tuner`` in :data:`TUNERS` (a Tuner subclass passes through);
    else a LooptuneError listing the names, prefixed with ``context`` (what was called)."""
    if isinstance(tuner, type) and issubclass(tuner, Tuner):
        return tuner
    cls = TUNERS.get(tuner) if isinstance(tuner, str) else None
    if cls is None:
        where = f"{context}: " if context else ""
        raise LooptuneError(f"{where}tuner must be one of {', '.join(TUNERS)} (or a Tuner "
                            f"class); got {tuner!r}")
    return cls


def make_tuner(tuner: str | type[Tuner], task: Task, seed: int | None = None,
               transfer_logs: Sequence | None = None, **options: Any) -> Tuner:
    """A tuner for ``task``: ``tuner`` is a name in :data:`TUNERS` or a Tuner class.
    ``transfer_logs`` (logs of other tasks) warm-start a tuner with a cost model (``gbt``);
    other keyword ``options`` go to the tuner's constructor (e.g. the Optuna tuner's
    ``sampler``, ``storage``, ``study_name``); a tuner that takes no such option is refused."""
    cls = tuner_class(tuner)
    name = next((n for n, c in TUNERS.items() if c is cls), cls.__name__)
    accepted = _options_of(cls)
    if transfer_logs:
        if "transfer_logs" not in accepted:
            raise LooptuneError(f"transfer logs warm-start the cost model of the gbt tuner; "
                                f"the {name!r} tuner has none: use tuner 'gbt' or drop the "
                                "logs")
        options["transfer_logs"] = transfer_logs
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise LooptuneError(f"tuner {name!r} takes no option {', '.join(unknown)}; its options "
                            f"are {', '.join(accepted)}")
    return cls(task, seed=seed, **options)


def _options_of(cls: type[Tuner]) -> list[str]:
    """The keyword options a tuner class takes, in order: its ``OPTIONS`` dataclass's fields
    (GBTTuner, whose constructor takes ``**kwargs``), else its constructor's parameters."""
    if dataclasses.is_dataclass(getattr(cls, "OPTIONS", None)):
        return ["options", *(f.name for f in dataclasses.fields(cls.OPTIONS))]
    params = inspect.signature(cls).parameters
    return [n for n, p in params.items() if n not in ("self", "task")
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
