"""A tuner guided by cost models: gradient-boosted trees on loop-nest and knob features.

The loop: the first ``n_init`` configs are random (unless transferred records already train
a model); then configs come in plans of ``plan_size``, before each of which the models are
retrained on every measurement (target: throughput rank or log throughput). To fill a plan,
the proposer scores thousands of candidates with a model on knob features (no lowering),
gives the shortlist loop-nest features, and the loop-nest model with the knob model (the sum
of their ranks) picks the plan, diversity and an ``eps`` share of random configs included.
No config is proposed twice, and each is proposed as its canonical config (the knobs its
program does not read at their first choice): what is measured, learnt from and walked from
is the program's own knobs, never a random draw's debris in unread ones. A config raced or
re-measured is learnt from the median of its re-measures.

Parts: :mod:`.cost_model` (features, fit, predict), :mod:`.proposer` (candidates and
plans), :mod:`.transfer` (warm start from other tasks' records). Options are one frozen
:class:`GBTOptions`. Measured figures behind the defaults: ``benchmarks/NOTES.md``.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from ..errors import LooptuneError
from .cost_model import (
    CostModel,
    GBTModel,
    KnobFeatures,
    LoopNestFeatures,
    Objective,
    RankSum,
    Scorer,
    parse_enum,
    targets,
)
from .features import N_FEATURES
from .measure import MeasureResult
from .proposer import Proposer, Scoring
from .space import ConfigEntity
from .task import Task
from .transfer import TransferPolicy, TransferSlots
from .tuner import Tuner

log = logging.getLogger("looptune.search.gbt_tuner")

__all__ = ["GBTOptions", "GBTTuner", "Objective", "Scoring", "TransferSlots"]


@dataclass(frozen=True)
class GBTOptions:
    """The options of :class:`GBTTuner` (strings are accepted for the enums).

    Model: ``objective`` (``"rank"``/``"log"``), ``n_init`` correct measurements before the
    model proposes, ``model_params`` for ``HistGradientBoostingRegressor``, or
    ``model_factory(seed) -> CostModel`` for another model. Plans: ``plan_size`` configs per
    retraining, ``eps`` the share of random slots, ``diversity`` (0: pure predicted rank).
    Candidates: ``scoring`` (``"two_stage"``/``"loop_nest"``), ``candidates`` scored on knob
    features per plan, ``explore`` given loop-nest features per plan (the shortlist),
    ``random_share`` of either drawn at random, ``n_chains`` and ``sa_steps`` of annealing.
    Transfer: ``transfer_logs``, ``transfer_slots`` (``"warm"``/``"start"``/``"random"``),
    ``n_warm``, ``max_transfer`` records, ``min_compare`` (see :mod:`.transfer`).
    """

    objective: Objective = Objective.RANK
    n_init: int = 12
    eps: float = 0.1
    plan_size: int = 8
    diversity: float = 0.5
    scoring: Scoring = Scoring.TWO_STAGE
    candidates: int = 4096
    explore: int = 64
    random_share: float = 0.5
    n_chains: int = 8
    sa_steps: int = 12
    transfer_logs: tuple = ()
    transfer_slots: TransferSlots = TransferSlots.WARM
    n_warm: int = 6
    max_transfer: int = 400
    min_compare: int = 4
    model_params: Mapping = field(default_factory=dict)
    model_factory: Callable[[int | None], CostModel] | None = None

    def __post_init__(self):
        put = object.__setattr__
        put(self, "objective", parse_enum(Objective, self.objective, "GBTTuner: objective"))
        put(self, "scoring", parse_enum(Scoring, self.scoring, "GBTTuner: scoring"))
        put(self, "transfer_slots", parse_enum(TransferSlots, self.transfer_slots,
                                               "GBTTuner: transfer_slots"))
        logs = self.transfer_logs or ()
        put(self, "transfer_logs", (logs,) if isinstance(logs, (str, os.PathLike))
            else tuple(logs))
        if not isinstance(self.model_params, Mapping):
            raise LooptuneError(f"GBTTuner: model_params must be a dict of "
                                f"HistGradientBoostingRegressor arguments; got "
                                f"{self.model_params!r}")
        put(self, "model_params", MappingProxyType(dict(self.model_params)))
        if self.model_factory is not None and not callable(self.model_factory):
            raise LooptuneError(f"GBTTuner: model_factory must be a callable seed -> "
                                f"CostModel; got {self.model_factory!r}")
        for name, low, high in _RANGES:
            _check_range(name, getattr(self, name), low, high)


_RANGES = (("n_init", 1, None), ("plan_size", 1, None), ("candidates", 1, None),
           ("explore", 1, None), ("n_chains", 1, None), ("sa_steps", 0, None),
           ("n_warm", 0, None), ("max_transfer", 0, None), ("min_compare", 1, None),
           ("eps", 0.0, 1.0), ("random_share", 0.0, 1.0), ("diversity", 0.0, None))
_FIELDS = tuple(f.name for f in dataclasses.fields(GBTOptions))


def _check_range(name: str, value, low, high) -> None:
    want_int = isinstance(low, int)
    kinds = (int, np.integer) if want_int else (int, float, np.integer, np.floating)
    ok = isinstance(value, kinds) and not isinstance(value, bool) and value >= low and \
        (high is None or value <= high)
    if not ok:
        what = "an int" if want_int else "a number"
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise LooptuneError(f"GBTTuner: {name} must be {what} {bound}; got {value!r}")


def _options(options: GBTOptions | None, kwargs: dict) -> GBTOptions:
    if options is not None and not isinstance(options, GBTOptions):
        raise LooptuneError(f"GBTTuner: options must be a GBTOptions; got "
                            f"{type(options).__name__}")
    unknown = sorted(set(kwargs) - set(_FIELDS))
    if unknown:
        raise LooptuneError(f"GBTTuner: unknown option {', '.join(map(repr, unknown))}; the "
                            f"options are {', '.join(_FIELDS)}")
    options = options or GBTOptions()
    return dataclasses.replace(options, **kwargs) if kwargs else options


class GBTTuner(Tuner):
    """Cost-model-guided search (see the module docstring).

    ``GBTTuner(task, seed, options=GBTOptions(...))``, or the options as keyword arguments
    (``GBTTuner(task, eps=0.2)``); ``tuner.options`` can be replaced between plans. Reading
    an option as an attribute (``tuner.n_init``) works too; setting one replaces
    ``tuner.options``.
    """

    OPTIONS = GBTOptions      # the keyword options it takes (make_tuner checks them)

    def __init__(self, task: Task, seed: int | None = None, *,
                 options: GBTOptions | None = None, **kwargs):
        super().__init__(task, seed)
        self.__dict__["_options"] = _options(options, kwargs)
        self.loop_nest = LoopNestFeatures(task, log=log)
        self.knobs = KnobFeatures(self.space)
        self._fit: dict[int, float] = {}                # measured index -> fitness
        self._program_of: dict[int, int] = {}           # measured index -> measured config
        self._folded = 0                                # re-measures folded into _fit
        self.transfer = TransferPolicy(task, seed, self.options, lambda: self._new_model())
        self.proposer = Proposer(self.space, self.visited, self.rng, self.loop_nest,
                                 self.knobs, self.options, self._fit, self.transfer.warm)
        self._plan: list[int] = []                      # proposed (visited), not handed out
        self._stale = False
        self.scorers: dict[str, Scorer] = {}            # "target", "transfer", "knob"
        self.model: CostModel | None = None             # target's, or transfer's before
        self.active = "target"
        if self.transfer.n_transferred:
            self.active = "transfer"
            self._retrain()

    # ---- options -----------------------------------------------------------------------------

    @property
    def options(self) -> GBTOptions:
        return self.__dict__["_options"]

    @options.setter
    def options(self, value: GBTOptions) -> None:
        if not isinstance(value, GBTOptions):
            raise LooptuneError(f"GBTTuner.options must be a GBTOptions; got "
                                f"{type(value).__name__}")
        self.__dict__["_options"] = value
        self.proposer.options = self.transfer.options = value

    def __getattr__(self, name: str):
        if name in _FIELDS and "_options" in self.__dict__:
            return getattr(self.__dict__["_options"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value) -> None:
        if name in _FIELDS:
            self.options = dataclasses.replace(self.options, **{name: value})
        else:
            super().__setattr__(name, value)

    @property
    def n_transferred(self) -> int:
        """How many records of other tasks the transferred model learns from."""
        return self.transfer.n_transferred

    @property
    def transfer_trusted(self) -> bool:
        """False once transfer was set aside (its picks ranked below the random ones)."""
        return self.transfer.trusted

    @transfer_trusted.setter
    def transfer_trusted(self, value: bool) -> None:
        self.transfer.trusted = bool(value)

    def features(self, index: int) -> np.ndarray | None:
        """The loop-nest features of config ``index`` (cached); None for an invalid config."""
        return self.loop_nest.get(index)

    # ---- proposing ---------------------------------------------------------------------------

    def _random_unvisited(self, tries: int = 64) -> int | None:
        return self.proposer.random_unvisited(tries)

    def has_next(self) -> bool:
        return bool(self._plan) or super().has_next()

    def next_batch(self, n: int) -> list[ConfigEntity]:
        """The next ``n`` configs of the plan; an empty plan is refilled with ``plan_size``
        configs chosen by models retrained on every measurement so far."""
        if not self._plan and self.transfer.warm_pending:
            xfer = self.scorers.get("transfer")
            self._plan = self.transfer.warm_plan(self.proposer, xfer)
            self._stale = self._stale or xfer is not None   # the transferred model retires
        if not self._plan:
            if self._stale:
                self._retrain()
                self._stale = False
            self._plan = self._make_plan(max(n, self.plan_size))
        out, self._plan = self._plan[:n], self._plan[n:]
        return [self.space.get(i) for i in out]

    def _make_plan(self, n: int) -> list[int]:
        target, knob = self._ranking(), self.scorers.get("knob")
        xfer = self.scorers.get("transfer")
        if not self.transfer.takes_slots(target is not None):
            xfer = None
        ranked: list[int] = []
        if target is not None:
            if knob is not None:
                self.proposer.explore_wide(knob, target)
            else:
                self.proposer.explore(target)
            ranked = self.proposer.ranked_pool(target)
        elif xfer is not None:
            with self.proposer.using_rng(self.transfer.rng):   # the random start's draws
                self.proposer.explore(xfer)                     # stay as without transfer
        xranked = self.proposer.ranked_pool(xfer) if xfer is not None else None

        def random_slot(drawn: int | None) -> int | None:
            i = self.transfer.slot_pick(drawn, xranked, self.visited)
            j = self.proposer.canonical(i) if i is not None else None
            if j != i and i in self.transfer.kinds:       # what kind of pick it was
                self.transfer.kinds[j] = self.transfer.kinds.pop(i)
            return j
        return self.proposer.pick_plan(n, ranked, target is not None, random_slot)

    # ---- learning ----------------------------------------------------------------------------

    def update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        for c, r in zip(configs, results):
            self._fit[c.index] = self.fitness(r)
            self._program_of[c.index] = r.config.index
            self.proposer.pool.pop(c.index, None)
        self._stale = True            # retrained when the plan runs out

    def _fold_remeasures(self) -> None:
        """Configs timed again (races, a resumed log's re-measures) learn from the median of
        their re-measures (``measure.counted``) instead of their one search timing, which
        was biased fast (it is why they were timed again): the model's view of the best
        region is then the steadiest it has."""
        if len(self.remeasured) == self._folded:
            return
        self._folded = len(self.remeasured)
        again: dict[int, list[MeasureResult]] = {}
        for r in self.remeasured:
            if r.ok:
                again.setdefault(r.config.index, []).append(r)
        for i, program in self._program_of.items():
            if program in again and self._fit.get(i, 0.0) > 0.0:
                rs = again[program]
                self._fit[i] = self.fitness(MeasureResult(rs[0].config, [r.cost for r in rs],
                                                          flop=rs[0].flop))

    @property
    def _models(self) -> dict[str, CostModel]:
        """The fitted models by name: "target", "transfer", "knob"."""
        return {name: s.model for name, s in self.scorers.items()}

    def _own(self) -> list[int]:
        """Measured configs this task's models learn from (not the warm start's)."""
        return [i for i in self._fit if i not in self.transfer.warm]

    def _training_set(self) -> tuple[np.ndarray, np.ndarray]:
        """The loop-nest rows and targets of the measured configs that have features."""
        idx = [i for i in self._own() if self.features(i) is not None]
        y = targets([self._fit[i] for i in idx], self.options.objective)
        return (self.loop_nest.matrix(idx) if idx else np.empty((0, N_FEATURES))), y

    def _new_model(self) -> CostModel:
        factory = self.options.model_factory
        if factory is not None:
            return factory(self.seed)
        return GBTModel(self.seed, self.options.model_params)

    def _retrain(self) -> None:
        self._fold_remeasures()
        x, y = self._training_set()
        own = self._own()
        scorers: dict = {}
        xfer = self.transfer.fit(x, y)
        if xfer is not None:
            scorers["transfer"] = Scorer("transfer", xfer, self.loop_nest.matrix)
        if sum(1 for i in own if self._fit[i] > 0) >= self.options.n_init and len(y) >= 2:
            scorers["target"] = Scorer("target", self._new_model().fit(x, y),
                                       self.loop_nest.matrix)
            if self.options.scoring is Scoring.TWO_STAGE:   # every measurement, failed too
                yk = targets([self._fit[i] for i in own], self.options.objective)
                scorers["knob"] = Scorer("knob", self._new_model().fit(
                    self.knobs.matrix(own), yk), self.knobs.matrix)
        self.scorers = scorers
        self.transfer.judge(self._fit)
        self.active = "target" if "target" in scorers else \
            "transfer" if "transfer" in scorers else "target"
        self.model = scorers[self.active].model if self.active in scorers else None

    def _ranking(self) -> Scorer | RankSum | None:
        """What ranks the pool: the target model, with two-stage scoring together with the
        knob model (the sum of their ranks)."""
        target, knob = self.scorers.get("target"), self.scorers.get("knob")
        if target is None or knob is None:
            return target
        return RankSum("target+knob", (target, knob))
