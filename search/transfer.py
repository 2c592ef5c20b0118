"""Transfer for the GBT tuner: a model trained on other tasks' records, and the part it plays.

``transfer_logs=[paths]`` adds the records of *other* tasks of those logs (their templates
must be registered, i.e. imported); records of this task are left to ``tune(resume=...)``.
Their loop-nest features (comparable across tasks) and targets (normalised per task) train
the *transferred* model. Its part is chosen by :class:`TransferSlots`:

- ``WARM`` (default): the first ``n_warm`` trials are its best predictions (spread over knob
  values as ``diversity`` asks), explored and ranked on the side with a generator, pool and
  feature cache of their own. Then the search runs as without transfer: the same random
  draws, the same pool, and a model that never learns from the warm picks (nor starts
  annealing chains from them). Under a deterministic cost it makes the very picks of the
  search without transfer (tested): it can only lose the ``n_warm`` trials it gives up.
- ``START``: every other pick of the random start is its best unmeasured config instead, and
  this task's model learns from them. It is also trained on this task's records, weighted
  0.5 at first and less as they accumulate (0.5 x 2 ``n_init`` / their number, past
  2 ``n_init``).
- ``RANDOM``: as ``START``, and afterwards also every other one of the ``eps`` random picks.

With ``START`` and ``RANDOM`` the transferred picks must earn their slots: once at least
``min_compare`` of them and of the random picks are measured, transfer is set aside for good
if its picks rank lower, on average, among this task's measurements than the random picks.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from ..errors import LooptuneError
from .cost_model import CostModel, Objective, Scorer, targets
from .features import N_FEATURES, config_features
from .task import Task

if TYPE_CHECKING:
    from .gbt_tuner import GBTOptions
    from .proposer import Proposer

log = logging.getLogger("looptune.search.transfer")


class TransferSlots(str, Enum):
    """Which picks the transferred model makes (see the module docstring)."""

    WARM = "warm"
    START = "start"
    RANDOM = "random"


class TransferPolicy:
    """The transferred records and model of one tuner, and which slots the model fills.

    ``rng`` is transfer's own generator, so that the tuner's draws stay as without transfer;
    ``warm`` holds the warm start's picks (kept out of the tuner's own model); ``kinds`` maps
    each pick of a random slot to ``"random"`` or ``"transfer"``."""

    def __init__(self, task: Task, seed: int | None, options: GBTOptions,
                 make_model: Callable[[], CostModel]):
        self.options, self.make_model = options, make_model
        self.rng = np.random.default_rng(None if seed is None else [seed, 0x7f4a])
        self.trusted = True
        self.warm: set[int] = set()
        self.warm_pending = options.transfer_slots is TransferSlots.WARM
        self.kinds: dict[int, str] = {}
        self.random_slots = 0
        self.x, self.y = load_transfer(task, options.transfer_logs, options.max_transfer,
                                       options.objective, self.rng)

    @property
    def n_transferred(self) -> int:
        """How many records of other tasks the transferred model learns from."""
        return len(self.y)

    def fit(self, x: np.ndarray, y: np.ndarray) -> CostModel | None:
        """The transferred model, trained on the other tasks' records and this task's
        (``x``, ``y``: the latter count less as they accumulate); None when it has no part
        left to play."""
        if not len(self.y) or not self.trusted or \
                (self.options.transfer_slots is TransferSlots.WARM and not self.warm_pending):
            return None
        n_init = self.options.n_init
        xs, ys = self.x, self.y
        w = np.full(len(ys), 0.5 * min(1.0, 2.0 * n_init / max(1, len(y))))
        if len(y):
            xs, ys = np.vstack([xs, x]), np.concatenate([ys, y])
            w = np.concatenate([w, np.ones(len(y))])
        return self.make_model().fit(xs, ys, sample_weight=w)

    def takes_slots(self, has_target: bool) -> bool:
        """Whether the transferred model replaces random picks now."""
        slots = self.options.transfer_slots
        return self.trusted and (slots is TransferSlots.RANDOM or
                                 (slots is TransferSlots.START and not has_target))

    def slot_pick(self, drawn: int | None, xranked: list[int] | None,
                  visited: set[int]) -> int | None:
        """The pick of a random slot: ``drawn`` (a random config), or for every other slot
        while ``xranked`` (the transferred model's ranking) is given, its best unvisited."""
        self.random_slots += 1
        i, kind = drawn, "random"
        if xranked is not None and self.random_slots % 2 == 1:
            while xranked and xranked[0] in visited:
                xranked.pop(0)
            if xranked:
                i, kind = xranked.pop(0), "transfer"
        if i is not None and self.n_transferred and \
                self.options.transfer_slots is not TransferSlots.WARM:
            self.kinds[i] = kind
        return i

    def warm_plan(self, proposer: Proposer, score: Scorer | None) -> list[int]:
        """The warm start: the ``n_warm`` best configs by ``score`` (the transferred model),
        explored and ranked by a side proposer (its own pool, feature cache and this
        policy's generator)."""
        self.warm_pending = False
        if score is None or self.options.n_warm == 0:
            return []
        side = proposer.side(self.rng)
        side.explore(score)
        out = side.pick_diverse(side.ranked_pool(score), self.options.n_warm)
        self.warm.update(out)
        self.kinds.update(dict.fromkeys(out, "transfer"))
        log.info("GBTTuner: warm start with %d configs from the transferred model", len(out))
        return out

    def judge(self, fit: dict[int, float]) -> None:
        """Set transfer aside for good once its picks rank lower, on average, than the
        random picks among this task's measurements (``fit``: index -> fitness)."""
        if not self.trusted or not self.n_transferred:
            return
        rank = dict(zip(fit, targets(list(fit.values()), Objective.RANK)))
        by: dict[str, list[float]] = {"random": [], "transfer": []}
        for i, kind in self.kinds.items():
            if i in rank:
                by[kind].append(rank[i])
        if min(len(v) for v in by.values()) >= self.options.min_compare and \
                np.mean(by["transfer"]) < np.mean(by["random"]):
            self.trusted = False
            log.info("GBTTuner: transfer set aside: its %d picks rank %.2f on average among "
                     "this task's measurements, %d random picks %.2f", len(by["transfer"]),
                     np.mean(by["transfer"]), len(by["random"]), np.mean(by["random"]))


# ---- loading other tasks' records --------------------------------------------------------------

def load_transfer(task: Task, logs: Sequence, limit: int, objective: Objective,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Loop-nest features and targets of the records of ``logs`` that belong to other tasks
    than ``task``: at most ``limit`` in all, shared between the tasks. A task whose template
    cannot be instantiated, or configs its template rejects, are skipped with a warning."""
    empty = np.empty((0, N_FEATURES)), np.empty(0)
    if not logs:
        return empty
    from .log import load_records
    from .template import get_template
    by_task: dict = {}
    for r in load_records(list(logs)):
        if r.task != task.key:
            by_task.setdefault(r.task, []).append(r)
    xs, ys = [], []
    per_task = max(1, limit // max(1, len(by_task)))
    for key, recs in by_task.items():
        try:
            other = Task(get_template(key.name), key.args, key.target)
        except Exception as e:  # noqa: BLE001 - another task's template: skip its records
            log.warning("GBTTuner: cannot use the records of %s for transfer: %s", key, _why(e))
            continue
        feats, fits, bad = _features(other, _pick_records(recs, per_task, rng))
        if bad:
            log.warning("GBTTuner: transfer skips %d configs of %s that its template "
                        "rejects (e.g. %s)", len(bad), key, bad[0])
        if len(feats) >= 2:
            xs.append(np.stack(feats))
            ys.append(targets(np.array(fits), objective))
    if not xs:
        return empty
    log.info("GBTTuner: %d transferred records from %d tasks", sum(map(len, ys)), len(ys))
    return np.vstack(xs), np.concatenate(ys)


def _features(task: Task, records: list) -> tuple[list, list, list[str]]:
    """(features, fitness, why each rejected config failed) of ``records`` of ``task``.
    A config whose template raises anything (not only a LooptuneError: another operator's
    template may raise what it likes) is skipped, not fatal."""
    feats, fits, bad = [], [], []
    for r in records:
        try:
            f = config_features(task, task.config_space.from_json(r.config))
        except (LooptuneError, IndexError):
            f = None                        # no longer fits the template's knobs
        except Exception as e:  # noqa: BLE001 - the other template's own failure
            bad.append(f"config {r.index}: {_why(e)}")
            continue
        if f is not None:
            feats.append(f)
            fits.append(r.gflops or (1.0 / r.cost if r.ok else 0.0))
    return feats, fits, bad


def _pick_records(recs: list, limit: int, rng: np.random.Generator) -> list:
    """Distinct configs; the best half of the budget, the rest spread over the others."""
    uniq = list({r.index: r for r in recs}.values())
    if len(uniq) <= limit:
        return uniq
    uniq.sort(key=lambda r: r.cost)
    top, rest = uniq[:limit // 2], uniq[limit // 2:]
    pick = rng.choice(len(rest), size=limit - len(top), replace=False)
    return top + [rest[int(k)] for k in sorted(pick)]


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
