"""Give every let statement a fresh variable, so that a copy can sit beside its original.

    let x = i // 2                    let x' = i // 2      (x' a new Var, also shown "x")
    A[x] = 0                   ->     A[x'] = 0

Unrolling places the copies of a body in one scope (a Seq): without fresh variables a code
generator would declare one name twice (C: "redefinition of 'T_min0'").
"""
from __future__ import annotations

from ...lang.expr import Var
from ..stmt import LetStmt, Stmt, StmtMutator
from .substitute import substitute_stmt


class _FreshLets(StmtMutator):
    """Every LetStmt binds a new Var (same display name), substituted in its body."""

    def visit_LetStmt(self, s):
        v = Var(s.var.name, s.var.dtype)
        body = self.visit(substitute_stmt(s.body, {s.var: v}))
        return LetStmt(v, s.value, body)


def fresh_lets(s: Stmt) -> Stmt:
    """``s`` with a fresh variable for each of its let statements: a copy of a statement
    that can sit beside the original in one scope."""
    return _FreshLets().visit(s)
