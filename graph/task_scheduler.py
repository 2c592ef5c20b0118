"""The task scheduler of whole-model tuning: which task gets the next round of trials.

A model's latency is ``sum(weight_i x latency_i)`` over its distinct tasks (``weight_i``: how
many times task i's kernel runs per inference). Ansor's task scheduler (Zheng et al., OSDI
2020, section 6) spends the next trials where they are expected to shorten that sum most:
the derivative of the model latency with respect to a task's trials is ``weight_i`` times
the slope of that task's best latency over its recent trials. This is that scheduler,
simplified to what our measurements support:

1. warm-up: every task gets one round, in order (round robin), so that each has a best
   latency and a slope;
2. exploration: a share ``exploration`` of the later rounds go to the live task that has had
   the fewest trials (ties: the larger ``weight x best``), so no task starves;
3. otherwise the live task with the largest expected gain gets the round: its weight times
   ``alpha x backward + (1 - alpha) x forward`` (Ansor's ``alpha`` = 0.2), where
   ``backward`` is how much its best latency fell over its last ``window`` trials, per trial
   (0 until it has that many), and ``forward`` is Ansor's optimistic guess that the next
   trials keep shrinking it as ``1/t``: ``best / trials`` per trial. Both are seconds of model
   latency saved per trial. A task with no correct measurement yet scores 0; when every live
   task scores 0 the round goes to the least-tuned one.

A task whose space is exhausted, or whose round measured nothing, is dead: it gets no more
rounds. Ansor's second forward guess (a task may reach the FLOP rate of the fastest similar
task) is left out: our auto tasks carry no similarity tags, and the FLOP counts of pooling or
elementwise kernels do not predict their (memory-bound) latency. Ansor's random
epsilon-greedy choice is replaced by the deterministic exploration share above.

The scheduler only decides; :func:`looptune.graph.tune.tune_tasks` measures. Everything is
deterministic, so tests drive it with synthetic costs.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import LooptuneError

INF = float("inf")


@dataclass
class TaskProgress:
    """What the scheduler knows of one task: its weight, and its best latency after each of
    its trials (``inf`` until one succeeds)."""

    weight: float
    curve: list[float] = field(default_factory=list)   # best-so-far seconds after each trial
    rounds: int = 0
    dead: bool = False

    @property
    def trials(self) -> int:
        return len(self.curve)

    @property
    def best(self) -> float:
        """The best latency so far (``inf`` when none was measured)."""
        return self.curve[-1] if self.curve else INF

    def backward(self, window: int) -> float:
        """Seconds its best fell per trial over the last ``window`` trials (0 with fewer
        trials, or while it has no correct measurement)."""
        if len(self.curve) <= window or not math.isfinite(self.best):
            return 0.0
        before = self.curve[-1 - window]
        if not math.isfinite(before):            # the first success came in the window
            before = next(c for c in self.curve if math.isfinite(c))
        return (before - self.best) / window

    def forward(self) -> float:
        """The optimistic per-trial gain of Ansor's scheduler, ``best / trials``."""
        return self.best / self.trials if self.curve and math.isfinite(self.best) else 0.0


@dataclass(frozen=True)
class Pick:
    """The scheduler's choice: the task index and why: ``warmup``, ``explore``, ``gradient``
    (the largest expected gain) or ``least`` (no task has a gain yet: the least tuned)."""

    task: int
    reason: str


class TaskScheduler:
    """Gradient-based task scheduling (Ansor's, simplified; see the module docstring).

    ``weights``: one positive weight per task. ``exploration``: the share of post-warm-up
    rounds given to the least-tuned task (0 to 1). ``window``: trials over which a task's
    recent improvement is measured (Ansor: 3 rounds). ``alpha``: the weight of that measured
    improvement against the optimistic ``best / trials`` guess.
    """

    def __init__(self, weights: Sequence[float], exploration: float = 0.1, window: int = 24,
                 alpha: float = 0.2):
        if not weights:
            raise LooptuneError("TaskScheduler: give at least one task weight")
        for k, w in enumerate(weights):
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not w > 0:
                raise LooptuneError(f"TaskScheduler: weight {k} must be a positive number; "
                                    f"got {w!r}")
        if isinstance(exploration, bool) or not 0.0 <= exploration <= 1.0:
            raise LooptuneError(f"TaskScheduler: exploration must be a share in [0, 1]; got "
                                f"{exploration!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise LooptuneError(f"TaskScheduler: window must be a positive int; got {window!r}")
        if isinstance(alpha, bool) or not 0.0 <= alpha <= 1.0:
            raise LooptuneError(f"TaskScheduler: alpha must be in [0, 1]; got {alpha!r}")
        self.tasks = [TaskProgress(float(w)) for w in weights]
        self.alpha = alpha
        self.exploration = exploration
        self.window = window
        self.after_warmup = 0        # rounds picked after the warm-up
        self.explored = 0            # of which exploration rounds

    # ---- what the driver tells it ---------------------------------------------------------

    def observe(self, k: int, costs: Sequence[float], round_: bool = True) -> None:
        """Task ``k`` measured candidates of these ``costs`` (seconds; ``inf`` for a failed
        one), in order. ``round_=False`` for records resumed from a log (not a round)."""
        t = self.tasks[k]
        best = t.best
        for cost in costs:
            c = float(cost)
            best = min(best, c if math.isfinite(c) and c > 0 else INF)
            t.curve.append(best)
        if round_:
            t.rounds += 1
            if not costs:
                t.dead = True

    def kill(self, k: int) -> None:
        """Task ``k`` gets no more rounds (its space is exhausted)."""
        self.tasks[k].dead = True

    # ---- the decision ------------------------------------------------------------------------

    def live(self) -> list[int]:
        return [k for k, t in enumerate(self.tasks) if not t.dead]

    def estimated_latency(self) -> float:
        """``sum(weight x best)`` over the tasks (``inf`` while one has no measured best)."""
        return sum(t.weight * t.best for t in self.tasks)

    def score(self, k: int) -> float:
        """The expected model latency saved per trial given to task ``k``."""
        t = self.tasks[k]
        return t.weight * (self.alpha * t.backward(self.window) +
                           (1 - self.alpha) * t.forward())

    def pick(self) -> Pick | None:
        """The task of the next round, or None when every task is dead."""
        live = self.live()
        if not live:
            return None
        for k in live:
            if self.tasks[k].trials == 0 and self.tasks[k].rounds == 0:
                return Pick(k, "warmup")
        self.after_warmup += 1
        least = min(live, key=lambda k: (self.tasks[k].trials, -self._share(k), k))
        if self.explored < math.floor(self.exploration * self.after_warmup + 1e-9):
            self.explored += 1
            return Pick(least, "explore")
        scores = {k: self.score(k) for k in live}
        if max(scores.values()) > 0:
            return Pick(min(live, key=lambda k: (-scores[k], k)), "gradient")
        return Pick(least, "least")

    def _share(self, k: int) -> float:
        """Task ``k``'s part of the model latency (tasks without a best come last)."""
        t = self.tasks[k]
        return t.weight * t.best if math.isfinite(t.best) else -1.0
