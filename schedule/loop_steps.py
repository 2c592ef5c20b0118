"""The steps of one stage's loop nest: split, fuse, reorder, unroll/vectorize/parallel, bind,
and where the stage is computed (compute_at, compute_inline, compute_root).

Each is a frozen value naming its stage and loops; ``validate`` raises the primitive's
``ScheduleError`` (worded ``stage 'C': split(i): ...``) and changes nothing, ``apply`` rewrites
the stage's leaf loops, relations, annotations or attach point. The public methods of
:class:`~looptune.schedule.stage.Stage` document each primitive.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from ..lang.dtype import MAX_EXTENT, as_size
from ..lang.expr import Const, IterKind, IterVar
from . import relations as rel
from .attach import Attach, AttachAt, enclosing_hosts
from .relations import THREAD_TAGS, Annot
from .steps import Step, loop_ref, stage_ref, tensor_ref, unpack

if TYPE_CHECKING:
    from .schedule import Schedule
    from .stage import Stage


def _loops(stage: str, loops) -> str:
    return ", ".join(loop_ref(stage, n) for n in loops)


def _size(v):
    """A valid size as a Python int (``np.int64(8)`` -> 8); anything else as given, for
    ``validate`` to refuse by its repr."""
    n = as_size(v)
    return n if n is not None and n >= 1 else v


@dataclass(frozen=True, slots=True)
class Split(Step):
    """``s[C].split(loop, factor=f)`` (or ``nparts=n``)."""

    loop: str
    factor: int | None = None
    nparts: int | None = None

    PRIMITIVES = ("split",)

    def __post_init__(self):
        object.__setattr__(self, "factor", None if self.factor is None else _size(self.factor))
        object.__setattr__(self, "nparts", None if self.nparts is None else _size(self.nparts))

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        p = st.loop(self.loop)
        prim = f"split({self.loop})"
        if (self.factor is None) == (self.nparts is None):
            raise st._err(prim, "give exactly one of factor= or nparts=")
        what = "factor" if self.factor is not None else "nparts"
        raw = self.factor if self.factor is not None else self.nparts
        val = as_size(raw)
        if val is None or val < 1:
            raise st._err(prim, f"{what} must be a positive int; got {raw!r}")
        if val > MAX_EXTENT:
            raise st._err(prim, f"{what} {val} does not fit a 32-bit loop extent (at most "
                          f"2**31 - 1 = {MAX_EXTENT}); use a smaller {what}")
        if p in st.annotations:
            raise st._err(prim, f"loop '{p.name}' is already annotated "
                          f"{st.annotations[p][0].value}; split before annotating")
        _check_prefetched(st, prim, p, "split before prefetching")

    def apply(self, s: Schedule) -> tuple[IterVar, IterVar]:
        st = s.stage(self.stage)
        p = st.loop(self.loop)
        oext, iext = rel.split_extents(p.extent, self.factor, self.nparts)
        outer = rel.new_loop(st._unique(p.name + ".outer"), oext, p.kind)
        st.all_iter_vars.append(outer)
        inner = rel.new_loop(st._unique(p.name + ".inner"), iext, p.kind)
        st.all_iter_vars.append(inner)
        st.relations.append(rel.Split(p, outer, inner, self.factor, self.nparts))
        k = st.leaf_iter_vars.index(p)
        st.leaf_iter_vars[k:k + 1] = [outer, inner]
        return outer, inner

    def __str__(self) -> str:
        how = [f"factor={self.factor!r}"] if self.factor is not None else []
        how += [f"nparts={self.nparts!r}"] if self.nparts is not None or not how else []
        return f"{stage_ref(self.stage)}.split({loop_ref(self.stage, self.loop)}, " \
               f"{', '.join(how)})"


@dataclass(frozen=True, slots=True)
class _LoopsStep(Step):
    """A step over any number of loops; its JSON arguments are the loop names."""

    loops: tuple[str, ...]

    @property
    def args(self) -> tuple:
        return self.loops

    @classmethod
    def from_args(cls, primitive, stage, args):
        return cls(stage, tuple(args))


@dataclass(frozen=True, slots=True)
class Fuse(_LoopsStep):
    """``s[C].fuse(i, j, ...)``: adjacent loops, outer first (two or more)."""

    PRIMITIVES = ("fuse",)

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        prim = f"fuse({', '.join(self.loops)})"
        if len(self.loops) < 2:
            raise st._err(prim, "a fuse step takes two or more loops")
        vs = [st.loop(n) for n in self.loops]
        pos = [st.leaf_iter_vars.index(v) for v in vs]
        if any(b != a + 1 for a, b in pairwise(pos)):
            raise st._err(prim, f"loops are not adjacent in the current order "
                          f"{st._order_str()}; reorder them next to each other first "
                          "(outer first)")
        if len({v.kind for v in vs}) > 1:
            raise st._err(prim, "cannot fuse a reduction loop with a spatial loop")
        for v in vs:
            if v in st.annotations:
                raise st._err(prim, f"loop '{v.name}' is already annotated "
                              f"{st.annotations[v][0].value}; fuse before annotating")
            _check_prefetched(st, prim, v, "fuse before prefetching")
        total = 1
        for v in vs:
            total = total * v.extent.value if isinstance(v.extent, Const) and \
                total is not None else None
        if total is not None and total > MAX_EXTENT:
            raise st._err(prim, f"the fused loop would run {total} iterations, more than a "
                          f"32-bit loop variable counts (2**31 - 1 = {MAX_EXTENT}); fuse "
                          "fewer loops, or split them first and fuse the parts")

    def apply(self, s: Schedule) -> IterVar:
        st = s.stage(self.stage)
        vs = [st.loop(n) for n in self.loops]
        fused = vs[0]
        for v in vs[1:]:
            f = rel.new_loop(st._unique(f"{fused.name}.{v.name}.fused"),
                             fused.extent * v.extent, v.kind)
            st.all_iter_vars.append(f)
            st.relations.append(rel.Fuse(fused, v, f))
            k = st.leaf_iter_vars.index(fused)
            st.leaf_iter_vars[k:k + 2] = [f]
            fused = f
        return fused

    def __str__(self) -> str:
        return f"{stage_ref(self.stage)}.fuse({_loops(self.stage, self.loops)})"


@dataclass(frozen=True, slots=True)
class Reorder(_LoopsStep):
    """``s[C].reorder(k, i)``: these loops, in this order, in the places they hold now."""

    PRIMITIVES = ("reorder",)

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        vs = [st.loop(n) for n in self.loops]
        if len(set(vs)) != len(vs):
            dup = next(v for v in vs if vs.count(v) > 1)
            raise st._err(f"reorder({', '.join(self.loops)})",
                          f"loop '{dup.name}' is given more than once")

    def apply(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        vs = [st.loop(n) for n in self.loops]
        pos = sorted(st.leaf_iter_vars.index(v) for v in vs)
        for p, v in zip(pos, vs):
            st.leaf_iter_vars[p] = v

    def __str__(self) -> str:
        return f"{stage_ref(self.stage)}.reorder({_loops(self.stage, self.loops)})"


def _check_annotation(st: Stage, prim: str, v: IterVar, kind: Annot, arg=None) -> None:
    """A loop takes one annotation; parallel and vectorize need a spatial loop."""
    where = f"{prim}({v.name})"
    old = st.annotations.get(v)
    if old is not None and old != (kind, arg):
        raise st._err(where, f"loop '{v.name}' is already marked {old[0].value}"
                      f"{'' if old[1] is None else ' ' + str(old[1])}; a loop takes one "
                      "of unroll/vectorize/parallel/bind/stream — split it to use two")
    if kind in (Annot.PARALLEL, Annot.VECTORIZE) and v.kind is IterKind.REDUCE:
        raise st._err(where, f"loop '{v.name}' carries the reduction of "
                      f"'{st.name}' (iterations update the same element); use "
                      f"s.rfactor({st.name}, {v.name}) to make it a spatial axis of a "
                      "new stage, then " + prim + " that")


STREAM_DTYPES = ("float32", "float64")


def _check_stream(st: Stage, v: IterVar) -> None:
    """``stream(loop)``: the innermost spatial loop of a float stage written once (not a
    reduction, not inlined). Lowering checks again what later steps may change (the loop still
    innermost, nothing attached in it, its store contiguous)."""
    where = f"stream({v.name})"
    if v.kind is IterKind.REDUCE:
        raise st._err(where, f"loop '{v.name}' is a reduction loop of '{st.name}'; streaming "
                      "stores write each element once: stream a spatial loop")
    if st.op.is_reduction:
        raise st._err(where, f"'{st.name}' is a reduction: its updates read back the element "
                      "they store, and streaming stores bypass the caches; stream a stage "
                      "that reads it (or its cache_write stage's consumer)")
    if st.attach is Attach.INLINE:
        raise st._err(where, f"stage '{st.name}' is inlined: it has no loops or stores of its "
                      "own; stream the stage it is inlined into, or compute_root it first")
    if st.tensor.dtype not in STREAM_DTYPES:
        raise st._err(where, f"'{st.name}' is {st.tensor.dtype}; streaming stores work for "
                      f"{' and '.join(STREAM_DTYPES)} outputs only: vectorize the loop instead")
    if v is not st.leaf_iter_vars[-1]:
        raise st._err(where, f"loop '{v.name}' is not the innermost loop of '{st.name}' "
                      f"(order {st._order_str()}); stream the innermost loop, after reordering "
                      "this one inward")


@dataclass(frozen=True, slots=True)
class Annotate(Step):
    """``s[C].unroll(loop)``, ``s[C].vectorize(loop)``, ``s[C].parallel(loop)`` or
    ``s[C].stream(loop)``."""

    loop: str
    kind: Annot

    PRIMITIVES = ("unroll", "vectorize", "parallel", "stream")

    def __post_init__(self):
        assert self.kind.value in self.PRIMITIVES, f"Annotate takes no {self.kind}: use Bind"

    @property
    def primitive(self) -> str:
        return self.kind.value

    @property
    def args(self) -> tuple:
        return (self.loop,)

    @classmethod
    def from_args(cls, primitive, stage, args):
        (loop,) = unpack(primitive, stage, args, 1)
        return cls(stage, loop, Annot(primitive))

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        v = st.loop(self.loop)
        _check_annotation(st, self.primitive, v, self.kind)
        if self.kind in (Annot.VECTORIZE, Annot.STREAM):
            _check_prefetched(st, f"{self.primitive}({v.name})", v, "a SIMD loop has no "
                              "iterations of its own to prefetch in: split it and "
                              f"{self.primitive} the inner loop")
        if self.kind is Annot.STREAM:
            _check_stream(st, v)

    def apply(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        st.annotations[st.loop(self.loop)] = (self.kind, None)

    def __str__(self) -> str:
        return f"{stage_ref(self.stage)}.{self.primitive}({loop_ref(self.stage, self.loop)})"


@dataclass(frozen=True, slots=True)
class Bind(Step):
    """``s[C].bind(loop, 'blockIdx.x')``."""

    loop: str
    tag: str

    PRIMITIVES = ("bind",)

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        prim = f"bind({self.loop})"
        if self.tag not in THREAD_TAGS:
            raise st._err(prim, f"unknown thread tag {self.tag!r}; use one of "
                          f"{', '.join(THREAD_TAGS)}")
        v = st.loop(self.loop)
        if v.kind is IterKind.REDUCE:
            who = "threads" if self.tag.startswith("threadIdx") else "work-groups"
            raise st._err(prim, f"a reduction loop cannot be bound to {who} ({who} would "
                          "update one element); rfactor it first")
        for other, (kind, arg) in st.annotations.items():
            if kind is Annot.BIND and arg == self.tag and other is not v:
                raise st._err(prim, f"loop '{other.name}' is already bound to {self.tag}; a "
                              "tag indexes one loop of a stage: bind this one to another "
                              "dimension or fuse the two loops first")
        _check_annotation(st, "bind", v, Annot.BIND, self.tag)
        _check_prefetched(st, prim, v, "a bound loop has no iterations of its own to "
                          "prefetch in: split it and bind the inner loop")

    def apply(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        st.annotations[st.loop(self.loop)] = (Annot.BIND, self.tag)

    def __str__(self) -> str:
        return f"{stage_ref(self.stage)}.bind({loop_ref(self.stage, self.loop)}, {self.tag!r})"


def _reads(s: Schedule, st: Stage, t) -> bool:
    """Does ``st`` read tensor ``t``, directly or through the stages inlined into it (as
    they are now: a stage inlined later makes lowering refuse a prefetch of it)?"""
    stack, seen = [st.op], set()
    while stack:
        for x in stack.pop().inputs:
            if x is t:
                return True
            if id(x) not in seen and s.has_stage(x) and s[x].attach is Attach.INLINE:
                seen.add(id(x))
                stack.append(s[x].op)
    return False


def _check_prefetched(st: Stage, prim: str, v: IterVar, advice: str) -> None:
    """Split and fuse keep the loops a prefetch names (like annotations: do them first); a
    SIMD or bound loop takes none."""
    for name, lp, *_ in st.prefetches:
        if lp is v:
            raise st._err(prim, f"loop '{v.name}' prefetches '{name}'; {advice}")
    for other in st.schedule.stages:
        for name, _, _, along, _ in other.prefetches:
            if along is not None and along[1] is v:
                raise st._err(prim, f"loop '{v.name}' is the loop stage '{other.name}' "
                              f"prefetches '{name}' along; {advice}")


def _check_prefetch_loop(st: Stage, prim: str, v: IterVar) -> None:
    """A prefetch sits at the top of each iteration of a scalar loop (serial, unrolled or
    parallel): a SIMD or GPU-bound loop has no iterations of its own to put it in."""
    kind = st.annotations.get(v, (None,))[0]
    if kind in (Annot.VECTORIZE, Annot.STREAM, Annot.BIND):
        raise st._err(prim, f"loop '{v.name}' is marked {kind.value}: its iterations run as "
                      "one SIMD or GPU step; prefetch at a loop outside it")


PREFETCH_BOUNDS = ("clamp", "nonfaulting")   # schedule/prefetch.py says what each does


@dataclass(frozen=True, slots=True)
class Prefetch(Step):
    """``s[C].prefetch(T, loop, offset, along)``: ``tensor`` names the tensor T read by C;
    ``along`` (or None) names a loop of a stage C is computed at (compute_at, nearest first)."""

    tensor: str
    loop: str
    offset: int = 1
    along: str | None = None
    bound: str = "clamp"

    PRIMITIVES = ("prefetch",)

    def __post_init__(self):
        object.__setattr__(self, "offset", _size(self.offset))

    @property
    def args(self) -> tuple:
        """Three arguments as before ``along`` and ``bound`` existed (logs of any age replay,
        and a step without them records as it always did), four with ``along``, five with a
        ``bound`` other than "clamp" (``along`` then None where there is none)."""
        base = (self.tensor, self.loop, self.offset)
        if self.bound != "clamp":
            return (*base, self.along, self.bound)
        return base if self.along is None else (*base, self.along)

    @classmethod
    def from_args(cls, primitive: str, stage: str, args: tuple) -> Prefetch:
        n = len(args) if len(args) in (4, 5) else 3
        return cls(stage, *unpack(primitive, stage, args, n))

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        v = st.loop(self.loop)
        prim = f"prefetch({self.tensor}, {self.loop})"
        if self.along is not None and not isinstance(self.along, str):
            raise st._err(prim, f"along must be a loop name; got {self.along!r}")
        if self.bound not in PREFETCH_BOUNDS:
            raise st._err(prim, f"bound must be one of {', '.join(map(repr, PREFETCH_BOUNDS))} "
                          f"(clamp the region into the buffer, or leave it as it is where a "
                          f"prefetch cannot fault); got {self.bound!r}")
        off = as_size(self.offset)
        if off is None or not 1 <= off <= MAX_EXTENT:
            raise st._err(prim, f"offset must be a positive int (iterations ahead); got "
                          f"{self.offset!r}")
        t = s.tensor(self.tensor)
        if t is st.tensor:
            raise st._err(prim, f"'{self.tensor}' is what '{st.name}' computes; prefetch a "
                          "tensor it reads")
        if not _reads(s, st, t):
            raise st._err(prim, f"'{st.name}' does not read '{self.tensor}' (not even through "
                          f"inlined stages); it reads {sorted({x.name for x in st.op.inputs})}")
        if (self.tensor, v) in {(n, lp) for n, lp, *_ in st.prefetches}:
            raise st._err(prim, f"'{self.tensor}' is already prefetched at loop '{v.name}'; "
                          "prefetch it once per loop")
        _check_prefetch_loop(st, prim, v)
        if self.along is not None:
            host, lp = along_loop(s, st, self.along, prim)
            _check_prefetch_loop(host, prim, lp)
            if s.has_stage(t) and isinstance(s[t].attach, AttachAt):
                raise st._err(prim, f"'{self.tensor}' is computed at a loop (compute_at "
                              f"{s[t].attach.stage.name}, {s[t].attach.loop.name}), so its "
                              f"buffer holds one iteration's values, not those of the next "
                              f"iterations of '{self.along}'; prefetch along a loop for an "
                              "argument or a tensor computed at root")

    def apply(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        along = None if self.along is None else along_loop(s, st, self.along, "prefetch")
        st.prefetches.append((self.tensor, st.loop(self.loop), self.offset, along, self.bound))

    def __str__(self) -> str:
        along = "" if self.along is None else f", along={self.along!r}"
        bound = "" if self.bound == "clamp" else f", bound={self.bound!r}"
        return (f"{stage_ref(self.stage)}.prefetch({tensor_ref(self.tensor)}, "
                f"{loop_ref(self.stage, self.loop)}, {self.offset}{along}{bound})")


def along_loop(s: Schedule, st: Stage, name: str, prim: str):
    """(host stage, loop) for ``prefetch(..., along=name)``: the loop called ``name`` that
    encloses ``st``'s attach point, in the stage ``st`` is computed at or, failing that, in
    the stages that one is computed at (nearest first)."""
    if not isinstance(st.attach, AttachAt):
        raise st._err(prim, f"along={name!r}: '{st.name}' is not computed at another stage's "
                      "loop (compute_at), so no loop of another stage encloses its loops; "
                      "prefetch at one of its own loops with an offset instead")
    seen = []
    for cur, host, enclosing in enclosing_hosts(st):
        if enclosing is None:
            raise st._err(prim, f"along={name!r}: '{cur.name}' is computed at loop "
                          f"'{cur.attach.loop.name}' of '{host.name}', which was split or fused "
                          "after compute_at; attach to one of its current loops first")
        for v in enclosing:
            if v.name == name:
                return host, v
        seen += [f"{host.name}.{v.name}" for v in enclosing]
    raise st._err(prim, f"along={name!r}: no loop called '{name}' encloses '{st.name}' where "
                  f"it is computed; the enclosing loops are {seen}")


# ---- where the stage is computed -----------------------------------------------------------

def _check_not_output(st: Stage, prim: str) -> None:
    if st.is_output:
        raise st._err(prim, f"'{st.name}' is an output of the schedule; outputs are computed "
                      "at root")


@dataclass(frozen=True, slots=True)
class ComputeAt(Step):
    """``s[P].compute_at(s[C], loop)``: ``parent`` names the stage ``C``, ``loop`` its loop."""

    parent: str
    loop: str

    PRIMITIVES = ("compute_at",)

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        prim = f"compute_at({self.parent}, {self.loop})"
        _check_not_output(st, prim)
        if self.parent == self.stage:
            raise st._err(prim, "a stage cannot be computed at one of its own loops")
        parent = s.stage(self.parent)
        parent.loop(self.loop)
        if not s._reads_transitively(parent, st):
            raise st._err(prim, f"stage '{parent.name}' does not read '{st.name}' (not even "
                          "through inlined stages); compute_at a consumer of it")

    def apply(self, s: Schedule) -> None:
        parent = s.stage(self.parent)
        st = s.stage(self.stage)
        st.attach, st.stored_at = AttachAt(parent, parent.loop(self.loop)), None

    def __str__(self) -> str:
        return (f"{stage_ref(self.stage)}.compute_at({stage_ref(self.parent)}, "
                f"{loop_ref(self.parent, self.loop)})")


ANNOT_DONE = {Annot.VECTORIZE: "vectorized", Annot.PARALLEL: "parallel",   # in error messages
              Annot.BIND: "bound to a thread index", Annot.STREAM: "streamed",
              Annot.UNROLL: "unrolled"}


def check_store_at(st: Stage, stored: AttachAt, prim: str) -> None:
    """Storing ``st`` at ``stored`` (host stage and loop) against its compute_at, as the
    stages are now (StoreAt and the lowering both ask): a ScheduleError naming what to
    change, else nothing."""
    if not isinstance(st.attach, AttachAt):
        raise st._err(prim, f"'{st.name}' is {st.attach}; store_at keeps the buffer of a "
                      "stage computed at a loop: compute_at it first, then store_at an outer "
                      "loop of the same stage")
    host, c = st.attach.stage, st.attach.loop
    if stored.stage is not host:
        raise st._err(prim, f"'{st.name}' is computed at '{host.name}', not at "
                      f"'{stored.stage.name}'; store it at a loop of '{host.name}'")
    leaves = host.leaf_iter_vars
    for v, what in ((stored.loop, "store_at"), (c, "compute_at")):
        if v not in leaves:
            raise st._err(prim, f"loop '{v.name}' of '{host.name}' ({what}) was split or "
                          f"fused since; store_at and compute_at current loops")
    lo, hi = leaves.index(stored.loop), leaves.index(c)
    if lo > hi:
        raise st._err(prim, f"loop '{stored.loop.name}' is inside '{c.name}', where "
                      f"'{st.name}' is computed; store at '{c.name}' or a loop outside it")
    for v in leaves[lo + 1:hi + 1]:
        kind = host.annotations.get(v, (None,))[0]
        if kind not in (None, Annot.UNROLL):
            raise st._err(prim, f"loop '{v.name}' of '{host.name}' is {ANNOT_DONE[kind]}, but "
                          f"the loops from '{stored.loop.name}' in to '{c.name}' share one "
                          f"buffer of '{st.name}' and must run in order, one thread: store "
                          f"at '{v.name}' or inside it, or do not {kind.value} it")


@dataclass(frozen=True, slots=True)
class StoreAt(Step):
    """``s[P].store_at(s[C], loop)``: ``parent`` names the stage ``C`` (the one ``P`` is
    computed at), ``loop`` its loop."""

    parent: str
    loop: str

    PRIMITIVES = ("store_at",)

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        prim = f"store_at({self.parent}, {self.loop})"
        parent = s.stage(self.parent)
        check_store_at(st, AttachAt(parent, parent.loop(self.loop)), prim)

    def apply(self, s: Schedule) -> None:
        parent = s.stage(self.parent)
        s.stage(self.stage).stored_at = AttachAt(parent, parent.loop(self.loop))

    def __str__(self) -> str:
        return (f"{stage_ref(self.stage)}.store_at({stage_ref(self.parent)}, "
                f"{loop_ref(self.parent, self.loop)})")


@dataclass(frozen=True, slots=True)
class ComputeInline(Step):
    """``s[P].compute_inline()``."""

    PRIMITIVES = ("compute_inline",)

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        _check_not_output(st, "compute_inline()")
        if st.op.is_reduction:
            raise st._err("compute_inline()", "a reduction cannot be inlined (its consumers "
                          "would redo the whole reduction per element); compute_at it instead")
        streamed = [v.name for v, (k, _) in st.annotations.items() if k is Annot.STREAM]
        if streamed:
            raise st._err("compute_inline()", f"loop '{streamed[0]}' of '{st.name}' is "
                          "streamed, and an inlined stage stores nothing; inline a stage "
                          "without stream(), or keep this one computed")

    def apply(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        st.attach, st.stored_at = Attach.INLINE, None

    def __str__(self) -> str:
        return f"{stage_ref(self.stage)}.compute_inline()"


@dataclass(frozen=True, slots=True)
class ComputeWith(Step):
    """``s[B].compute_with(s[A], loop)``: ``parent`` names ``A``, ``loop`` its loop."""

    parent: str
    loop: str

    PRIMITIVES = ("compute_with",)

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        prim = f"compute_with({self.parent}, {self.loop})"
        if self.parent == self.stage:
            raise st._err(prim, "a stage cannot be fused with itself")
        host = s.stage(self.parent)
        host.loop(self.loop)
        for x in (st, host):
            if x.attach is Attach.INLINE:
                raise st._err(prim, f"stage '{x.name}' is inlined and has no loops; compute "
                              "it at root or at a loop first")
        if str(st.attach) != str(host.attach):
            raise st._err(prim, f"'{st.name}' is {st.attach} but '{host.name}' is "
                          f"{host.attach}; fused stages are computed at the same place: "
                          f"compute_at (or compute_root) '{st.name}' where '{host.name}' is")
        if s._reads_transitively(host, st):
            raise st._err(prim, f"stage '{host.name}' reads '{st.name}', so it cannot run "
                          f"first in the fused loops; fuse the other way round: "
                          f"s[{host.name}].compute_with(s[{st.name}], ...)")
        if host.fused_with is not None:
            raise st._err(prim, f"stage '{host.name}' is itself fused into "
                          f"'{host.fused_with.stage.name}'; fuse with that stage instead")
        for other in s.stages:
            if other is not st and other.fused_with is not None and \
                    other.fused_with.stage is host:
                raise st._err(prim, f"stage '{other.name}' is already fused into "
                              f"'{host.name}' (one stage per host)")
            if other.fused_with is not None and other.fused_with.stage is st:
                raise st._err(prim, f"stage '{other.name}' is fused into '{st.name}', so "
                              f"'{st.name}' cannot be fused into another stage; fuse "
                              f"'{other.name}' and '{st.name}' both into '{host.name}' "
                              "is not supported either: one stage per host")

    def apply(self, s: Schedule) -> None:
        host = s.stage(self.parent)
        s.stage(self.stage).fused_with = AttachAt(host, host.loop(self.loop))

    def __str__(self) -> str:
        return (f"{stage_ref(self.stage)}.compute_with({stage_ref(self.parent)}, "
                f"{loop_ref(self.parent, self.loop)})")


@dataclass(frozen=True, slots=True)
class ComputeRoot(Step):
    """``s[P].compute_root()``."""

    PRIMITIVES = ("compute_root",)

    def validate(self, s: Schedule) -> None:
        s.stage(self.stage)

    def apply(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        st.attach, st.stored_at = Attach.ROOT, None

    def __str__(self) -> str:
        return f"{stage_ref(self.stage)}.compute_root()"
