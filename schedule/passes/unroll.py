"""Unroll loops marked unrolled whose bounds are constant.

    for k in [0, 3) unrolled:         C[0] = C[0] + A[0]
      C[0] = C[0] + A[k]       ->     C[0] = C[0] + A[1]
                                      C[0] = C[0] + A[2]

Longer loops (more than MAX_UNROLL iterations) and loops of symbolic extent stay loops of kind
UNROLLED, which the C code generator marks ``#pragma GCC unroll``.
"""
from __future__ import annotations

from ...lang.expr import Const
from ..stmt import For, ForKind, Stmt, StmtMutator, seq
from .fresh_lets import fresh_lets
from .substitute import substitute_stmt

MAX_UNROLL = 64   # constant extents up to this are unrolled in the IR; longer get a pragma


class _Unroll(StmtMutator):
    def visit_For(self, s):
        body = self.visit(s.body)
        if s.kind is ForKind.UNROLLED and isinstance(s.extent, Const) and \
                isinstance(s.min, Const) and s.extent.value <= MAX_UNROLL:
            # the copies share one scope (a Seq): each gets its own let variables, so that
            # no code generator declares one name twice (C: "redefinition of 'T_min0'")
            return seq(*(fresh_lets(substitute_stmt(body, {s.var: Const(s.min.value + k,
                                                                        "int32")}))
                         for k in range(s.extent.value)))
        return s if body is s.body else For(s.var, s.min, s.extent, s.kind, body, s.tag)


def unroll_loops(s: Stmt) -> Stmt:
    """Replace unrolled loops of constant extent (<= MAX_UNROLL) by copies of their body."""
    return _Unroll().visit(s)
