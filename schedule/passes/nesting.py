"""Refuse loop kinds that cannot nest: a parallel or vectorized loop inside a vectorized one
(a streamed loop is a vectorized one here: its stores are SIMD).

    for i in [0, 64) vectorized:
      for j in [0, 8) parallel:   ->  ScheduleError: parallel loop 'j' is nested inside
        ...                           vectorized loop 'i'; vectorize an inner loop or ...

A check, not a rewrite: the statement is returned unchanged by the lowering pipeline.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ..stmt import For, ForKind, Stmt, StmtVisitor

_SIMD = (ForKind.VECTORIZED, ForKind.STREAMED)


class _Nesting(StmtVisitor):
    def __init__(self):
        self.vector: For | None = None

    def visit_For(self, s):
        if self.vector is not None:
            if s.kind is ForKind.PARALLEL:
                raise ScheduleError(
                    f"parallel loop '{s.var.name}' is nested inside {self.vector.kind.value} "
                    f"loop '{self.vector.var.name}'; vectorize an inner loop or parallelize "
                    "an outer one")
            if s.kind in _SIMD:
                raise ScheduleError(
                    f"{s.kind.value} loop '{s.var.name}' is nested inside "
                    f"{self.vector.kind.value} loop '{self.vector.var.name}'; vectorize (or "
                    "stream) only one of them (the innermost)")
        outer = self.vector
        if s.kind in _SIMD:
            self.vector = s
        super().visit_For(s)
        self.vector = outer


def check_nesting(s: Stmt) -> None:
    """Refuse loop kinds that cannot nest (parallel or vector inside a vectorized loop)."""
    _Nesting().visit(s)
