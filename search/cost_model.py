"""Cost models for the GBT tuner: what a config is described by, and what learns from it.

Two featurizers describe configs of one task as rows of numbers:

- :class:`LoopNestFeatures`: the features of the lowered loop nest
  (:mod:`looptune.search.features`): comparable across tasks, but each config costs a
  lowering (a few to a few tens of ms); cached per config, ``None`` for an invalid schedule;
- :class:`KnobFeatures`: the knob choices themselves (their index, a one-hot of small knobs,
  log2 of split factors, loop positions of a reorder, annotation codes); no lowering, so
  thousands of configs are described in milliseconds; meaningful within one space only.

A :class:`CostModel` is fitted on feature rows and training targets (:func:`targets`: higher
is better) and predicts scores for new rows. :class:`GBTModel` (scikit-learn's
``HistGradientBoostingRegressor``) is the default; any class with the same two methods can
replace it (``GBTOptions(model=...)``).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

import numpy as np

from ..errors import LooptuneError
from .features import config_features_keyed
from .knobs import AnnotateKnob, Knob, OtherKnob, ReorderKnob, SplitKnob

__all__ = [
    "GBT_PARAMS",
    "CostModel",
    "GBTModel",
    "KnobFeatures",
    "LoopNestFeatures",
    "Objective",
    "RankSum",
    "Scorer",
    "one_thread",
    "parse_enum",
    "targets",
]


class Objective(str, Enum):
    """The training target: ``RANK`` each config's throughput rank among the measured ones,
    scaled to [0, 1] (order only: outliers and failed candidates cannot distort it); ``LOG``
    log throughput relative to the best."""

    RANK = "rank"
    LOG = "log"


def parse_enum(cls: type[Enum], value, what: str):
    """``value`` (a member or its string) as a member of ``cls``; a LooptuneError naming
    ``what`` and the choices otherwise."""
    try:
        return cls(value)
    except ValueError:
        choices = ", ".join(m.value for m in cls)
        raise LooptuneError(f"{what} must be one of {choices}; got {value!r}") from None


def targets(fit, objective: Objective | str) -> np.ndarray:
    """Training targets from fitness values (0 = failed), higher is better."""
    fit = np.asarray(fit, dtype=np.float64)
    ok = fit > 0
    if Objective(objective) is Objective.LOG:
        if not ok.any():
            return np.zeros_like(fit)
        y = np.empty_like(fit)
        y[ok] = np.log(fit[ok]) - np.log(fit[ok].max())
        y[~ok] = y[ok].min() - 1.0
        return y
    from scipy.stats import rankdata  # a scikit-learn dependency
    return (rankdata(fit, method="average") - 1.0) / max(1, len(fit) - 1)   # ties share


def one_thread():
    """OpenMP limited to one thread for the model: on a few hundred rows threads only add
    overhead, and on a machine whose cores are busy measuring (or shared) scikit-learn's
    OpenMP loops slow down 10-100x from spinning threads."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="openmp")


# ---- models ------------------------------------------------------------------------------------

class CostModel(ABC):
    """What the tuner asks of a model: learn scores from rows, predict scores for rows."""

    @abstractmethod
    def fit(self, x: np.ndarray, y: np.ndarray,
            sample_weight: np.ndarray | None = None) -> CostModel:
        """Learn targets ``y`` (higher is better) of feature rows ``x``; returns self."""

    @abstractmethod
    def predict(self, x: np.ndarray) -> np.ndarray:
        """A score per row of ``x`` (higher is better; only the order matters)."""


GBT_PARAMS = MappingProxyType({"max_iter": 120, "learning_rate": 0.1, "max_leaf_nodes": 15,
                               "min_samples_leaf": 3, "l2_regularization": 1.0,
                               "early_stopping": False})


