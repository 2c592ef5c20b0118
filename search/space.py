"""Config spaces and configs: what a template's ``cfg`` argument is.

A template receives one of three ``cfg`` objects, all with the same ``define_*`` methods and
``cfg[name]`` lookup:

- :class:`ConfigSpace` while a task collects its space: ``define_*`` adds knobs and
  ``cfg[name]`` returns the knob's fallback entity so the template can run to its end;
- :class:`ConfigEntity`, one point of the space (by ``index``), while tuning or applying a log;
- :class:`FallbackConfig` outside tuning: every knob takes its fallback entity.

The space is the product of its knobs, indexed in mixed radix with the first-defined knob
varying fastest. Sizes can exceed 2**63, so ``space.size`` is a Python int (``len()`` works
while it fits).
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import LooptuneError
from .knobs import AnnotateKnob, Knob, OtherKnob, ReorderKnob, SplitKnob, constant_extent, \
    jsonable

log = logging.getLogger("looptune.search.space")


class _Config:
    """The ``define_*`` surface shared by every ``cfg`` a template can receive."""

    is_fallback = False

    def __init__(self):
        self.flop: float | None = None

    def define_split(self, name: str, loop, num_outputs: int = 2, policy: str = "factors",
                     candidate: Sequence[Sequence[int]] | None = None,
                     max_factor: int | None = None, allow_non_divisible: bool = False,
                     filter=None) -> None:
        """A knob splitting ``loop`` (or an int extent) into ``num_outputs`` loops.

        ``policy``: ``"factors"`` (inner factors are divisors of the extent), ``"power2"``
        (powers of two) or ``"candidate"`` (``candidate=[[-1, 4, 8], ...]``, sizes outermost
        first, ``-1`` for the computed outer extent). ``allow_non_divisible=True`` keeps
        factor products that do not divide the extent (the tail is guarded);
        ``max_factor`` caps every inner factor; ``filter(SplitEntity) -> bool`` prunes.
        Apply with ``cfg[name].apply(s, T, loop)`` -> loops outermost first.
        """
        ext = constant_extent(f"define_split('{name}')", loop)
        self._define(name, lambda: SplitKnob(ext, num_outputs, policy, candidate, max_factor,
                                             allow_non_divisible, filter))

    def define_reorder(self, name: str, loops: Sequence, policy: str = "all",
                       candidate: Sequence[Sequence] | None = None) -> None:
        """A knob over orders of ``loops``: every permutation (``policy="all"``; index 0 is
        the given order) or ``candidate=[[loops or positions], ...]``.
        Apply with ``cfg[name].apply(s, T, loops)`` -> the loops in their new order."""
        self._define(name, lambda: ReorderKnob(loops, policy, candidate))

    def define_knob(self, name: str, values: Sequence[Any]) -> None:
        """A knob taking any of ``values``; read the choice with ``cfg[name].val``."""
        self._define(name, lambda: OtherKnob(values))

    def define_annotate(self, name: str, loops: Sequence, policy: str = "try_unroll_vec",
                        candidate: Sequence[Sequence[str]] | None = None,
                        max_unroll: int | None = None) -> None:
        """A knob annotating ``loops``: ``"try_unroll"`` (each none/unroll), ``"try_vec"``
        (the innermost none/vec), ``"try_unroll_vec"`` (each none/unroll, the innermost also
        vec) or ``candidate=[("none", "unroll", "vec"), ...]``. Unrolling loops longer than
        ``max_unroll`` is skipped. Apply with ``cfg[name].apply(s, T, loops)``."""
        self._define(name, lambda: AnnotateKnob(loops, policy, candidate, max_unroll))

    def add_flop(self, flop: float) -> None:
        """Declare the task's floating-point operation count (else counted from the DAG)."""
        self.flop = (self.flop or 0) + float(flop)

    def _define(self, name: str, make) -> None:
        raise NotImplementedError

    def __getitem__(self, name: str):
        raise NotImplementedError


