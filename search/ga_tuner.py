"""A genetic algorithm over per-knob indices.

Individuals are vectors of knob indices. Each generation of ``pop_size`` new configs is bred
from the previous generation plus the ``elite_num`` best configs seen so far (elites survive
as parents; they are never measured again): two parents are picked by tournaments of
``tournament_size``, combined by uniform crossover, and each gene mutates with probability
``mutation_prob``. A child already measured or already queued is re-mutated, then replaced by
a random unvisited config, so no config is measured twice. Failed candidates have fitness 0.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from ..errors import LooptuneError
from .measure import MeasureResult
from .space import ConfigEntity
from .task import Task
from .tuner import Tuner


class GATuner(Tuner):
    """Genetic search: population, elitism, tournament selection, crossover, mutation."""

    def __init__(self, task: Task, pop_size: int = 16, elite_num: int = 2,
                 mutation_prob: float = 0.1, tournament_size: int = 3, seed: int | None = None):
        super().__init__(task, seed)
        if pop_size < 2 or not 0 <= elite_num < pop_size:
            raise LooptuneError(f"GATuner: need pop_size >= 2 and 0 <= elite_num < pop_size; "
                                f"got pop_size={pop_size}, elite_num={elite_num}")
        if not 0.0 <= mutation_prob <= 1.0 or tournament_size < 1:
            raise LooptuneError("GATuner: mutation_prob must be in [0, 1] and "
                                "tournament_size >= 1")
        self.pop_size, self.elite_num = pop_size, elite_num
        self.mutation_prob, self.tournament_size = mutation_prob, tournament_size
        self.scores: dict[int, float] = {}          # measured index -> fitness
        self.population: list[int] = []             # the generation being measured
        self.queue: deque[int] = deque()            # bred, not yet proposed
        self.generations = 0
        self._dims = self.space.dims

    def next_batch(self, n: int) -> list[ConfigEntity]:
        out = []
        while len(out) < n:
            if not self.queue:
                self._breed()
                if not self.queue:
                    break
            i = self.queue.popleft()
            if self._take(i):
                out.append(self.space.get(i))
        return out

    def update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        for c, r in zip(configs, results):
            self.scores[c.index] = self.fitness(r)

    # ---- breeding ------------------------------------------------------------------------

    def _ranked(self, indices) -> list[int]:
        """``indices`` best first (ties broken by index, for reproducibility)."""
        return sorted(indices, key=lambda i: (-self.scores.get(i, 0.0), i))

    def _parents(self) -> list[int]:
        gen = [i for i in self.population if i in self.scores]
        if not gen:                                  # after a resume: the best measured
            gen = self._ranked(self.scores)[:self.pop_size]
        elites = self._ranked(self.scores)[:self.elite_num]
        return list(dict.fromkeys(gen + elites))

    def _breed(self) -> None:
        self.generations += 1
        parents = self._parents()
        queued: set[int] = set()
        children: list[int] = []
        attempts = 0
        while len(children) < self.pop_size and attempts < 20 * self.pop_size:
            attempts += 1
            child = self._child(parents) if len(parents) >= 2 else None
            if child is None or child in self.visited or child in queued:
                child = self._random_unvisited()
                if child is None or child in queued:
                    continue
            queued.add(child)
            children.append(child)
        self.population = children
        self.queue.extend(children)

    def _tournament(self, pool: list[int]) -> list[int]:
        picks = self.rng.choice(len(pool), size=min(self.tournament_size, len(pool)),
                                replace=False)
        best = self._ranked([pool[int(p)] for p in picks])[0]
        return list(self.space.vector(best))

    def _child(self, pool: list[int]) -> int | None:
        a, b = self._tournament(pool), self._tournament(pool)
        mask = self.rng.random(len(a)) < 0.5
        genes = [x if m else y for x, y, m in zip(a, b, mask)]
        for _ in range(8):
            genes = self._mutate(genes)
            child = self.space.index_of(genes)
            if child not in self.visited:
                return child
        return None

    def _mutate(self, genes: list[int]) -> list[int]:
        out = list(genes)
        flips = self.rng.random(len(out)) < self.mutation_prob
        for k, (flip, d) in enumerate(zip(flips, self._dims)):
            if flip and d > 1:
                out[k] = int(self.rng.integers(d))
        return out
