"""Elementwise and broadcasting operators: unary math, binary arithmetic.

The shape of an operator definition (every file of graph/ops follows it): an ``infer`` from
the OpCall to output types, a numpy ``reference`` (the oracle), a ``compute`` in looptune
tensor expressions, the op pattern, registered once with :func:`register`.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

from ..registry import OpDef, OpPattern, register
from ._util import (FLOATS, broadcast_index, broadcast_pattern, broadcast_shapes, same_dtype,
                    te_name, tt)

# ---- unary -------------------------------------------------------------------------------------


def _unary(name: str, np_fn, te_fn, kinds=FLOATS, doc: str = "") -> OpDef:
    def infer(ctx):
        return [tt(ctx.in_types[0].shape, same_dtype(ctx, kinds))]

    def reference(ctx, xs):
        return [np.asarray(np_fn(xs[0])).astype(xs[0].dtype)]

    def compute(ctx, ts):
        X = ts[0]
        return [lt.compute(X.shape, lambda *i: te_fn(X[i]), name=te_name(ctx))]

    return register(OpDef(name, OpPattern.ELEMWISE, infer, reference, compute, doc=doc))


def _erf_np(x):
    from math import erf
    return np.vectorize(erf, otypes=[x.dtype])(x) if x.size else x


_NUM = FLOATS + ("int8", "int16", "int32", "int64")
_unary("Relu", lambda x: np.maximum(x, 0), lambda v: lt.max(v, lt.const(0, v.dtype)), _NUM)
_unary("Sigmoid", lambda x: 1 / (1 + np.exp(-x)), lt.sigmoid)
_unary("Tanh", np.tanh, lt.tanh)
_unary("Exp", np.exp, lt.exp)
_unary("Log", np.log, lt.log)
_unary("Sqrt", np.sqrt, lt.sqrt)
_unary("Erf", _erf_np, lt.erf)
_unary("Neg", np.negative, lambda v: -v, _NUM)
_unary("Abs", np.abs, abs, _NUM)
_unary("Reciprocal", lambda x: 1 / x, lambda v: lt.const(1, v.dtype) / v)

# ---- binary with broadcasting -----------------------------------------------------------------


def _binary(name: str, np_fn, te_fn, kinds=_NUM) -> OpDef:
    def infer(ctx):
        d = same_dtype(ctx, kinds)
        return [tt(broadcast_shapes(ctx, [t.shape for t in ctx.in_types]), d)]

    def reference(ctx, xs):
        return [np.asarray(np_fn(xs[0], xs[1])).astype(ctx.out_types[0].dtype)]

    def compute(ctx, ts):
        A, B = ts
        shape = ctx.out_types[0].shape
        return [lt.compute(shape, lambda *i: te_fn(A[broadcast_index(A.shape, shape, i)],
                                                   B[broadcast_index(B.shape, shape, i)]),
                           name=te_name(ctx))]

    return register(OpDef(name, broadcast_pattern, infer, reference, compute, inputs=(2, 2)))


def _int_div(a, b):
    return np.trunc(a / b) if np.issubdtype(a.dtype, np.floating) else np.fix(a / b)


_binary("Add", np.add, lambda a, b: a + b)
_binary("Sub", np.subtract, lambda a, b: a - b)
_binary("Mul", np.multiply, lambda a, b: a * b)
_binary("Div", lambda a, b: a / b if np.issubdtype(a.dtype, np.floating) else _int_div(a, b),
        lambda a, b: a / b, FLOATS)
_binary("Pow", np.power, lt.pow, FLOATS)
