"""Refuse loop kinds that cannot nest: a parallel or vectorized loop inside a vectorized one.

    for i in [0, 64) vectorized:
      for j in [0, 8) parallel:   ->  ScheduleError: parallel loop 'j' is nested inside
        ...                           vectorized loop 'i'; vectorize an inner loop or ...

A check, not a rewrite: the statement is returned unchanged by the lowering pipeline.
"""
from __future__ import annotations

from ...errors import ScheduleError
from ..stmt import For, ForKind, Stmt, StmtVisitor


class _Nesting(StmtVisitor):
    def __init__(self):
        self.vector: For | None = None

    def visit_For(self, s):
        if self.vector is not None:
            if s.kind is ForKind.PARALLEL:
                raise ScheduleError(
                    f"parallel loop '{s.var.name}' is nested inside vectorized loop "
                    f"'{self.vector.var.name}'; vectorize an inner loop or parallelize an "
                    "outer one")
            if s.kind is ForKind.VECTORIZED:
                raise ScheduleError(
                    f"vectorized loop '{s.var.name}' is nested inside vectorized loop "
                    f"'{self.vector.var.name}'; vectorize only one of them (the innermost)")
        outer = self.vector
        if s.kind is ForKind.VECTORIZED:
            self.vector = s
        super().visit_For(s)
        self.vector = outer


def check_nesting(s: Stmt) -> None:
    """Refuse loop kinds that cannot nest (parallel or vector inside a vectorized loop)."""
    _Nesting().visit(s)
