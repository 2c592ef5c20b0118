"""One visitor and one mutator base for expressions, dispatching to ``visit_<Node>``."""
from __future__ import annotations

from .expr import BinOp, BufferLoad, Call, Cast, Expr, Load, Not, Reduce, Select, Var


class ExprVisitor:
    """Walks an expression tree; override ``visit_<Node>`` for the nodes you care about."""

    def visit(self, e: Expr):
        method = getattr(self, "visit_" + type(e).__name__, None)
        if method is None:
            raise TypeError(f"{type(self).__name__} has no case for {type(e).__name__}")
        return method(e)

    def visit_Const(self, e): pass
    def visit_Var(self, e): pass

    def visit_BinOp(self, e):
        self.visit(e.a)
        self.visit(e.b)

    def visit_Not(self, e): self.visit(e.a)
    def visit_Cast(self, e): self.visit(e.value)

    def visit_Select(self, e):
        self.visit(e.cond)
        self.visit(e.t)
        self.visit(e.f)

    def visit_Call(self, e):
        for a in e.args:
            self.visit(a)

    def visit_Load(self, e):
        for i in e.indices:
            self.visit(i)

    visit_BufferLoad = visit_Load

    def visit_Reduce(self, e):
        self.visit(e.source)
        if e.where is not None:
            self.visit(e.where)


class ExprMutator:
    """Rebuilds an expression bottom-up; returns the *same* object where nothing changed."""

    def visit(self, e: Expr) -> Expr:
        method = getattr(self, "visit_" + type(e).__name__, None)
        if method is None:
            raise TypeError(f"{type(self).__name__} has no case for {type(e).__name__}")
        return method(e)

    def visit_Const(self, e): return e
    def visit_Var(self, e): return e

    def visit_BinOp(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        return e if a is e.a and b is e.b else BinOp(e.op, a, b)

    def visit_Not(self, e):
        a = self.visit(e.a)
        return e if a is e.a else Not(a)

    def visit_Cast(self, e):
        v = self.visit(e.value)
        return e if v is e.value else Cast(e.dtype, v)

    def visit_Select(self, e):
        c, t, f = self.visit(e.cond), self.visit(e.t), self.visit(e.f)
        return e if c is e.cond and t is e.t and f is e.f else Select(c, t, f)

    def visit_Call(self, e):
        args = tuple(self.visit(a) for a in e.args)
        return e if all(x is y for x, y in zip(args, e.args)) else Call(e.name, args, e.dtype)

    def visit_Load(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        return e if all(x is y for x, y in zip(idx, e.indices)) else Load(e.tensor, idx)

    def visit_BufferLoad(self, e):
        idx = tuple(self.visit(i) for i in e.indices)
        return e if all(x is y for x, y in zip(idx, e.indices)) else BufferLoad(e.buffer, idx)

    def visit_Reduce(self, e):
        src = self.visit(e.source)
        w = None if e.where is None else self.visit(e.where)
        return e if src is e.source and w is e.where else Reduce(e.combiner, src, e.axis, w)


class Substitute(ExprMutator):
    def __init__(self, mapping: dict[Var, Expr]):
        self.mapping = mapping

    def visit_Var(self, e):
        return self.mapping.get(e, e)


def substitute(e: Expr, mapping: dict[Var, Expr]) -> Expr:
    """Replace variables by expressions (simultaneously)."""
    return Substitute(mapping).visit(e) if mapping else e


class _Collect(ExprVisitor):
    def __init__(self):
        self.vars: dict[Var, None] = {}
        self.loads: list[Load] = []

    def visit_Var(self, e):
        self.vars[e] = None

    def visit_Load(self, e):
        self.loads.append(e)
        super().visit_Load(e)


def collect_vars(e: Expr) -> set[Var]:
    c = _Collect()
    c.visit(e)
    return set(c.vars)


def collect_loads(e: Expr) -> list[Load]:
    c = _Collect()
    c.visit(e)
    return c.loads