class ConfigSpace(_Config):
    """The knobs of a task; ``len``, ``get(index)``, ``sample(n, rng)``, iteration, ``str``."""

    def __init__(self, name: str = "space"):
        super().__init__()
        self.name = name
        self.knobs: dict[str, Knob] = {}
        self.used: set[str] = set()

    # ---- collecting -----------------------------------------------------------------------

    def _define(self, name: str, make) -> None:
        if not isinstance(name, str) or not name:
            raise LooptuneError(f"knob names must be non-empty strings; got {name!r}")
        if name in self.knobs:
            raise LooptuneError(f"{self.name}: knob '{name}' is defined twice; give each knob "
                                "its own name")
        self.knobs[name] = make()

    def __getitem__(self, name: str):
        if name not in self.knobs:
            raise LooptuneError(f"{self.name}: no knob named '{name}'; define it first "
                                f"(knobs: {', '.join(self.knobs) or 'none'})")
        self.used.add(name)
        return self.knobs[name].get(0)

    # ---- the space ------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """The number of configs (a Python int; may exceed what ``len()`` can return)."""
        n = 1
        for k in self.knobs.values():
            n *= len(k)
        return n

    def __len__(self) -> int:
        return self.size

    @property
    def dims(self) -> list[int]:
        """The number of choices of each knob, in definition order."""
        return [len(k) for k in self.knobs.values()]

    def vector(self, index: int) -> tuple[int, ...]:
        """Per-knob indices of config ``index`` (the first knob varies fastest)."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) \
                or not 0 <= index < self.size:
            raise IndexError(f"{self.name}: config index {index!r} is out of range "
                             f"[0, {self.size})")
        index, out = int(index), []
        for d in self.dims:
            index, r = divmod(index, d)
            out.append(r)
        return tuple(out)

    def index_of(self, vec: Sequence[int]) -> int:
        """The config index of per-knob indices ``vec``."""
        dims = self.dims
        if len(vec) != len(dims) or any(not 0 <= v < d for v, d in zip(vec, dims)):
            raise IndexError(f"{self.name}: knob indices {list(vec)} do not fit {dims}")
        index, mul = 0, 1
        for v, d in zip(vec, dims):
            index += int(v) * mul
            mul *= d
        return index

    def get(self, index: int) -> ConfigEntity:
        """The config at ``index``."""
        vec = self.vector(index)
        ents = {n: k.get(v) for (n, k), v in zip(self.knobs.items(), vec)}
        return ConfigEntity(int(index), ents, self)

    def sample(self, n: int, rng: np.random.Generator | int | None = None) -> list[ConfigEntity]:
        """``n`` distinct configs drawn uniformly (all of them if the space is smaller)."""
        rng = np.random.default_rng(rng)
        size = self.size
        if n >= size:
            return [self.get(i) for i in rng.permutation(size)]
        picked: dict[int, None] = {}
        while len(picked) < n:
            picked[self.random_index(rng)] = None
        return [self.get(i) for i in picked]

    def random_index(self, rng: np.random.Generator) -> int:
        """One uniformly random config index (works for spaces beyond 2**63)."""
        return self.index_of([int(rng.integers(d)) for d in self.dims])

    def from_json(self, obj: dict) -> ConfigEntity:
        """The config a log recorded, checked against this space: the index must exist and
        give the same knob values (else the template changed since the log was written)."""
        index = obj.get("index")
        cfg = self.get(index)
        knobs = obj.get("knobs")
        if knobs is not None and cfg.knob_values() != jsonable(knobs):
            raise LooptuneError(f"{self.name}: config {index} holds {cfg.knob_values()} in "
                                f"this space but {knobs} in the log; the template's knobs "
                                "changed since the log was written")
        return cfg

    def __iter__(self) -> Iterator[ConfigEntity]:
        for i in range(self.size):
            yield self.get(i)

    def __str__(self) -> str:
        head = f"ConfigSpace({self.name}): {self.size} configs over {len(self.knobs)} knobs"
        w = max((len(n) for n in self.knobs), default=0)
        rows = [f"  {n:<{w}}  {k.describe()}" for n, k in self.knobs.items()]
        return "\n".join([head, *rows])

    __repr__ = __str__


class ConfigEntity(_Config):
    """One config: ``.index`` in its space and ``cfg[name]`` for each knob's entity."""

    def __init__(self, index: int, entities: dict[str, Any], space: ConfigSpace | None = None):
        super().__init__()
        self.index = index
        self._entities = dict(entities)
        self.space = space
        self.defined: set[str] = set()
        self.used: set[str] = set()

    def _define(self, name: str, make) -> None:
        if name not in self._entities:
            raise LooptuneError(f"config {self.index}: the template defines knob '{name}', "
                                "which its space lacks; templates must define the same knobs "
                                "for every config (define them before branching on values)")
        self.defined.add(name)

    def __getitem__(self, name: str):
        if name not in self._entities:
            raise LooptuneError(f"config {self.index}: no knob named '{name}' (knobs: "
                                f"{', '.join(self._entities) or 'none'})")
        self.used.add(name)
        return self._entities[name]

    def fresh(self, space: ConfigSpace | None = None) -> ConfigEntity:
        """The same knob values as a new config of ``space`` (default: this one's), with
        nothing yet defined or used: what a template instantiation records its reads in."""
        return ConfigEntity(self.index, self._entities, self.space if space is None else space)

    def knob_values(self) -> dict[str, Any]:
        """Each knob's value as JSON data."""
        return {n: e.to_json() for n, e in self._entities.items()}

    def to_json(self) -> dict:
        """``{"index": i, "knobs": {name: value}}``."""
        return {"index": self.index, "knobs": self.knob_values()}

    def __eq__(self, other) -> bool:
        return (isinstance(other, ConfigEntity) and other.index == self.index
                and other.knob_values() == self.knob_values())

    def __hash__(self) -> int:
        return hash((self.index, json.dumps(self.knob_values(), sort_keys=True)))

    def __str__(self) -> str:
        vals = ", ".join(f"{n}={e}" for n, e in self._entities.items())
        return f"Config#{self.index}({vals})"

    __repr__ = __str__


