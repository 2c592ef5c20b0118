"""Knobs: the tunable dimensions of a config space, and the values (entities) they take.

A knob is an ordered, indexable set of entities. ``len(knob)`` counts them, ``knob.get(i)``
returns the i-th and ``knob.index_of(value)`` finds one back from its JSON value. Entity 0 of
every knob is its *fallback*: the choice that leaves the schedule as written (no split, the
loops' given order, no annotation, the first listed value).

``define_split``    -> :class:`SplitKnob`    -> :class:`SplitEntity`     (``.size``)
``define_reorder``  -> :class:`ReorderKnob`  -> :class:`ReorderEntity`   (``.perm``)
``define_knob``     -> :class:`OtherKnob`    -> :class:`OtherOptionEntity` (``.val``)
``define_annotate`` -> :class:`AnnotateKnob` -> :class:`AnnotateEntity`  (``.anns``)
"""
from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import LooptuneError, ScheduleError
from ..lang.expr import Const, IterVar
from ..lang.simplify import simplify

SPLIT_POLICIES = ("factors", "power2", "candidate")
REORDER_POLICIES = ("all", "candidate")
ANNOTATE_POLICIES = ("try_unroll", "try_vec", "try_unroll_vec", "candidate")
ANNOTATIONS = ("none", "unroll", "vec", "parallel")


def _stage(s, T):
    """``s[T]`` for a tensor, or T itself when it already is a Stage."""
    from ..schedule.stage import Stage
    return T if isinstance(T, Stage) else s[T]


