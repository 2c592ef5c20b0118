"""Substitute expressions for variables throughout a statement.

    substitute_stmt(s, {i: io * 4 + ii})

    for j in [0, 8):                  for j in [0, 8):
      C[i, j] = A[i, j]        ->       C[io * 4 + ii, j] = A[io * 4 + ii, j]

Binders are not renamed: the caller substitutes variables bound outside ``s`` (or a loop's
own variable in its copied body, as unrolling does).
"""
from __future__ import annotations

from ...lang.expr import Expr, Var
from ...lang.visitor import substitute
from ..stmt import Stmt, StmtMutator


class _Substitute(StmtMutator):
    def __init__(self, mapping: dict[Var, Expr]):
        self.mapping = mapping

    def visit_expr(self, e: Expr) -> Expr:
        return substitute(e, self.mapping)


def substitute_stmt(s: Stmt, mapping: dict[Var, Expr]) -> Stmt:
    """``s`` with every use of a variable of ``mapping`` replaced by its expression."""
    return _Substitute(mapping).visit(s)
