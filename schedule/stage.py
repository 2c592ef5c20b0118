"""A Stage: the loop nest of one operation, and the primitives that rewrite it.

Each public primitive is a thin method: it checks the objects it is given (loops of this
stage, a stage of this schedule), builds the primitive's step value (``loop_steps.py``) naming
them, and runs it with :meth:`Schedule.apply_step`, which validates it (a ``ScheduleError``
naming the stage, primitive and loop; nothing changed), applies it and records it. The leaf
loops, relations, annotations and attach point below are what the recorded steps built: a
cache of folding ``s.steps``, never changed any other way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ScheduleError
from ..lang.expr import IterVar
from . import loop_steps as ls
from .attach import Attach, AttachAt, AttachPoint
from .relations import THREAD_TAGS, Annot, Fuse, Split
from .steps import Step

if TYPE_CHECKING:
    from .schedule import Schedule

# the relations, annotation kinds and attach points, which bound.py and lower.py read, too
__all__ = ["THREAD_TAGS", "Annot", "Attach", "AttachAt", "Fuse", "Split", "Stage", "StageState"]


@dataclass(frozen=True, slots=True)
class StageState:
    """What a stage's steps built, by names: equal for two schedules exactly when folding
    their steps gave the same loop nest."""

    name: str
    op: str                                        # the operation (memory steps rewrite it)
    leaves: tuple[tuple[str, str, str], ...]       # (name, extent, kind) in loop order
    relations: tuple[str, ...]
    annotations: tuple[tuple[str, str, str | None], ...]
    attach: str
    scope: str | None
    fused: str = ""                                # compute_with: "host.loop"
    prefetches: tuple[tuple, ...] = ()   # (tensor, loop, offset[, "host.along"])
    stored: str = ""                               # store_at: "host.loop"


def _relation_str(r) -> str:
    if isinstance(r, Split):
        return f"split {r.parent.name} -> {r.outer.name}, {r.inner.name} " \
               f"({r.factor}, {r.nparts})"
    return f"fuse {r.outer.name}, {r.inner.name} -> {r.fused.name}"


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
        self.fused_with: AttachAt | None = None   # compute_with: the host stage and loop
        self.stored_at: AttachAt | None = None    # store_at: the host stage and loop
        self.reset(op)

    def reset(self, op) -> None:
        """Start over with ``op`` (same output tensor): fresh loops, no relations."""
        self.op = op
        self.leaf_iter_vars: list[IterVar] = list(op.axis) + list(op.reduce_axis)
        self.all_iter_vars: list[IterVar] = list(self.leaf_iter_vars)
        self.relations: list[Split | Fuse] = []
        self.annotations: dict[IterVar, tuple[Annot, str | int | None]] = {}
        # (tensor, loop, offset, None or (host stage, its loop) for along=, bound)
        self.prefetches: list[tuple[str, IterVar, int, tuple | None, str]] = []
        self.fused_with = None

    @property
    def is_scheduled(self) -> bool:
        return bool(self.relations or self.annotations or self.prefetches) or \
            self.leaf_iter_vars != (
            list(self.op.axis) + list(self.op.reduce_axis))

    @property
    def steps(self) -> list[Step]:
        """The recorded steps acting on this stage, in order."""
        return [x for x in self.schedule.steps if x.stage == self.name]

    @property
    def state(self) -> StageState:
        """This stage's loop nest by names (see :meth:`Schedule.replayed`)."""
        return StageState(
            self.name, str(self.op.body),
            tuple((v.name, str(v.extent), v.kind.value) for v in self.leaf_iter_vars),
            tuple(_relation_str(r) for r in self.relations),
            tuple(sorted((v.name, k.value, None if a is None else str(a))
                         for v, (k, a) in self.annotations.items())),
            str(self.attach), self.scope,
            "" if self.fused_with is None else
            f"{self.fused_with.stage.name}.{self.fused_with.loop.name}",
            tuple(sorted((t, v.name, off, *(() if a is None else (f"{a[0].name}.{a[1].name}",)),
                          *(() if b == "clamp" else (f"bound={b}",)))
                         for t, v, off, a, b in self.prefetches)),
            "" if self.stored_at is None else
            f"{self.stored_at.stage.name}.{self.stored_at.loop.name}")

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

    def loop(self, name: str) -> IterVar:
        """The current leaf loop called ``name`` (as printed by lower/steps)."""
        found = [v for v in self.leaf_iter_vars if v.name == name]
        if len(found) > 1:
            raise self._err("loop", f"{len(found)} loops are called '{name}' "
                            f"{self._order_str()}; steps name loops, so give the compute's "
                            "axes distinct names (e.g. reduce_axis(..., name='k'))")
        if not found:
            raise self._err("loop", f"no loop named '{name}'; loops are {self._order_str()}")
        return found[0]

    def _unique(self, name: str) -> str:
        names = {v.name for v in self.all_iter_vars}
        out, n = name, 1
        while out in names:
            out, n = f"{name}{n}", n + 1
        return out

    @staticmethod
    def _name(v, show=str) -> str:
        """A loop's (or a stage's) name in a message; what was given when it has none."""
        return getattr(v, "name", None) or show(v)

    # ---- loop structure --------------------------------------------------------------------

    def split(self, parent: IterVar, factor: int | None = None, nparts: int | None = None):
        """Split ``parent`` into ``(outer, inner)`` with ``inner`` of extent ``factor`` (or
        ``outer`` of extent ``nparts``). Non-divisible extents are guarded, results stay exact.

        ``for i in 0..N: body(i)`` -> ``for io in 0..ceil(N/f): for ii in 0..f:
        if io*f + ii < N: body(io*f + ii)``
        """
        p = self._leaf(f"split({self._name(parent)})", parent)
        return self.schedule.apply_step(ls.Split(self.name, p.name, factor, nparts))

    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int):
        """Split ``x`` and ``y`` and order them ``xo, yo, xi, yi``; returns those four.

        ``for x: for y`` -> ``for xo: for yo: for xi in 0..x_factor: for yi in 0..y_factor``
        """
        prim = f"tile({self._name(x)}, {self._name(y)})"
        if x is y:
            raise self._err(prim, f"both loops are '{x.name}'; tile two different loops")
        sx = ls.Split(self.name, self._leaf(f"split({self._name(x)})", x).name, x_factor)
        sy = ls.Split(self.name, self._leaf(f"split({self._name(y)})", y).name, y_factor)
        sx.validate(self.schedule)   # all or nothing: both splits are checked before either
        sy.validate(self.schedule)   # applies (splitting x leaves y's split valid)
        xo, xi = self.schedule.apply_step(sx)
        yo, yi = self.schedule.apply_step(sy)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *loops: IterVar) -> IterVar:
        """Fuse adjacent loops (outer first) into one:
        ``for i in 0..N: for j in 0..M`` -> ``for f in 0..N*M: i = f // M; j = f % M``."""
        prim = f"fuse({', '.join(self._name(v, repr) for v in loops)})"
        if len(loops) < 2:
            if len(loops) == 1:
                return self._leaf(prim, loops[0])
            raise self._err(prim, "give at least one loop")
        vs = [self._leaf(prim, v) for v in loops]
        return self.schedule.apply_step(ls.Fuse(self.name, tuple(v.name for v in vs)))

    def reorder(self, *loops: IterVar) -> None:
        """Put the given loops in this order, in the positions they occupy now:
        ``[i, j, k]`` and ``reorder(k, i)`` -> ``[k, j, i]``."""
        prim = f"reorder({', '.join(self._name(v, repr) for v in loops)})"
        vs = [self._leaf(prim, v) for v in loops]
        self.schedule.apply_step(ls.Reorder(self.name, tuple(v.name for v in vs)))

    # ---- annotations -------------------------------------------------------------------

    def _annotate(self, kind: Annot, loop) -> None:
        v = self._leaf(f"{kind.value}({self._name(loop)})", loop)
        self.schedule.apply_step(ls.Annotate(self.name, v.name, kind))

    def unroll(self, loop: IterVar) -> None:
        """Unroll ``loop``: its body is repeated once per iteration (constant extents)."""
        self._annotate(Annot.UNROLL, loop)

    def vectorize(self, loop: IterVar) -> None:
        """Run ``loop``'s iterations in SIMD lanes (``#pragma omp simd`` in C)."""
        self._annotate(Annot.VECTORIZE, loop)

    def parallel(self, loop: IterVar) -> None:
        """Run ``loop``'s iterations on several threads (OpenMP in C)."""
        self._annotate(Annot.PARALLEL, loop)

    def stream(self, loop: IterVar) -> None:
        """Store this stage's values in ``loop`` with non-temporal (streaming) stores that
        bypass the caches: for a large output written once and not read again soon (no
        read-for-ownership of the destination lines).

        ``loop`` must be the stage's innermost loop, spatial, indexing the last dimension with
        stride 1 (checked when lowering); the stage float32 or float64, not a reduction, not
        inlined. It implies SIMD (a loop takes one annotation: do not vectorize it too). The C
        target computes chunks of up to 1 KB into an aligned tile and streams each
        (``_mm512_stream_ps``/AVX/SSE2, a plain copy elsewhere), fencing at the end of each
        parallel iteration and of the function; loops with guards (tails) are plain SIMD
        loops. OpenCL emits a plain loop. Stream a long loop (hundreds of elements).

        ``for y: for x in 0..W: B[y, x] = f(y, x)`` -> ``for y: for x in 0..W streamed:
        B[y, x] = f(y, x)``; in C, per chunk of 256 (float32): ``tile[x - c] = f(y, x)`` in
        a SIMD loop, then ``lt_stream_f32(&B[y, c], tile, n)``.

        Raises ``ScheduleError`` (naming the stage and loop) for a loop that is not the
        innermost, a reduction loop or stage, an inlined stage, another dtype, a loop already
        annotated; lowering, for a loop no longer innermost, a stage attached inside it or a
        store not contiguous in it."""
        self._annotate(Annot.STREAM, loop)

    def prefetch(self, tensor, loop: IterVar, offset: int = 1,
                 along: IterVar | None = None, bound: str = "clamp") -> None:
        """At the top of each iteration of ``loop``, ask the caches for the part of
        ``tensor`` (read by this stage) that iteration ``loop + offset`` will read: a hint
        that never changes a result (Halide's and TVM's ``prefetch``). For an operand
        streamed from L2 or memory faster than the hardware prefetchers follow, e.g. the
        packed panels of a GEMM micro-kernel, ``offset`` iterations ahead.

        The region is what one iteration of ``loop`` reads of ``tensor`` (the loops inside
        it span their extents), clamped into the buffer, so no address outside it is formed;
        the last iterations fetch the last one's region again. C: ``__builtin_prefetch`` of
        each 64-byte line of the region's rows; OpenCL: nothing (PoCL and GPUs prefetch
        through their own means). ``loop`` is a serial, unrolled or parallel loop of this
        stage (not vectorized, streamed or bound); split and fuse it before.

        ``for ki: P += Ap[ki, 0:8] * Bp[ki, 0:32]`` with ``prefetch(Bp, ki, 16)`` ->
        ``for ki: prefetch Bp[min(ki + 16, K - 1), 0:32]; P += ...``

        ``along``: a loop (or its name) of the stage this one is computed at (compute_at; or
        of the stages that one is computed at, nearest first), enclosing the attach point.
        Then each iteration of ``loop`` fetches what the same iteration reads in iteration
        ``along + offset`` of that loop (clamped to its last iteration): the next row's chunk
        while this row's is computed, the prefetches spread over the work of ``loop`` instead
        of a burst at the top of ``along``. Row softmax (exp buffered per row, computed at the
        row loop ``io``): ``s[e].prefetch(x, jo, 1, along=io)`` ->
        ``for io: ...; for jo: prefetch x[min(io + 1, N - 1), jo*128 : jo*128 + 128];
        e[jo*128 + ...] = exp(x[io, ...] - m)``. The tensor must be an argument or computed at
        root (an attached buffer holds one iteration's values).

        ``bound``: ``"clamp"`` (the default) keeps every address inside the buffer, the last
        iterations fetching the last region again (the ``min`` above); ``"nonfaulting"``
        (Halide's ``PrefetchBoundStrategy::NonFaulting``) leaves the region as it is, so the
        last ``offset`` iterations ask for lines past it: the address has no ``min`` (five
        integer instructions fewer per iteration of a micro-kernel). For the C target, whose
        prefetches never fault (the address is formed as an integer, not a pointer); OpenCL
        drops every prefetch either way.

        Raises ``ScheduleError`` (naming the stage, tensor and loop) for a tensor the stage
        does not read, its own output, an offset below 1, a SIMD or bound loop, the same
        tensor twice at one loop; lowering, for a buffer not allocated around the loop
        (computed inside it) or a loop at a compute_with level."""
        v = self._leaf(f"prefetch({getattr(tensor, 'name', tensor)}, ...)", loop)
        name = getattr(tensor, "name", None)
        if not isinstance(name, str):
            raise self._err(f"prefetch({tensor!r}, {v.name})", "expected a tensor this stage "
                            f"reads; got {tensor!r}")
        found = self.schedule.tensor(name)
        if found is not tensor:
            raise self._err(f"prefetch({name}, {v.name})", f"another tensor of this schedule "
                            f"is called '{name}'; steps name tensors, so give the two "
                            "distinct names")
        if along is not None:
            prim = f"prefetch({name}, {v.name})"
            if not isinstance(along, (IterVar, str)):
                raise self._err(prim, "along must be a loop (IterVar, or its name) of the stage "
                                f"this one is computed at; got {along!r}")
            host, found = ls.along_loop(self.schedule, self, getattr(along, "name", along),
                                        prim)
            if isinstance(along, IterVar) and found is not along:
                raise self._err(prim, f"along: loop '{along.name}' is not the loop of that name "
                                f"enclosing '{self.name}' where it is computed (that one is "
                                f"'{host.name}.{found.name}'); give the loops distinct names")
        self.schedule.apply_step(ls.Prefetch(self.name, name, v.name, offset,
                                             getattr(along, "name", along), bound))

    def bind(self, loop: IterVar, tag: str) -> None:
        """Bind ``loop`` to a GPU index: ``blockIdx.x|y|z`` or ``threadIdx.x|y|z``."""
        prim = f"bind({self._name(loop)})"
        if tag not in THREAD_TAGS:   # before the loop: the tag is the likelier typo
            raise self._err(prim, f"unknown thread tag {tag!r}; use one of "
                            f"{', '.join(THREAD_TAGS)}")
        v = self._leaf(prim, loop)
        self.schedule.apply_step(ls.Bind(self.name, v.name, tag))

    # ---- where the stage is computed -------------------------------------------------------

    def compute_at(self, parent: Stage, loop: IterVar) -> None:
        """Compute this stage inside ``parent``'s ``loop``: just the region one iteration of
        ``loop`` reads, into a buffer allocated there (bound inference sizes it).

        ``for i: P[i] = f(i)`` + ``for y: for x: C[y, x] = P[y] + P[y + 1]`` with
        ``compute_at(s[C], y)`` -> ``for y: (for i in y..y+1: P[i - y] = f(i)); for x: ...``
        """
        v = self._stage_loop("compute_at", parent, loop)
        self.schedule.apply_step(ls.ComputeAt(self.name, parent.name, v.name))

    def store_at(self, parent: Stage, loop: IterVar) -> None:
        """Keep this stage's buffer in each iteration of ``parent``'s ``loop`` (Halide's
        ``store_at``) while it is still computed where ``compute_at(parent, ...)`` put it,
        at ``loop`` or a loop inside it (call store_at after compute_at; compute_at,
        compute_inline and compute_root drop it). What one iteration computed is then there
        for the next: where the region slides along one dimension, each iteration computes
        only what the previous ones did not, into a buffer folded to the window
        (schedule/sliding.py). The loops from ``loop`` (exclusive) in to the compute loop
        must be serial or unrolled.

        ``blur_x`` computed at ``blur_y``'s row loop ``yi`` and stored at the strip loop
        ``yo`` -> per strip: rows 0..2 of blur_x at yi == 0, then one new row per yi, in a
        4-row buffer indexed modulo 4.
        """
        v = self._stage_loop("store_at", parent, loop)
        self.schedule.apply_step(ls.StoreAt(self.name, parent.name, v.name))

    def compute_inline(self) -> None:
        """Substitute this stage's body into its consumers; it gets no loops or buffer.

        ``P[i] = f(i)``; ``C[i] = P[i] * 2`` -> ``C[i] = f(i) * 2``
        """
        self.schedule.apply_step(ls.ComputeInline(self.name))

    def compute_with(self, host: Stage, loop: IterVar) -> None:
        """Fuse this stage's outer loops with ``host``'s loops down to ``loop``: each
        iteration of the fused loops runs ``host``'s body for it, then this stage's (Halide's
        ``compute_with``). Both stages are computed at the same place; the fused loops must
        have equal extents and the same kind (serial, unrolled, or parallel over spatial
        loops); this stage may read only what ``host`` computes in the same iteration.

        ``e[j] = exp(x[j])``; ``s[r].compute_with(s[e], jo)`` with ``r += e[k]`` split like
        ``e`` -> ``for jo: (for ji: e[..] = exp(..)); (for ki: r[ki] += e[..])``: the sum
        reads each chunk while it is still in registers or L1.
        """
        v = self._stage_loop("compute_with", host, loop)
        self.schedule.apply_step(ls.ComputeWith(self.name, host.name, v.name))

    def _stage_loop(self, name: str, other: Stage, loop) -> IterVar:
        """``other`` (a stage of this schedule) and its leaf ``loop``, checked for primitive
        ``name``."""
        prim = f"{name}({self._name(other)}, {self._name(loop)})"
        if not isinstance(other, Stage):
            raise self._err(prim, f"the first argument must be a stage s[T]; got {other!r}")
        if other.schedule is not self.schedule:
            raise self._err(prim, f"stage '{other.name}' belongs to another schedule; use "
                            f"s[{other.name}] of this one")
        return other._leaf(prim, loop)

    def compute_root(self) -> None:
        """Compute the whole tensor before its consumers (the default)."""
        self.schedule.apply_step(ls.ComputeRoot(self.name))

