"""Readable text for expressions (used by str(), lowered loop nests and error messages)."""
from __future__ import annotations

from .expr import BinKind, Expr, Var
from .visitor import ExprVisitor


class _Printer(ExprVisitor):
    def __init__(self, names: dict[Var, str] | None = None):
        self.names = names or {}

    def visit_Const(self, e):
        if e.dtype == "bool":
            return "True" if e.value else "False"
        if isinstance(e.value, float):
            if e.value != e.value or e.value in (float("inf"), float("-inf")):
                return repr(e.value)
            return repr(e.value) + ("f" if e.dtype == "float32" else "")
        return str(e.value)

    def visit_Var(self, e):
        return self.names.get(e, e.name)

    def visit_BinOp(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        if e.op in (BinKind.MIN, BinKind.MAX):
            return f"{e.op.value}({a}, {b})"
        return f"({a} {e.op.value} {b})"

    def visit_Not(self, e):
        return f"!{self.visit(e.a)}"

    def visit_Cast(self, e):
        return f"{e.dtype}({self.visit(e.value)})"

    def visit_Select(self, e):
        return f"select({self.visit(e.cond)}, {self.visit(e.t)}, {self.visit(e.f)})"

    def visit_Call(self, e):
        return f"{e.name}({', '.join(self.visit(a) for a in e.args)})"

    def visit_Load(self, e):
        return f"{e.tensor.name}[{', '.join(self.visit(i) for i in e.indices)}]"

    def visit_BufferLoad(self, e):
        return f"{e.buffer.name}[{', '.join(self.visit(i) for i in e.indices)}]"

    def visit_Reduce(self, e):
        ax = ", ".join(a.name for a in e.axis)
        where = "" if e.where is None else f", where={self.visit(e.where)}"
        return f"{e.combiner}({self.visit(e.source)}, axis=[{ax}]{where})"


def expr_str(e: Expr, names: dict[Var, str] | None = None) -> str:
    """``e`` as text; ``names`` overrides the display name of some variables (a loop-nest
    printer uses it to tell apart distinct variables that share a name)."""
    return _Printer(names).visit(e)