def constant_extent(what: str, loop) -> int:
    """The constant extent of ``loop`` (an IterVar or an int) that knob ``what`` splits or
    orders; a LooptuneError naming ``what`` when it has none."""
    if isinstance(loop, bool):
        raise LooptuneError(f"{what}: expected a loop or an int extent; got {loop!r}")
    if isinstance(loop, int):
        ext = loop
    elif isinstance(loop, IterVar):
        e = simplify(loop.extent)
        if not isinstance(e, Const):
            raise LooptuneError(f"{what}: loop '{loop.name}' has the symbolic extent {e}; "
                                "knobs need constant extents (pass sizes as template args)")
        ext = int(e.value)
    else:
        raise LooptuneError(f"{what}: expected a loop (IterVar) or an int extent; got {loop!r}")
    if ext < 1:
        raise LooptuneError(f"{what}: extent must be positive; got {ext}")
    return ext


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (tuples become lists); unknown objects become repr."""
    if isinstance(value, (tuple, list)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item"):          # numpy scalars
        return jsonable(value.item())
    return repr(value)


# ---- entities ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SplitEntity:
    """Split sizes, outermost first: ``size[0]`` is the outer extent (rounded up), the rest
    the inner factors."""

    size: tuple[int, ...]

    def apply(self, s, T, loop) -> list:
        """Split ``loop`` of ``s[T]``; returns the loops outermost first (``len(size)``)."""
        st = _stage(s, T)
        loops = []
        for f in reversed(self.size[1:]):
            loop, inner = st.split(loop, factor=int(f))
            loops.append(inner)
        loops.append(loop)
        return loops[::-1]

    def to_json(self) -> list[int]:
        return list(self.size)

    def __str__(self) -> str:
        return str(list(self.size))


@dataclass(frozen=True)
class ReorderEntity:
    """A permutation: position ``n`` of the new order holds the loop given at ``perm[n]``."""

    perm: tuple[int, ...]

    def apply(self, s, T, loops: Sequence) -> list:
        """Reorder ``loops`` of ``s[T]``; returns them in the new order."""
        if len(loops) != len(self.perm):
            raise ScheduleError(f"reorder knob: defined over {len(self.perm)} loops but applied "
                                f"to {len(loops)}; apply it to the loops it was defined on")
        new = [loops[p] for p in self.perm]
        _stage(s, T).reorder(*new)
        return new

    def to_json(self) -> list[int]:
        return list(self.perm)

    def __str__(self) -> str:
        return str(list(self.perm))


@dataclass(frozen=True)
class OtherOptionEntity:
    """One value of a ``define_knob`` knob: read it with ``.val``."""

    val: Any

    def to_json(self) -> Any:
        return jsonable(self.val)

    def __str__(self) -> str:
        return repr(self.val)


@dataclass(frozen=True)
class AnnotateEntity:
    """One annotation per loop: ``none``, ``unroll``, ``vec`` or ``parallel``."""

    anns: tuple[str, ...]
    max_unroll: int | None = None

    def apply(self, s, T, loops: Sequence) -> None:
        """Annotate ``loops`` of ``s[T]`` (unroll is skipped past ``max_unroll``)."""
        if len(loops) != len(self.anns):
            raise ScheduleError(f"annotate knob: defined over {len(self.anns)} loops but "
                                f"applied to {len(loops)}; apply it to the loops it was "
                                "defined on")
        st = _stage(s, T)
        for loop, ann in zip(loops, self.anns):
            if ann == "unroll":
                ext = simplify(loop.extent)
                if (self.max_unroll is not None and isinstance(ext, Const)
                        and ext.value > self.max_unroll):
                    continue
                st.unroll(loop)
            elif ann == "vec":
                st.vectorize(loop)
            elif ann == "parallel":
                st.parallel(loop)

    def to_json(self) -> list[str]:
        return list(self.anns)

    def __str__(self) -> str:
        return str(list(self.anns))


# ---- knobs ---------------------------------------------------------------------------------


class Knob:
    """Base of the knobs: an indexable set of entities."""

    kind = "knob"

    def __len__(self) -> int:
        raise NotImplementedError

    def get(self, index: int):
        """The entity at ``index`` (0 <= index < len)."""
        raise NotImplementedError

    def index_of(self, value) -> int | None:
        """The index of the entity whose JSON value is ``value``, or None."""
        want = jsonable(value)
        for i in range(len(self)):
            if self.get(i).to_json() == want:
                return i
        return None

    def signature(self) -> tuple:
        """What identifies the knob's definition (used to check templates are deterministic)."""
        return (self.kind, len(self))

    def describe(self) -> str:
        n = len(self)
        ex = ", ".join(str(self.get(i)) for i in range(min(n, 3)))
        return f"{self.kind:<8} {n:>6} choices: {ex}{', ...' if n > 3 else ''}"

    def _check(self, index: int) -> int:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self):
            raise IndexError(f"{self.kind} knob has {len(self)} choices; index {index!r} is "
                             "out of range")
        return index


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers_of_two(n: int) -> list[int]:
    return [1 << e for e in range(n.bit_length()) if 1 << e <= n]


