"""Stand-in operators for the fusion, compile and memory tests: one of each op pattern, so the
fusion rules are tested on patterns, independent of the operator library.

``with installed(): ...`` adds them to the registry for the duration (the fixture ``fx_ops``
in the test modules does it); they are never registered for good.
"""
from __future__ import annotations

import contextlib

import numpy as np

import looptune as lt
from looptune.graph import registry
from looptune.graph.ops._util import same_dtype, te_name, tt
from looptune.graph.registry import OpDef, OpPattern


def _matmul():
    def infer(ctx):
        (n, k), (k2, m) = ctx.in_types[0].shape, ctx.in_types[1].shape
        if k != k2:
            raise ctx.error(f"inner sizes differ: {k} and {k2}")
        return [tt((n, m), same_dtype(ctx))]

    def reference(ctx, xs):
        return [(xs[0] @ xs[1]).astype(xs[0].dtype)]

    def compute(ctx, ts):
        A, B = ts
        r = lt.reduce_axis(A.shape[1], name="k")
        return [lt.compute((A.shape[0], B.shape[1]),
                           lambda i, j: lt.sum(A[i, r] * B[r, j], axis=r), name=te_name(ctx))]
    return OpDef("FxMatMul", OpPattern.OUT_ELEMWISE_FUSABLE, infer, reference, compute,
                 inputs=(2, 2))


def _reduce_sum():
    def infer(ctx):
        return [tt(ctx.in_types[0].shape[:-1], same_dtype(ctx))]

    def reference(ctx, xs):
        return [xs[0].sum(axis=-1).astype(xs[0].dtype)]

    def compute(ctx, ts):
        (X,) = ts
        r = lt.reduce_axis(X.shape[-1], name="r")
        return [lt.compute(X.shape[:-1], lambda *i: lt.sum(X[(*i, r)], axis=r),
                           name=te_name(ctx))]
    return OpDef("FxReduceSum", OpPattern.COMM_REDUCE, infer, reference, compute)


def _transpose():
    def infer(ctx):
        a, b = ctx.in_types[0].shape
        return [tt((b, a), same_dtype(ctx))]

    def reference(ctx, xs):
        return [np.ascontiguousarray(xs[0].T)]

    def compute(ctx, ts):
        (X,) = ts
        return [lt.compute((X.shape[1], X.shape[0]), lambda i, j: X[j, i], name=te_name(ctx))]
    return OpDef("FxTranspose", OpPattern.INJECTIVE, infer, reference, compute)


def _opaque():
    def infer(ctx):
        return [ctx.in_types[0]]

    def reference(ctx, xs):
        return [(xs[0] * 3).astype(xs[0].dtype)]

    def compute(ctx, ts):
        (X,) = ts
        return [lt.compute(X.shape, lambda *i: X[i] * 3, name=te_name(ctx))]
    return OpDef("FxOpaque", OpPattern.OPAQUE, infer, reference, compute)


def _host_only():
    def infer(ctx):
        return [ctx.in_types[0]]

    def reference(ctx, xs):
        return [np.sort(xs[0], axis=-1)]
    return OpDef("FxSort", OpPattern.OPAQUE, infer, reference, None)


def _split():
    def infer(ctx):
        shape = ctx.in_types[0].shape
        half = shape[-1] // 2
        return [tt((*shape[:-1], half), same_dtype(ctx)),
                tt((*shape[:-1], shape[-1] - half), same_dtype(ctx))]

    def reference(ctx, xs):
        half = xs[0].shape[-1] // 2
        return [xs[0][..., :half].copy(), xs[0][..., half:].copy()]

    def compute(ctx, ts):
        (X,) = ts
        half = X.shape[-1] // 2
        a = lt.compute((*X.shape[:-1], half), lambda *i: X[i], name=te_name(ctx, "a"))
        b = lt.compute((*X.shape[:-1], X.shape[-1] - half),
                       lambda *i: X[(*i[:-1], i[-1] + half)], name=te_name(ctx, "b"))
        return [a, b]
    return OpDef("FxSplit", OpPattern.INJECTIVE, infer, reference, compute, outputs=2)


OPS = [_matmul(), _reduce_sum(), _transpose(), _opaque(), _host_only(), _split()]


@contextlib.contextmanager
def installed():
    """The stand-in operators in the registry, removed again on exit."""
    registry._load_library()
    for op in OPS:
        assert op.name not in registry._OPS, f"{op.name} is registered already"
        registry._OPS[op.name] = op
    try:
        yield
    finally:
        for op in OPS:
            registry._OPS.pop(op.name, None)


_UNARY = ["Relu", "Neg", "Abs", "Exp", "Sigmoid", "Tanh", "FxOpaque", "FxTranspose", "FxSort"]
_BINARY = ["Add", "Sub", "Mul", "FxMatMul"]


def random_graph(rng, n_nodes: int, n: int = 5, name: str = "rand"):
    """A seeded random DAG over (n, n) float32 values (and (n,) rows from FxReduceSum, added
    back by broadcasting) using every pattern: elementwise, broadcast, injective, reduction,
    out-elementwise-fusable, opaque, host-only. The values nobody reads are summed into the
    output; sometimes a value read inside is an output too."""
    from looptune.graph import Graph
    g = Graph(name)
    square = [g.input("x", (n, n)).name]
    if rng.random() < 0.5:
        square.append(g.input("y", (n, n)).name)
    for _ in range(n_nodes):
        r = rng.random()
        a = square[int(rng.integers(len(square)))]
        if r < 0.45:
            v = g.op(_UNARY[int(rng.integers(len(_UNARY)))], a)
        elif r < 0.85:
            b = square[int(rng.integers(len(square)))]
            if rng.random() < 0.2:
                b = g.const(rng.uniform(-1, 1, (n, n)).astype("float32"))
            v = g.op(_BINARY[int(rng.integers(len(_BINARY)))], a, b)
        else:
            row = g.op("FxReduceSum", a)
            v = g.op("Add", square[int(rng.integers(len(square)))], g.op("Mul", row, 0.25))
        square.append(v.name)
    read = {i for node in g.nodes for i in node.inputs}
    leaves = [v for v in square[1:] if v not in read and v not in g.inputs] or [square[-1]]
    out = leaves[0]
    for v in leaves[1:]:
        out = g.op("Add", out, v).name
    g.output(out)
    if rng.random() < 0.5 and len(square) > 3:
        g.output(square[int(rng.integers(1, len(square) - 1))])     # an output read inside
    return g