class GBTModel(CostModel):
    """Gradient-boosted trees (``HistGradientBoostingRegressor``), ``GBT_PARAMS`` updated by
    ``params``, run on one OpenMP thread."""

    def __init__(self, seed: int | None = None, params: Mapping | None = None):
        from sklearn.ensemble import HistGradientBoostingRegressor
        kw = {**GBT_PARAMS, **(params or {})}
        try:
            self.model = HistGradientBoostingRegressor(random_state=seed or 0, **kw)
        except TypeError as e:
            raise LooptuneError(f"GBTModel: model_params {dict(params or {})} do not fit "
                                f"HistGradientBoostingRegressor: {e}") from None

    def fit(self, x, y, sample_weight=None) -> GBTModel:
        with one_thread():
            self.model.fit(x, y, sample_weight=sample_weight)
        return self

    def predict(self, x) -> np.ndarray:
        with one_thread():
            return self.model.predict(x)


@dataclass(frozen=True)
class Scorer:
    """A fitted ``model`` and the ``rows`` that describe configs to it: ``scorer(configs)``
    is the model's scores of ``configs`` (indices, or knob vectors for knob models)."""

    name: str
    model: CostModel
    rows: Callable[[Any], np.ndarray]

    def __call__(self, configs) -> np.ndarray:
        return self.model.predict(self.rows(configs))


@dataclass(frozen=True)
class RankSum:
    """Configs scored by the sum of their ranks under each of ``scorers`` (ties share):
    an ensemble that no one model's scale dominates."""

    name: str
    scorers: tuple[Scorer, ...]

    def __call__(self, configs) -> np.ndarray:
        from scipy.stats import rankdata
        return np.sum([rankdata(s(configs)) for s in self.scorers], axis=0)


# ---- featurizers -------------------------------------------------------------------------------

class LoopNestFeatures:
    """The loop-nest features of the configs of ``task``, computed once (``None``: the
    config makes an invalid schedule or its template raises).

    A view knows the configs it asked for (``index in view``); :meth:`fork` makes a view
    that shares the computed features but whose asking leaves this view's knowledge as it
    was (the transfer warm start explores on the side that way)."""

    def __init__(self, task, log=None, memo: dict[int, np.ndarray | None] | None = None,
                 keys: dict[int, str | None] | None = None):
        self.task, self.log = task, log
        self._memo: dict[int, np.ndarray | None] = {} if memo is None else memo
        self._keys: dict[int, str | None] = {} if keys is None else keys
        self._seen: set[int] = set()

    def __contains__(self, index: int) -> bool:
        return index in self._seen

    def get(self, index: int) -> np.ndarray | None:
        """The features of config ``index`` (computed on first use)."""
        if index not in self._memo:
            try:
                self._memo[index], self._keys[index] = config_features_keyed(
                    self.task, self.task.config_space.get(index))
            except Exception as e:  # noqa: BLE001 - a template bug: measuring records it
                if self.log is not None:
                    self.log.debug("config %d of %s: the template raised %s: %s", index,
                                   self.task.key, type(e).__name__, e)
                self._memo[index] = None
        self._seen.add(index)
        return self._memo[index]

    def alias(self, index: int, same: int) -> None:
        """Config ``index`` builds the program of config ``same`` (its canonical config):
        it takes ``same``'s features, if computed, without a lowering of its own."""
        if same in self._memo and index not in self._memo:
            self._memo[index] = self._memo[same]
            self._keys[index] = self._keys.get(same)
        if same in self._seen and index in self._memo:
            self._seen.add(index)

    def program(self, index: int) -> str | None:
        """The program key of config ``index`` where its features were computed and its
        steps identify its program (:func:`~.features.config_features_keyed`), else None."""
        return self._keys.get(index)

    def known(self, index: int) -> np.ndarray | None:
        """The features of ``index`` if this view asked for them before, else None."""
        return self._memo[index] if index in self._seen else None

    def matrix(self, indices: Sequence[int]) -> np.ndarray:
        """The rows of ``indices`` (each must have features: ``get`` is not None)."""
        return np.stack([self._memo[i] for i in indices])

    def fork(self) -> LoopNestFeatures:
        """A view sharing the computed features, knowing what this one knows."""
        view = LoopNestFeatures(self.task, self.log, self._memo, self._keys)
        view._seen = set(self._seen)
        return view


