"""How the GBT tuner finds candidates and picks the configs it measures.

Candidates that have loop-nest features and were never proposed form a *pool*, re-ranked by
the current model before every plan. The pool is filled in one of two ways (:class:`Scoring`):

- ``TWO_STAGE`` (default): ``candidates`` unvisited configs are scored by a model on knob
  features (no lowering): a ``random_share`` of them random draws, the rest found by
  simulated-annealing walkers over that model started from the best measured configs, the
  pool's best and the best random draws. The ``explore`` best of them (the shortlist) get
  loop-nest features and join the pool;
- ``LOOP_NEST``: ``n_chains`` annealing chains walk over the loop-nest model itself, and at
  most ``explore`` new configs (a ``random_share`` of them random) get features per plan.

A plan takes the pool's best predictions (with ``diversity`` > 0, traded for knob values the
plan does not have yet); each slot is instead a random config with probability ``eps``.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from .cost_model import KnobFeatures, LoopNestFeatures, RankSum, Scorer
from .space import random_unvisited, take

if TYPE_CHECKING:
    from .gbt_tuner import GBTOptions
    from .space import ConfigSpace


Score = Scorer | RankSum      # scores configs: indices (or knob vectors, for knob scorers)


class Scoring(str, Enum):
    """How candidates are found and scored before the loop-nest model ranks them."""

    TWO_STAGE = "two_stage"
    LOOP_NEST = "loop_nest"


class Proposer:
    """Candidate generation and plan picking over ``space`` for one tuner.

    ``visited`` (shared with the tuner) holds every proposed config; ``measured`` maps the
    measured ones to their fitness; ``passable`` are visited configs that annealing may walk
    through and that never start a chain (the transfer warm start's picks)."""

    def __init__(self, space: ConfigSpace, visited: set[int], rng: np.random.Generator,
                 features: LoopNestFeatures, knobs: KnobFeatures, options: GBTOptions,
                 measured: dict[int, float], passable: set[int]):
        self.space, self.visited, self.rng = space, visited, rng
        self.features, self.knobs, self.options = features, knobs, options
        self.measured, self.passable = measured, passable
        self.dims = space.dims
        self.pool: dict[int, None] = {}                 # scored, never proposed
        self._dims = np.asarray(self.dims, dtype=np.int64)
        self._movable = np.flatnonzero(self._dims > 1)
        radix = np.cumprod([1, *self.dims[:-1]]) if self.dims else np.zeros(0)
        self._radix = radix.astype(np.int64) if space.size < 1 << 62 else None
        self._canonical: dict[int, int] = {}

    def side(self, rng: np.random.Generator) -> Proposer:
        """A proposer over the same space with its own pool, generator and a copy of the
        feature cache: what it explores leaves this one's search as it was."""
        return Proposer(self.space, self.visited, rng, self.features.fork(), self.knobs,
                        self.options, self.measured, self.passable)

    @contextlib.contextmanager
    def using_rng(self, rng: np.random.Generator) -> Iterator[None]:
        """Inside, draws come from ``rng``; this proposer's own generator is left as it was."""
        own, self.rng = self.rng, rng
        try:
            yield
        finally:
            self.rng = own

    # ---- drawing and scoring ---------------------------------------------------------------

    def take(self, index: int) -> bool:
        """Mark ``index`` proposed; False if it already was."""
        return take(self.visited, index)

    def canonical(self, index: int) -> int:
        """The config the tuner proposes for ``index``: its canonical config
        (``programs.canonical``: the knobs its program does not read reset to their first
        choice), which builds the same program. Measured configs, and so the model's
        training rows and the annealing's starts, are then canonical: a config that inlines
        a stage carries that stage's other knobs at their first choices (the sketches' usual
        ones, e.g. its natural vector width), not at whatever a random draw left there, so
        one step that stops inlining it lands on a sensible way of computing it."""
        if index not in self._canonical:
            from .programs import canonical
            self._canonical[index] = canonical(self.features.task,
                                               self.space.get(index))[0].index
        out = self._canonical[index]
        if out != index:
            self.features.alias(out, index)
        return out

    def random_unvisited(self, tries: int = 64) -> int | None:
        """A random unproposed config, or None."""
        return random_unvisited(self.space, self.visited, self.rng, tries)

    def ranked_pool(self, score: Score) -> list[int]:
        """The pool's unproposed configs, best ``score`` first, one per program: a config
        whose program (where its steps identify it: the auto scheduler's sketches) is that
        of a config proposed before, or of a better-scored one in the pool, is left out;
        measuring it would only repeat an earlier result (most of an auto sketch's configs
        differ only in knobs its program does not read)."""
        cands = [i for i in self.pool if i not in self.visited]
        if not cands:
            return []
        scores = score(cands)
        order = sorted(range(len(cands)), key=lambda k: (-scores[k], cands[k]))
        program = self.features.program
        seen = {key for i in self.visited if (key := program(i)) is not None}
        out = []
        for k in order:
            key = program(cands[k])
            if key is not None:
                if key in seen:
                    continue
                seen.add(key)
            out.append(cands[k])
        return out

    # ---- one stage: annealing over the loop-nest model -------------------------------------

    def explore(self, score: Score) -> None:
        """Simulated annealing over ``score`` (configs with loop-nest features); the new
        configs it scores join the pool."""
        o = self.options
        budget = o.explore
        for _ in range(round(o.explore * o.random_share)):       # a global view: random
            i = self.random_unvisited()
            if i is not None and i not in self.features:
                budget -= 1
                if self.features.get(i) is not None:
                    self.pool[i] = None
        chains = self.chain_starts(score)
        if not chains:
            return
        scores = list(score(chains))
        scale = max(float(np.std(scores)), 1e-9)
        for step in range(o.sa_steps):
            if budget <= 0:
                break
            moves = []
            for c in chains:
                j = self.neighbour(c)
                if j is not None and j not in self.features:
                    budget -= 1
                ok = j is not None and self.features.get(j) is not None
                moves.append(j if ok else None)
                if ok and j not in self.visited:
                    self.pool[j] = None
            valid = [j for j in moves if j is not None]
            if valid:
                pred = dict(zip(valid, score(valid)))
                new = [pred[j] if j is not None else -math.inf for j in moves]
                accept = self._accept(np.asarray(scores), np.asarray(new), scale, step)
                for k in np.flatnonzero(accept):
                    chains[k], scores[k] = moves[k], new[k]

    def _accept(self, cur: np.ndarray, new: np.ndarray, scale: float, step: int) -> np.ndarray:
        """The Metropolis rule at the temperature of ``step`` (1 falling to 0.05 over
        ``sa_steps``), one draw per move that scores lower."""
        temp = 0.05 ** (step / max(1, self.options.sa_steps - 1))
        delta = (new - cur) / scale
        out = np.zeros(len(cur), dtype=bool)
        for k, d in enumerate(delta):
            if d >= 0:
                out[k] = True
            elif d > -math.inf:
                out[k] = self.rng.random() < math.exp(d / temp)
        return out

    def chain_starts(self, score: Score, fill_random: bool = True) -> list[int]:
        """The best measured configs (half the chains), the pool's best predictions, then
        (with ``fill_random``) random configs."""
        n = self.options.n_chains
        best = sorted((i for i in self.measured if i not in self.passable),
                      key=lambda i: (-self.measured[i], i))
        starts = [i for i in best if self.features.known(i) is not None][:n // 2]
        for i in self.ranked_pool(score):
            if len(starts) >= n:
                break
            if i not in starts:
                starts.append(i)
        for _ in range(n - len(starts) if fill_random else 0):
            i = self.random_unvisited()
            if i is not None and self.features.get(i) is not None:
                starts.append(i)
        return starts

    def neighbour(self, index: int) -> int | None:
        """A config one knob away from ``index`` (an adjacent choice or any other one) that
        was never proposed (or is passable); None after 8 tries."""
        vec = list(self.space.vector(index))
        movable = [k for k, d in enumerate(self.dims) if d > 1]
        if not movable:
            return None
        for _ in range(8):
            cand = list(vec)
            k = int(self.rng.choice(movable))
            d = self.dims[k]
            if self.rng.random() < 0.5:                      # adjacent (splits are ordered)
                step = 1 if self.rng.random() < 0.5 else -1
                cand[k] = vec[k] + step if 0 <= vec[k] + step < d else vec[k] - step
            else:
                other = int(self.rng.integers(d - 1))
                cand[k] = other if other < vec[k] else other + 1
            j = self.space.index_of(cand)
            if j not in self.visited or j in self.passable:
                return j
        return None

    # ---- two stages: knob-feature candidates, a loop-nest shortlist ------------------------

    def explore_wide(self, knob_score: Score, score: Score) -> None:
        """Score ``candidates`` unvisited configs with ``knob_score`` (on knob vectors: random
        draws and annealing walkers over it, started from ``score``'s chain starts); the
        ``explore`` best that have no loop-nest features yet get them and, when valid, join
        the pool."""
        o = self.options
        cand: dict[int, float] = {}
        n_random = round(o.candidates * o.random_share)
        vecs = self._random_vectors(n_random)
        scores = self._add(cand, vecs, knob_score)
        n_walk = max(o.n_chains, -(-(o.candidates - n_random) // max(1, o.sa_steps)))
        starts = self._walk_starts(score, n_walk, vecs, scores)
        if len(starts) and len(self._movable):
            self._walk(knob_score, starts, cand)
        order = sorted(cand, key=lambda i: (-cand[i], i))
        for i in [i for i in order if i not in self.features][:o.explore]:
            if self.features.get(i) is not None:
                self.pool[i] = None

    def _random_vectors(self, n: int) -> np.ndarray:
        cols = [self.rng.integers(d, size=n) for d in self.dims]
        return np.stack(cols, axis=1) if cols else np.zeros((n, 0), dtype=np.int64)

    def _indices(self, vecs: np.ndarray) -> list[int]:
        if self._radix is not None:
            return [int(i) for i in vecs @ self._radix]
        return [self.space.index_of(v) for v in vecs]          # spaces beyond 2**62

    def _add(self, cand: dict[int, float], vecs: np.ndarray, knob_score: Score) -> np.ndarray:
        """Score ``vecs`` with ``knob_score``; unvisited ones join ``cand``."""
        if not len(vecs):
            return np.empty(0)
        scores = knob_score(vecs)
        for i, s in zip(self._indices(vecs), scores):
            if i not in self.visited:
                cand.setdefault(i, float(s))
        return scores

    def _walk_starts(self, score: Score, n: int, vecs: np.ndarray,
                     scores: np.ndarray) -> np.ndarray:
        """Half the walkers start from the elite (the loop-nest chain starts: best measured,
        pool's best), spread evenly over it; the others from the best random draws."""
        elite = self.knobs.vectors(self.chain_starts(score, fill_random=False))
        rows = []
        if len(elite):
            rows.append(np.repeat(elite, max(1, (n // 2) // len(elite)), axis=0))
        left = n - sum(len(r) for r in rows)
        if left > 0 and len(vecs):
            rows.append(vecs[np.argsort(-scores, kind="stable")[:left]])
        return np.vstack(rows) if rows else np.zeros((0, len(self.dims)), dtype=np.int64)

    def _walk(self, knob_score: Score, cur: np.ndarray, cand: dict[int, float]) -> None:
        """``sa_steps`` annealing steps of every walker in ``cur`` at once; every unvisited
        config a walker proposes joins ``cand`` with its score."""
        cur = cur.copy()
        cur_s = knob_score(cur)
        scale = max(float(np.std(cur_s)), 1e-9)
        n = len(cur)
        rows = np.arange(n)
        for step in range(self.options.sa_steps):
            temp = 0.05 ** (step / max(1, self.options.sa_steps - 1))
            k = self._movable[self.rng.integers(len(self._movable), size=n)]
            d, v = self._dims[k], cur[rows, k]
            up = np.where(self.rng.random(n) < 0.5, 1, -1)        # adjacent, reflected ...
            adj = np.where((v + up >= 0) & (v + up < d), v + up, v - up)
            other = self.rng.integers(0, d - 1)                     # ... or any other choice
            new = np.where(self.rng.random(n) < 0.5, adj, np.where(other < v, other, other + 1))
            prop = cur.copy()
            prop[rows, k] = new
            s = self._add(cand, prop, knob_score)
            delta = (s - cur_s) / scale
            ok = (delta >= 0) | (self.rng.random(n) < np.exp(np.minimum(delta, 0.0) / temp))
            cur[ok], cur_s[ok] = prop[ok], s[ok]

    # ---- plans -----------------------------------------------------------------------------

    def diverse_pick(self, ranked: list[int], covered: list[set], n: int) -> int:
        """Where in ``ranked`` (best first) the next model pick is: the best one, or with
        ``diversity`` > 0, the one of the best ``4 n`` that maximises its rank score (1 for
        the best, falling linearly) + ``diversity`` x the share of its knob values that no
        config of this plan has yet: a plan spread over the space rather than 8 neighbours
        of one config (AutoTVM's submodular pick works the same way)."""
        diversity = self.options.diversity
        if diversity <= 0.0:
            return 0
        window = [k for k in range(min(len(ranked), 4 * n)) if ranked[k] not in self.visited]
        if not window:
            return 0
        span = max(1, 4 * n)
        best, best_val = window[0], -math.inf
        for k in window:
            vec = self.space.vector(ranked[k])
            new = sum(1 for c, v in zip(covered, vec) if v not in c) / max(1, len(vec))
            val = 1.0 - k / span + diversity * new
            if val > best_val:
                best, best_val = k, val
        return best

    def pick_diverse(self, ranked: list[int], n: int) -> list[int]:
        """Up to ``n`` configs of ``ranked`` (best first) taken by ``diverse_pick``."""
        out: list[int] = []
        covered: list[set] = [set() for _ in self.dims]
        while ranked and len(out) < n:
            i = self.canonical(ranked.pop(self.diverse_pick(ranked, covered, n)))
            if self.take(i):
                out.append(i)
                _cover(covered, self.space.vector(i))
        return out

    def pick_plan(self, n: int, ranked: list[int], exploit: bool,
                  random_slot: Callable[[int | None], int | None]) -> list[int]:
        """``n`` configs: with ``exploit``, ``ranked``'s best (diverse) picks, each slot
        random with probability ``eps``; without, all random. ``random_slot(drawn)`` may
        replace a random draw (transfer does)."""
        out: list[int] = []
        covered: list[set] = [set() for _ in self.dims]
        for _ in range(n):
            while ranked and ranked[0] in self.visited:
                ranked.pop(0)
            if exploit and ranked and not self.rng.random() < self.options.eps:
                i = ranked.pop(self.diverse_pick(ranked, covered, n))
            else:
                i = random_slot(self.random_unvisited())
            i = self.canonical(i) if i is not None else None
            if i is not None and self.take(i):
                out.append(i)
                _cover(covered, self.space.vector(i))
        for i in out:
            self.pool.pop(i, None)
        return out


def _cover(covered: list[set], vec: Sequence[int]) -> None:
    for c, v in zip(covered, vec):
        c.add(v)
