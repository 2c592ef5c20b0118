"""Work-group barriers for OpenCL kernels.

A statement at work-group level (outside thread loops) that writes a ``__local`` array is
followed by ``barrier(CLK_LOCAL_MEM_FENCE)`` (its writes become visible to the group) and, inside
a loop, preceded by one (the readers of the previous iteration are done). Barriers never sit
inside thread loops, where not every work-item of the group would reach them, nor inside an
``if``: a work-group-level ``if (c) A else B`` holding barriers becomes A and B with the uniform
``c`` pushed down to their barrier-free statements.

Lowering must not duplicate such a region (tail partitioning would copy each barrier region
into both branches of an ``if``, and gains nothing on a GPU): :data:`REGION_HOOK` tells the
statement passes so (``Target("opencl").region_hook``; schedule/passes/partition.py).
"""
from __future__ import annotations

from ..lang.expr import Expr, Not
from ..schedule.passes import register_region_hook
from ..schedule.stmt import Barrier, ForKind, IfThenElse, Stmt, StmtMutator, StmtVisitor, seq


class _Writes(StmtVisitor):
    def __init__(self, uids: set[int]):
        self.uids, self.found = uids, False

    def visit_Store(self, s):
        self.found = self.found or s.buffer.uid in self.uids


def _writes(s: Stmt, uids: set[int]) -> bool:
    w = _Writes(uids)
    w.visit(s)
    return w.found


class _Barriers(StmtMutator):
    """Barriers around work-group-level statements that write ``__local`` arrays."""

    def __init__(self, local: set[int]):
        self.local = local
        self.loops = 0

    def visit_For(self, s):
        if s.kind is ForKind.THREAD:
            if s.tag.startswith("threadIdx"):
                return s      # every work-item must reach a barrier: none inside thread loops
            return super().visit_For(s)
        self.loops += 1
        out = super().visit_For(s)
        self.loops -= 1
        return out

    def visit_Seq(self, s):
        out: list[Stmt] = []
        for x in s.stmts:
            y = self.visit(x)
            if _writes(y, self.local):
                if self.loops and not (out and isinstance(out[-1], Barrier)):
                    out.append(Barrier())       # readers of the previous iteration are done
                out += [y, Barrier()]           # the writes are visible to the group
            else:
                out.append(y)
        return seq(*out)


class _HasBarrier(StmtVisitor):
    found = False

    def visit_Barrier(self, s):
        self.found = True


def _has_barrier(s: Stmt) -> bool:
    h = _HasBarrier()
    h.visit(s)
    return h.found


class _Unbranch(StmtMutator):
    """Work-group-level ``if (c) A else B`` holding barriers -> ``A`` and ``B`` with ``c``
    (uniform in the group) pushed down to their barrier-free statements, so every work-item
    runs the same barriers. Legal OpenCL either way, but PoCL 3.1 miscompiles barriers inside
    conditionals in loops (guards evaluated as in the wrong iteration)."""

    def visit_For(self, s):
        if s.is_thread_loop:
            return s
        return super().visit_For(s)

    def visit_IfThenElse(self, s):
        if not _has_barrier(s):
            return s
        then = _Push(s.cond).visit(self.visit(s.then))
        if s.orelse is None:
            return then
        return seq(then, _Push(Not(s.cond)).visit(self.visit(s.orelse)))


class _Push(StmtMutator):
    """``if (cond) s`` with the ``if`` moved down to the statements that hold no barrier
    (lets are pure index arithmetic, safe to evaluate either way)."""

    def __init__(self, cond: Expr):
        self.cond = cond

    def visit(self, s: Stmt) -> Stmt:
        return super().visit(s) if _has_barrier(s) else IfThenElse(self.cond, s)

    def visit_IfThenElse(self, s):
        raise AssertionError("an if holding barriers is split before its enclosing one")


class _WorkGroupAlloc(StmtVisitor):
    def __init__(self):
        self.threads = self.allocs = False

    def visit_For(self, s):
        if s.is_thread_loop:
            self.threads = True
        else:
            super().visit_For(s)

    def visit_Allocate(self, s):
        self.allocs = True
        super().visit_Allocate(s)


class WorkGroupRegions:
    """The opencl target's region hook for the statement passes (a ``RegionHook``)."""

    def keeps_whole(self, body: Stmt) -> bool:
        """Does ``body`` hold threadIdx loops and a buffer allocated outside them? The kernel
        shares such a buffer in the work-group, behind barriers that every work-item must
        reach: partitioning would duplicate each barrier region."""
        v = _WorkGroupAlloc()
        v.visit(body)
        return v.threads and v.allocs

    def __repr__(self) -> str:
        return "WorkGroupRegions()"


REGION_HOOK = WorkGroupRegions()
register_region_hook("opencl", REGION_HOOK)


def insert_barriers(s: Stmt, local: set[int]) -> Stmt:
    """Barriers after work-group-level writes to the ``__local`` arrays ``local`` (buffer uids);
    none inside thread loops or ``if``s."""
    return _Unbranch().visit(_Barriers(local).visit(s)) if local else s