MAX_ONEHOT = 16          # knobs with at most this many choices also get a one-hot
_ANNS = ("none", "unroll", "vec", "parallel")
_TABLE_MAX = 1 << 16     # knobs with more choices get their rows computed on demand


class KnobFeatures:
    """Rows describing configs of one space by their knob choices; no lowering.

    Per knob: its choice index scaled to [0, 1]; a one-hot of the choice when the knob has
    at most ``MAX_ONEHOT`` choices; and by kind: log2 of each split size (outer first), each
    reordered loop's new position (scaled), a one-hot of each annotated loop's annotation
    (none/unroll/vec/parallel), a ``define_knob`` value when it is a number (sign x log2(1 +
    |v|)). Rows of ``matrix(vectors)`` are gathered from per-knob tables."""

    def __init__(self, space):
        self.space = space
        self.knobs: list[Knob] = list(space.knobs.values())
        self.dims = [len(k) for k in self.knobs]
        self._tables: list[np.ndarray | None] = [None] * len(self.knobs)   # built on use
        self.width = sum(len(self._row(k, 0)) for k in self.knobs)
        self.names = [f"{name}.{n}" for name, k in space.knobs.items()
                      for n in self._row_names(k)]

    def vectors(self, indices: Sequence[int]) -> np.ndarray:
        """Per-knob choice indices of config ``indices`` (one row each)."""
        if not len(indices):
            return np.empty((0, len(self.dims)), dtype=np.int64)
        return np.array([self.space.vector(int(i)) for i in indices], dtype=np.int64)

    def matrix(self, configs) -> np.ndarray:
        """Feature rows of configs: per-knob choice vectors (an n x knobs array) or config
        indices (a sequence of ints)."""
        vectors = np.asarray(configs, dtype=np.int64) if np.ndim(configs) == 2 else \
            self.vectors(configs)
        cols = []
        for k, knob in enumerate(self.knobs):
            col = vectors[:, k]
            if len(knob) <= _TABLE_MAX:
                if self._tables[k] is None:
                    self._tables[k] = np.stack([self._row(knob, v) for v in range(len(knob))])
                cols.append(self._tables[k][col])
            else:
                uniq, inv = np.unique(col, return_inverse=True)
                rows = np.stack([self._row(knob, int(u)) for u in uniq])
                cols.append(rows[inv.reshape(-1)])
        return np.hstack(cols) if cols else np.zeros((len(vectors), 0))

    @staticmethod
    def _row(knob: Knob, v: int) -> np.ndarray:
        d = len(knob)
        row = [v / (d - 1) if d > 1 else 0.0]
        if d <= MAX_ONEHOT:
            row += [float(v == c) for c in range(d)]
        ent = knob.get(v)
        if isinstance(knob, SplitKnob):
            row += [math.log2(s) for s in ent.size]
        elif isinstance(knob, ReorderKnob):
            pos = [0.0] * knob.n
            for p, loop in enumerate(ent.perm):
                pos[loop] = p / max(1, knob.n - 1)
            row += pos
        elif isinstance(knob, AnnotateKnob):
            row += [float(a == b) for a in ent.anns for b in _ANNS]
        elif isinstance(knob, OtherKnob) and _numeric(knob.values):
            x = float(ent.val)
            row.append(math.copysign(math.log2(1.0 + abs(x)), x))
        return np.asarray(row, dtype=np.float64)

    @staticmethod
    def _row_names(knob: Knob) -> list[str]:
        d = len(knob)
        names = ["index"] + ([f"is{c}" for c in range(d)] if d <= MAX_ONEHOT else [])
        if isinstance(knob, SplitKnob):
            names += [f"log2_size{s}" for s in range(knob.num_outputs)]
        elif isinstance(knob, ReorderKnob):
            names += [f"pos{loop}" for loop in range(knob.n)]
        elif isinstance(knob, AnnotateKnob):
            names += [f"loop{n}_{a}" for n in range(knob.n) for a in _ANNS]
        elif isinstance(knob, OtherKnob) and _numeric(knob.values):
            names.append("log2_value")
        return names


def _numeric(values: Sequence) -> bool:
    return all(isinstance(v, (bool, int, float, np.integer, np.floating)) for v in values)
