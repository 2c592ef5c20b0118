"""Simplify every expression of a statement knowing each loop's and let's range; drop dead
code.

    for i in [0, 8):                          for i in [0, 8):
      if i < 16:                        ->        let t = (i*4 + 2) // 8
        let t = (i*4 + 2) // 8                    A[t] = 0.0f
        A[t] = 0.0f
      for j in [0, 0):
        B[j] = 1.0f

Range facts are scoped (schedule/ranges.py): a fact learnt at a ``for`` or ``let`` holds in
its body only, so two sibling lets of one variable (both halves of a partitioned loop) are
each simplified with their own value's range. Affine lets are substituted into their body,
where index arithmetic can cancel against them; loops of extent 1 become their body.
"""
from __future__ import annotations

from ...lang.expr import BinKind, BinOp, Const, Expr, Var
from ...lang.simplify import simplify
from ..ranges import RangeContext
from ..stmt import EMPTY, For, ForKind, IfThenElse, LetStmt, Stmt, StmtMutator, seq
from .substitute import substitute_stmt


class _Simplify(StmtMutator):
    """Simplify every expression knowing each loop variable's range; drop dead code."""

    def __init__(self):
        self.ranges = RangeContext()

    def visit_expr(self, e: Expr) -> Expr:
        return simplify(e, self.ranges.facts)

    def visit_For(self, s):
        mn, ext = self.visit_expr(s.min), self.visit_expr(s.extent)
        if isinstance(ext, Const) and ext.value <= 0:
            return EMPTY
        if isinstance(ext, Const) and ext.value == 1 and s.kind is not ForKind.THREAD:
            return self.visit(substitute_stmt(s.body, {s.var: mn}))
        with self.ranges.loop(s.var, mn, ext):
            body = self.visit(s.body)
        if body is EMPTY:
            return EMPTY
        if mn is s.min and ext is s.extent and body is s.body:
            return s
        return For(s.var, mn, ext, s.kind, body, s.tag)

    def visit_IfThenElse(self, s):
        c = self.visit_expr(s.cond)
        if isinstance(c, Const):
            if c.value:
                return self.visit(s.then)
            return self.visit(s.orelse) if s.orelse is not None else EMPTY
        t = self.visit(s.then)
        e = None if s.orelse is None else self.visit(s.orelse)
        if t == e:
            return t  # if c: x else: x -> x
        if t is EMPTY and e is None:
            return EMPTY
        return IfThenElse(c, t, e)

    def visit_LetStmt(self, s):
        v = self.visit_expr(s.value)
        with self.ranges.let(s.var, v):
            if _is_affine(v):  # inline it, so that index arithmetic can cancel against it
                return self.visit(substitute_stmt(s.body, {s.var: v}))
            b = self.visit(s.body)
        return LetStmt(s.var, v, b)

    def visit_Seq(self, s):
        xs = [self.visit(x) for x in s.stmts]
        return seq(*(x for x in xs if x is not EMPTY)) if any(
            x is not EMPTY for x in xs) else EMPTY


def _is_affine(e: Expr) -> bool:
    if isinstance(e, (Const, Var)):
        return True
    if isinstance(e, BinOp) and e.op in (BinKind.ADD, BinKind.SUB, BinKind.MUL):
        return _is_affine(e.a) and _is_affine(e.b)
    return False


def simplify_stmt(s: Stmt) -> Stmt:
    """``s`` with its expressions simplified under the ranges of the loops and lets around
    them, constant conditions resolved and empty loops and branches removed."""
    return _Simplify().visit(s)