class FallbackConfig(_Config):
    """The ``cfg`` of a template run outside tuning: each knob takes its fallback entity
    (index 0: no split, the given order, the first value, no annotation)."""

    is_fallback = True

    def __init__(self):
        super().__init__()
        self.knobs: dict[str, Knob] = {}

    def _define(self, name: str, make) -> None:
        if name not in self.knobs:
            self.knobs[name] = make()

    def __getitem__(self, name: str):
        if name not in self.knobs:
            raise LooptuneError(f"fallback config: no knob named '{name}'; define it first")
        return self.knobs[name].get(0)

    def __str__(self) -> str:
        vals = ", ".join(f"{n}={k.get(0)}" for n, k in self.knobs.items())
        return f"FallbackConfig({vals})"

    __repr__ = __str__


def take(visited: set[int], index: int) -> bool:
    """Mark config ``index`` proposed in ``visited``; False if it already was."""
    if index in visited:
        return False
    visited.add(index)
    return True


def random_unvisited(space: ConfigSpace, visited: set[int], rng,
                     tries: int = 64) -> int | None:
    """A random config of ``space`` not in ``visited`` (after ``tries`` random draws, a scan
    of what is left on spaces of up to 2**22 configs), or None."""
    for _ in range(tries):
        i = space.random_index(rng)
        if i not in visited:
            return i
    size = space.size
    if len(visited) >= size or size > 1 << 22:
        return None
    left = np.setdiff1d(np.arange(size), np.fromiter(visited, dtype=np.int64, count=len(visited)))
    return int(rng.choice(left)) if left.size else None
