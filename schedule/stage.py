"""A Stage: the loop nest of one operation, and the primitives that rewrite it.

Each public primitive is a thin validating method: it checks its arguments, raises a
``ScheduleError`` naming the stage, primitive and loop when something is wrong, records a
:class:`Step`, and updates the leaf loops / relations that lowering interprets.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ScheduleError
from ..lang.dtype import MAX_EXTENT, as_size
from ..lang.expr import Const, Expr, IterKind, IterVar, Var
from ..lang.simplify import simplify
from .attach import Attach, AttachAt, AttachPoint
from .steps import Step

if TYPE_CHECKING:
    from .schedule import Schedule


class Annot(enum.Enum):
    UNROLL = "unroll"
    VECTORIZE = "vectorize"
    PARALLEL = "parallel"
    BIND = "bind"


THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z")


@dataclass(frozen=True, slots=True)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(frozen=True, slots=True)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


def _split_extents(extent: Expr, factor: int | None, nparts: int | None) -> tuple[Expr, Expr]:
    """(outer, inner) extents of a split; constant extents are computed in Python ints (no
    32-bit overflow on the way: ``N + factor - 1`` may exceed 2**31 - 1 when N does not)."""
    if isinstance(extent, Const):
        n = int(extent.value)
        if factor is not None:
            return Const(-(-n // factor), "int32"), Const(factor, "int32")
        return Const(nparts, "int32"), Const(-(-n // nparts), "int32")
    if factor is not None:
        return (extent + (factor - 1)) // factor, Const(factor, "int32")
    return Const(nparts, "int32"), (extent + (nparts - 1)) // nparts


def _new_loop(name: str, extent: Expr, kind: IterKind) -> IterVar:
    return IterVar(Var(name), Const(0, "int32"), simplify(extent), kind)


class Stage:
    """The schedule of one compute: ``s[T]``. Loops are IterVars; their order is
    ``leaf_iter_vars``."""

    def __init__(self, op, schedule: Schedule, name: str):
        self.op = op
        self.tensor = op.output
        self.schedule = schedule
        self.name = name
        self.attach: AttachPoint = Attach.ROOT
        self.is_output = False
        self.scope: str | None = None         # memory scope of a cache stage's buffer
        self.reset(op)

    def reset(self, op) -> None:
        """Start over with ``op`` (same output tensor): fresh loops, no relations."""
        self.op = op
        self.leaf_iter_vars: list[IterVar] = list(op.axis) + list(op.reduce_axis)
        self.all_iter_vars: list[IterVar] = list(self.leaf_iter_vars)
        self.relations: list[Split | Fuse] = []
        self.annotations: dict[IterVar, tuple[Annot, str | int | None]] = {}

    @property
    def is_scheduled(self) -> bool:
        return bool(self.relations or self.annotations) or self.leaf_iter_vars != (
            list(self.op.axis) + list(self.op.reduce_axis))

    def __repr__(self):
        return f"Stage({self.name})"

    # ---- helpers -----------------------------------------------------------------------

    def _err(self, prim: str, msg: str) -> ScheduleError:
        return ScheduleError(f"stage '{self.name}': {prim}: {msg}")

    def _order_str(self) -> str:
        return "[" + ", ".join(v.name for v in self.leaf_iter_vars) + "]"

    def _leaf(self, prim: str, loop) -> IterVar:
        if not isinstance(loop, IterVar):
            raise self._err(prim, f"expected a loop (IterVar) of this stage; got {loop!r}")
        if loop in self.leaf_iter_vars:
            return loop
        if loop in self.all_iter_vars:
            raise self._err(prim, f"loop '{loop.name}' has been split or fused away; use the "
                            f"loops it became, current order {self._order_str()}")
        owner = self.schedule._owner_of(loop)
        where = f"a loop of stage '{owner.name}'" if owner else "not a loop of this schedule"
        raise self._err(prim, f"loop '{loop.name}' is {where}, not of stage '{self.name}'; "
                        f"its loops are {self._order_str()}")

    def _record(self, prim: str, *args) -> None:
        self.schedule.steps.append(Step(prim, self.name, tuple(args)))

    def loop(self, name: str) -> IterVar:
        """The current leaf loop called ``name`` (as printed by lower/steps)."""
        for v in self.leaf_iter_vars:
            if v.name == name:
                return v
        raise self._err("loop", f"no loop named '{name}'; loops are {self._order_str()}")

    def _unique(self, name: str) -> str:
        names = {v.name for v in self.all_iter_vars}
        out, n = name, 1
        while out in names:
            out, n = f"{name}{n}", n + 1
        return out

    # ---- loop structure --------------------------------------------------------------------

    def split(self, parent: IterVar, factor: int | None = None, nparts: int | None = None):
        """Split ``parent`` into ``(outer, inner)`` with ``inner`` of extent ``factor`` (or
        ``outer`` of extent ``nparts``). Non-divisible extents are guarded, results stay exact.

        ``for i in 0..N: body(i)`` -> ``for io in 0..ceil(N/f): for ii in 0..f:
        if io*f + ii < N: body(io*f + ii)``
        """
        prim = f"split({getattr(parent, 'name', parent)})"
        p = self._leaf(prim, parent)
        if (factor is None) == (nparts is None):
            raise self._err(prim, "give exactly one of factor= or nparts=")
        what = "factor" if factor is not None else "nparts"
        raw = factor if factor is not None else nparts
        val = as_size(raw)
        if val is None or val < 1:
            raise self._err(prim, f"{what} must be a positive int; got {raw!r}")
        if val > MAX_EXTENT:
            raise self._err(prim, f"{what} {val} does not fit a 32-bit loop extent (at most "
                            f"2**31 - 1 = {MAX_EXTENT}); use a smaller {what}")
        if p in self.annotations:
            raise self._err(prim, f"loop '{p.name}' is already annotated "
                            f"{self.annotations[p][0].value}; split before annotating")
        factor, nparts = (val, None) if factor is not None else (None, val)
        oext, iext = _split_extents(p.extent, factor, nparts)
        outer = _new_loop(self._unique(p.name + ".outer"), oext, p.kind)
        self.all_iter_vars.append(outer)
        inner = _new_loop(self._unique(p.name + ".inner"), iext, p.kind)
        self.all_iter_vars.append(inner)
        self.relations.append(Split(p, outer, inner, factor, nparts))
        k = self.leaf_iter_vars.index(p)
        self.leaf_iter_vars[k:k + 1] = [outer, inner]
        self._record("split", p.name, factor, nparts)
        return outer, inner

    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int):
        """Split ``x`` and ``y`` and order them ``xo, yo, xi, yi``; returns those four."""
        prim = f"tile({getattr(x, 'name', x)}, {getattr(y, 'name', y)})"
        if x is y:
            raise self._err(prim, f"both loops are '{x.name}'; tile two different loops")
        saved = (list(self.leaf_iter_vars), list(self.all_iter_vars), list(self.relations),
                 dict(self.annotations), len(self.schedule.steps))
        try:  # all or nothing: a refused tile leaves the stage as it was
            xo, xi = self.split(x, factor=x_factor)
            yo, yi = self.split(y, factor=y_factor)
            self.reorder(xo, yo, xi, yi)
        except ScheduleError:
            self.leaf_iter_vars, self.all_iter_vars, self.relations, self.annotations = saved[:4]
            del self.schedule.steps[saved[4]:]
            raise
        return xo, yo, xi, yi

    def fuse(self, *loops: IterVar) -> IterVar:
        """Fuse adjacent loops (outer first) into one:
        ``for i in 0..N: for j in 0..M`` -> ``for f in 0..N*M: i = f // M; j = f % M``."""
        names = ", ".join(getattr(v, "name", repr(v)) for v in loops)
        prim = f"fuse({names})"
        if len(loops) < 2:
            if len(loops) == 1:
                return self._leaf(prim, loops[0])
            raise self._err(prim, "give at least one loop")
        vs = [self._leaf(prim, v) for v in loops]
        pos = [self.leaf_iter_vars.index(v) for v in vs]
        if any(b != a + 1 for a, b in zip(pos, pos[1:])):
            raise self._err(prim, f"loops are not adjacent in the current order "
                            f"{self._order_str()}; reorder them next to each other first "
                            "(outer first)")
        if len({v.kind for v in vs}) > 1:
            raise self._err(prim, "cannot fuse a reduction loop with a spatial loop")
        for v in vs:
            if v in self.annotations:
                raise self._err(prim, f"loop '{v.name}' is already annotated "
                                f"{self.annotations[v][0].value}; fuse before annotating")
        total = 1
        for v in vs:
            total = total * v.extent.value if isinstance(v.extent, Const) and \
                total is not None else None
        if total is not None and total > MAX_EXTENT:
            raise self._err(prim, f"the fused loop would run {total} iterations, more than a "
                            f"32-bit loop variable counts (2**31 - 1 = {MAX_EXTENT}); fuse "
                            "fewer loops, or split them first and fuse the parts")
        fused = vs[0]
        for v in vs[1:]:
            f = _new_loop(self._unique(f"{fused.name}.{v.name}.fused"), fused.extent * v.extent,
                          v.kind)
            self.all_iter_vars.append(f)
            self.relations.append(Fuse(fused, v, f))
            k = self.leaf_iter_vars.index(fused)
            self.leaf_iter_vars[k:k + 2] = [f]
            fused = f
        self._record("fuse", *(v.name for v in vs))
        return fused

    def reorder(self, *loops: IterVar) -> None:
        """Put the given loops in this order, in the positions they occupy now:
        ``[i, j, k]`` and ``reorder(k, i)`` -> ``[k, j, i]``."""
        prim = f"reorder({', '.join(getattr(v, 'name', repr(v)) for v in loops)})"
        vs = [self._leaf(prim, v) for v in loops]
        if len(set(vs)) != len(vs):
            dup = next(v for v in vs if vs.count(v) > 1)
            raise self._err(prim, f"loop '{dup.name}' is given more than once")
        pos = sorted(self.leaf_iter_vars.index(v) for v in vs)
        for p, v in zip(pos, vs):
            self.leaf_iter_vars[p] = v
        self._record("reorder", *(v.name for v in vs))

    # ---- annotations -------------------------------------------------------------------

    def _annotate(self, prim: str, loop, kind: Annot, arg=None) -> None:
        v = self._leaf(f"{prim}({getattr(loop, 'name', loop)})", loop)
        where = f"{prim}({v.name})"
        old = self.annotations.get(v)
        if old is not None and old != (kind, arg):
            raise self._err(where, f"loop '{v.name}' is already marked {old[0].value}"
                            f"{'' if old[1] is None else ' ' + str(old[1])}; a loop takes one "
                            "of unroll/vectorize/parallel/bind — split it to use two")
        if kind in (Annot.PARALLEL, Annot.VECTORIZE) and v.kind is IterKind.REDUCE:
            raise self._err(where, f"loop '{v.name}' carries the reduction of "
                            f"'{self.name}' (iterations update the same element); use "
                            f"s.rfactor({self.name}, {v.name}) to make it a spatial axis of a "
                            "new stage, then " + prim + " that")
        self.annotations[v] = (kind, arg)
        self._record(prim, v.name, *(() if arg is None else (arg,)))

    def unroll(self, loop: IterVar) -> None:
        """Unroll ``loop``: its body is repeated once per iteration (constant extents)."""
        self._annotate("unroll", loop, Annot.UNROLL)

    def vectorize(self, loop: IterVar) -> None:
        """Run ``loop``'s iterations in SIMD lanes (``#pragma omp simd`` in C)."""
        self._annotate("vectorize", loop, Annot.VECTORIZE)

    def parallel(self, loop: IterVar) -> None:
        """Run ``loop``'s iterations on several threads (OpenMP in C)."""
        self._annotate("parallel", loop, Annot.PARALLEL)

    def bind(self, loop: IterVar, tag: str) -> None:
        """Bind ``loop`` to a GPU index: ``blockIdx.x|y|z`` or ``threadIdx.x|y|z``."""
        if tag not in THREAD_TAGS:
            raise self._err(f"bind({getattr(loop, 'name', loop)})",
                            f"unknown thread tag {tag!r}; use one of {', '.join(THREAD_TAGS)}")
        if getattr(loop, "kind", None) is IterKind.REDUCE:
            who = "threads" if tag.startswith("threadIdx") else "work-groups"
            raise self._err(f"bind({loop.name})", f"a reduction loop cannot be bound to {who} "
                            f"({who} would update one element); rfactor it first")
        for other, (kind, arg) in self.annotations.items():
            if kind is Annot.BIND and arg == tag and other is not loop:
                raise self._err(f"bind({getattr(loop, 'name', loop)})",
                                f"loop '{other.name}' is already bound to {tag}; a tag indexes "
                                "one loop of a stage: bind this one to another dimension or "
                                "fuse the two loops first")
        self._annotate("bind", loop, Annot.BIND, tag)

    # ---- where the stage is computed -------------------------------------------------------

    def compute_at(self, parent: Stage, loop: IterVar) -> None:
        """Compute this stage inside ``parent``'s ``loop``: just the region one iteration of
        ``loop`` reads, into a buffer allocated there (bound inference sizes it)."""
        prim = f"compute_at({getattr(parent, 'name', parent)}, {getattr(loop, 'name', loop)})"
        if not isinstance(parent, Stage):
            raise self._err(prim, f"the first argument must be a stage s[T]; got {parent!r}")
        self._check_not_output(prim)
        if parent is self:
            raise self._err(prim, "a stage cannot be computed at one of its own loops")
        v = parent._leaf(prim, loop)
        if not self.schedule._reads_transitively(parent, self):
            raise self._err(prim, f"stage '{parent.name}' does not read '{self.name}' (not even "
                            "through inlined stages); compute_at a consumer of it")
        self.attach = AttachAt(parent, v)
        self._record("compute_at", parent.name, v.name)

    def compute_inline(self) -> None:
        """Substitute this stage's body into its consumers; it gets no loops or buffer."""
        prim = "compute_inline()"
        self._check_not_output(prim)
        if self.op.is_reduction:
            raise self._err(prim, "a reduction cannot be inlined (its consumers would redo the "
                            "whole reduction per element); compute_at it instead")
        self.attach = Attach.INLINE
        self._record("compute_inline")

    def compute_root(self) -> None:
        """Compute the whole tensor before its consumers (the default)."""
        self.attach = Attach.ROOT
        self._record("compute_root")

    def _check_not_output(self, prim: str) -> None:
        if self.is_output:
            raise self._err(prim, f"'{self.name}' is an output of the schedule; outputs are "
                            "computed at root")
