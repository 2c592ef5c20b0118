"""Simulated annealing over per-knob indices, with parallel chains.

Each of ``n_chains`` chains holds a current config. A step proposes a neighbour — one knob
moved to an adjacent choice or to a random one (two knobs when the neighbourhood is used up) —
that was never proposed; after measurement the chain moves there with the Metropolis rule on
the relative fitness change, at a temperature that decays geometrically from ``t0`` to
``t1`` over the run. Chains take turns, so one batch carries steps of several chains (a chain
may have several neighbours of its current config in flight; their results apply in order).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import LooptuneError
from .measure import MeasureResult
from .space import ConfigEntity
from .task import Task
from .tuner import Tuner


@dataclass
class _Chain:
    point: int | None = None
    fit: float = 0.0


class SATuner(Tuner):
    """Simulated annealing: neighbourhood moves, a temperature schedule, parallel chains."""

    def __init__(self, task: Task, n_chains: int = 4, t0: float = 1.0, t1: float = 0.01,
                 n_trial_hint: int = 200, seed: int | None = None):
        super().__init__(task, seed)
        if n_chains < 1 or not t0 > 0 or not t1 > 0:
            raise LooptuneError("SATuner: need n_chains >= 1 and positive temperatures")
        self.chains = [_Chain() for _ in range(n_chains)]
        self.t0, self.t1 = t0, t1
        self.n_trial_hint = n_trial_hint
        self._turn = 0
        self._pending: dict[int, int] = {}           # proposed index -> chain
        self._dims = self.space.dims
        self._best_fit = 0.0

    def tune(self, n_trial: int | None = None, *args, **kwargs):
        """As :meth:`Tuner.tune`; the temperature decays over ``n_trial`` (under a time budget
        alone, over the trials the pace so far predicts)."""
        self.n_trial_hint = n_trial
        return super().tune(n_trial, *args, **kwargs)

    @property
    def temperature(self) -> float:
        """The current temperature (geometric from t0 to t1 over the expected trials)."""
        progress = min(1.0, self.trials / max(1, self.n_trial_hint))
        return self.t0 * (self.t1 / self.t0) ** progress

    def next_batch(self, n: int) -> list[ConfigEntity]:
        out: list[ConfigEntity] = []
        for _ in range(4 * n):
            if len(out) >= n:
                break
            cid = self._turn
            self._turn = (self._turn + 1) % len(self.chains)
            chain = self.chains[cid]
            i = self._random_unvisited() if chain.point is None else self._neighbour(chain.point)
            if i is None or not self._take(i):
                continue
            self._pending[i] = cid
            out.append(self.space.get(i))
        return out

    def update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        foreign = []
        for c, r in zip(configs, results):
            fit = self.fitness(r)
            self._best_fit = max(self._best_fit, fit)
            cid = self._pending.pop(c.index, None)
            if cid is None:
                foreign.append((fit, c.index))
            else:
                self._step(self.chains[cid], c.index, fit)
        # resumed history: start idle chains at the best configs measured before
        for fit, i in sorted(foreign, key=lambda x: (-x[0], x[1])):
            idle = next((ch for ch in self.chains if ch.point is None), None)
            if idle is None:
                break
            idle.point, idle.fit = i, fit

    def _step(self, chain: _Chain, index: int, fit: float) -> None:
        if chain.point is None or fit >= chain.fit:
            chain.point, chain.fit = index, fit
            return
        delta = (fit - chain.fit) / max(self._best_fit, 1e-30)     # relative, in [-1, 0)
        if self.rng.random() < math.exp(delta / self.temperature):
            chain.point, chain.fit = index, fit

    def _neighbour(self, point: int) -> int | None:
        vec = list(self.space.vector(point))
        movable = [k for k, d in enumerate(self._dims) if d > 1]
        if not movable:
            return self._random_unvisited()
        for n_moves in (1, 2, 3):
            for _ in range(24):
                cand = list(vec)
                for k in self.rng.choice(movable, size=min(n_moves, len(movable)),
                                         replace=False):
                    cand[int(k)] = self._move(cand[int(k)], self._dims[int(k)])
                i = self.space.index_of(cand)
                if i not in self.visited:
                    return i
        return self._random_unvisited()

    def _move(self, v: int, d: int) -> int:
        if self.rng.random() < 0.5:                  # adjacent choice (splits are ordered)
            step = 1 if self.rng.random() < 0.5 else -1
            return v + step if 0 <= v + step < d else v - step
        other = int(self.rng.integers(d - 1))
        return other if other < v else other + 1
