"""Counting a computation's floating-point operations from its compute DAG.

Per output element of each compute: one operation per arithmetic node on values (float
``+ - * / // % min max`` and math calls; index arithmetic inside loads is not counted), and for
a reduction one more per reduced element (the combine), all times the reduce extents. Matmul
``sum(A[i, k] * B[k, j])`` counts 2 per (i, j, k): 2·N·M·K. Integer computations count their
integer arithmetic instead, so that an int8 matmul still has a meaningful rate.
"""
from __future__ import annotations

import math

from ..lang import dtype as dt
from ..lang.expr import BinKind, Const, Expr, Reduce
from ..lang.simplify import simplify
from ..lang.tensor import ComputeOp, Tensor
from ..lang.visitor import ExprVisitor

_ARITH = frozenset({BinKind.ADD, BinKind.SUB, BinKind.MUL, BinKind.DIV, BinKind.FLOORDIV,
                    BinKind.FLOORMOD, BinKind.MIN, BinKind.MAX})


class _OpCounter(ExprVisitor):
    """Counts value arithmetic: float ops, and integer ops when ``ints`` is set."""

    def __init__(self, ints: bool):
        self.ints = ints
        self.count = 0

    def _counts(self, dtype: str) -> bool:
        return dt.is_float(dtype) or (self.ints and dt.is_int(dtype))

    def visit_BinOp(self, e):
        if e.op in _ARITH and self._counts(e.dtype):
            self.count += 1
        super().visit_BinOp(e)

    def visit_Call(self, e):
        if self._counts(e.dtype):
            self.count += 1
        super().visit_Call(e)

    def visit_Select(self, e):
        self.visit(e.t)
        self.visit(e.f)

    def visit_Load(self, e):
        pass            # indices are address arithmetic

    def visit_BufferLoad(self, e):
        pass


def _extent(x) -> int | None:
    if isinstance(x, int):
        return x
    e = simplify(x) if isinstance(x, Expr) else x
    return int(e.value) if isinstance(e, Const) else None


def _ops_per_element(op: ComputeOp) -> tuple[int, int | None]:
    """(operations per reduced element, product of the reduce extents)."""
    ints = not dt.is_float(op.output.dtype)
    c = _OpCounter(ints)
    body = op.body
    if isinstance(body, Reduce):
        c.visit(body.source)
        exts = [_extent(a.extent) for a in body.axis]
        if any(x is None for x in exts):
            return c.count + 1, None
        return c.count + 1, math.prod(exts)
    c.visit(body)
    return c.count, 1


def compute_ops(outputs: list[Tensor]) -> list[ComputeOp]:
    """Every compute op feeding ``outputs`` (each once)."""
    seen: dict[int, ComputeOp] = {}
    stack = [t.op for t in outputs]
    while stack:
        op = stack.pop()
        if id(op) in seen or not isinstance(op, ComputeOp):
            continue
        seen[id(op)] = op
        stack.extend(t.op for t in op.inputs)
    return list(seen.values())


def count_flop(tensors: list[Tensor]) -> int | None:
    """Floating-point operations to compute the non-placeholder tensors among ``tensors``
    (None when a shape or reduce extent is symbolic)."""
    outputs = [t for t in tensors if isinstance(t.op, ComputeOp)]
    total = 0
    for op in compute_ops(outputs):
        per, red = _ops_per_element(op)
        elems = [_extent(s) for s in op.output.shape]
        if red is None or any(e is None for e in elems):
            return None
        total += per * red * math.prod(elems)
    return total