class SplitKnob(Knob):
    """All ways to split an extent into ``num_outputs`` loops under a policy."""

    kind = "split"

    def __init__(self, extent: int, num_outputs: int = 2, policy: str = "factors",
                 candidate: Sequence[Sequence[int]] | None = None, max_factor: int | None = None,
                 allow_non_divisible: bool = False,
                 filter: Callable[[SplitEntity], bool] | None = None):
        if num_outputs < 2:
            raise LooptuneError(f"define_split: num_outputs must be >= 2; got {num_outputs}")
        if policy not in SPLIT_POLICIES:
            raise LooptuneError(f"define_split: unknown policy {policy!r}; use one of "
                                f"{', '.join(SPLIT_POLICIES)}")
        self.extent, self.num_outputs, self.policy = extent, num_outputs, policy
        if policy == "candidate":
            sizes = [self._from_candidate(c) for c in (candidate or [])]
            if not sizes:
                raise LooptuneError("define_split: policy 'candidate' needs candidate=[...]")
        else:
            sizes = self._enumerate(max_factor, allow_non_divisible)
        ents = [SplitEntity(sz) for sz in dict.fromkeys(sizes)]
        if filter is not None:
            ents = [e for e in ents if filter(e)]
        if not ents:
            raise LooptuneError(f"define_split: no split of extent {extent} satisfies the "
                                "policy, max_factor and filter given")
        self.entities = ents

    def _enumerate(self, max_factor, allow_non_divisible) -> list[tuple[int, ...]]:
        e = self.extent
        choices = _divisors(e) if self.policy == "factors" else _powers_of_two(e)
        if max_factor is not None:
            choices = [c for c in choices if c <= max_factor]
        out = []
        for inner in itertools.product(choices, repeat=self.num_outputs - 1):
            prod = math.prod(inner)
            if prod > e or (not allow_non_divisible and e % prod):
                continue
            out.append((-(-e // prod),) + inner)
        return out

    def _from_candidate(self, cand: Sequence[int]) -> tuple[int, ...]:
        c = [int(x) for x in cand]
        if len(c) != self.num_outputs:
            raise LooptuneError(f"define_split: candidate {list(cand)} has {len(c)} sizes; "
                                f"num_outputs is {self.num_outputs}")
        inner = c[1:]
        if any(f < 1 for f in inner):
            raise LooptuneError(f"define_split: candidate {list(cand)}: inner factors must be "
                                "positive (only the outer size may be -1)")
        outer = -(-self.extent // math.prod(inner))
        if c[0] not in (-1, outer):
            raise LooptuneError(f"define_split: candidate {list(cand)}: the outer size of "
                                f"extent {self.extent} with these factors is {outer}; give "
                                "-1 to have it computed")
        return (outer,) + tuple(inner)

    def __len__(self) -> int:
        return len(self.entities)

    def get(self, index: int) -> SplitEntity:
        return self.entities[self._check(index)]

    def index_of(self, value) -> int | None:
        want = tuple(jsonable(value)) if isinstance(value, (list, tuple)) else None
        for i, e in enumerate(self.entities):
            if e.size == want:
                return i
        return None

    def signature(self) -> tuple:
        return (self.kind, self.extent, self.num_outputs, len(self))


class ReorderKnob(Knob):
    """Permutations of ``n`` loops: all of them (lazily, by index) or given candidates."""

    kind = "reorder"

    def __init__(self, loops: Sequence, policy: str = "all", candidate=None):
        if policy not in REORDER_POLICIES:
            raise LooptuneError(f"define_reorder: unknown policy {policy!r}; use one of "
                                f"{', '.join(REORDER_POLICIES)}")
        self.loops = list(loops)
        self.n = len(self.loops)
        if self.n < 1:
            raise LooptuneError("define_reorder: give at least one loop")
        self.policy = policy
        self.perms: list[tuple[int, ...]] | None = None
        if policy == "candidate":
            perms = [self._perm(c) for c in (candidate or [])]
            if not perms:
                raise LooptuneError("define_reorder: policy 'candidate' needs candidate=[...]")
            self.perms = list(dict.fromkeys(perms))

    def _perm(self, cand: Sequence) -> tuple[int, ...]:
        pos = []
        for c in cand:
            if isinstance(c, int) and not isinstance(c, bool):
                pos.append(c)
                continue
            try:
                pos.append(next(k for k, v in enumerate(self.loops) if v is c or v == c))
            except StopIteration:
                raise LooptuneError(f"define_reorder: candidate loop {c!r} is not one of the "
                                    "loops given") from None
        if sorted(pos) != list(range(self.n)):
            raise LooptuneError(f"define_reorder: candidate {list(cand)} is not a permutation "
                                f"of the {self.n} loops given")
        return tuple(pos)

    def __len__(self) -> int:
        return len(self.perms) if self.perms is not None else math.factorial(self.n)

    def get(self, index: int) -> ReorderEntity:
        index = self._check(index)
        if self.perms is not None:
            return ReorderEntity(self.perms[index])
        # factorial number system: index 0 is the identity, the last index the reversal
        rest, perm = list(range(self.n)), []
        for k in range(self.n, 0, -1):
            q, index = divmod(index, math.factorial(k - 1))
            perm.append(rest.pop(q))
        return ReorderEntity(tuple(perm))

    def index_of(self, value) -> int | None:
        perm = tuple(jsonable(value)) if isinstance(value, (list, tuple)) else None
        if perm is None or sorted(perm) != list(range(self.n)):
            return None
        if self.perms is not None:
            return self.perms.index(perm) if perm in self.perms else None
        rest, index = list(range(self.n)), 0
        for k, p in enumerate(perm):
            index += rest.index(p) * math.factorial(self.n - 1 - k)
            rest.remove(p)
        return index

    def signature(self) -> tuple:
        return (self.kind, self.n, len(self))


class OtherKnob(Knob):
    """Any list of values (``define_knob``)."""

    kind = "knob"

    def __init__(self, values: Sequence):
        self.values = list(values)
        if not self.values:
            raise LooptuneError("define_knob: give at least one value")
        keys = [json.dumps(jsonable(v), sort_keys=True) for v in self.values]
        if len(set(keys)) != len(keys):
            raise LooptuneError(f"define_knob: values {self.values!r} contain duplicates")

    def __len__(self) -> int:
        return len(self.values)

    def get(self, index: int) -> OtherOptionEntity:
        return OtherOptionEntity(self.values[self._check(index)])

    def signature(self) -> tuple:
        return (self.kind, json.dumps(jsonable(self.values), sort_keys=True))


class AnnotateKnob(Knob):
    """Unroll / vectorize choices over the given loops (vectorize only the innermost)."""

    kind = "annotate"

    def __init__(self, loops: Sequence, policy: str = "try_unroll_vec", candidate=None,
                 max_unroll: int | None = None):
        if policy not in ANNOTATE_POLICIES:
            raise LooptuneError(f"define_annotate: unknown policy {policy!r}; use one of "
                                f"{', '.join(ANNOTATE_POLICIES)}")
        self.n = len(loops)
        if self.n < 1:
            raise LooptuneError("define_annotate: give at least one loop")
        self.policy, self.max_unroll = policy, max_unroll
        if policy == "candidate":
            self.options = None
            self.cands = [self._cand(c) for c in (candidate or [])]
            if not self.cands:
                raise LooptuneError("define_annotate: policy 'candidate' needs candidate=[...]")
            self.cands = list(dict.fromkeys(self.cands))
            return
        outer = {"try_unroll": ("none", "unroll"), "try_vec": ("none",),
                 "try_unroll_vec": ("none", "unroll")}[policy]
        last = {"try_unroll": ("none", "unroll"), "try_vec": ("none", "vec"),
                "try_unroll_vec": ("none", "unroll", "vec")}[policy]
        self.options = [outer] * (self.n - 1) + [last]
        self.cands = None

    def _cand(self, c: Sequence[str]) -> tuple[str, ...]:
        c = tuple(c)
        if len(c) != self.n or any(a not in ANNOTATIONS for a in c):
            raise LooptuneError(f"define_annotate: candidate {list(c)} must give one of "
                                f"{', '.join(ANNOTATIONS)} for each of the {self.n} loops")
        return c

    def __len__(self) -> int:
        return len(self.cands) if self.cands is not None else math.prod(map(len, self.options))

    def get(self, index: int) -> AnnotateEntity:
        index = self._check(index)
        if self.cands is not None:
            return AnnotateEntity(self.cands[index], self.max_unroll)
        anns = []
        for opts in self.options:       # the first loop varies fastest
            index, r = divmod(index, len(opts))
            anns.append(opts[r])
        return AnnotateEntity(tuple(anns), self.max_unroll)

    def signature(self) -> tuple:
        return (self.kind, self.n, self.policy, len(self))
