"""Reductions over axes: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, and the
cheap variants ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum.

``axes`` is an attribute (older opsets) or a constant input (ReduceSum from opset 13, the
others from 18); both are accepted. No axes reduces everything, unless
noop_with_empty_axes=1, which makes the node a copy. Pattern COMM_REDUCE (ELEMWISE for the
copy): one reduction stage, followed by an elementwise stage where the result needs one
(mean, square root, logarithm), so injective producers fuse into it as in TVM.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

from ...lang.combiner import Combiner
from ...lang.ops import reduce
from ..registry import OpDef, OpPattern, register
from ._util import FLOATS, ints_arg, norm_axes, te_name, tt

NUMBERS = FLOATS + ("int32", "int64", "uint32", "uint64", "int8", "uint8")


def _axes(ctx) -> list[int] | None:
    """The reduced axes, sorted; None when the node is a copy (noop_with_empty_axes)."""
    rank = len(ctx.in_types[0].shape)
    axes = ints_arg(ctx, "axes", 1, "axes")
    if not axes:
        if ctx.attrs["noop_with_empty_axes"]:
            return None
        return list(range(rank))
    return sorted(norm_axes(ctx, axes, rank))


def _out_shape(shape, axes, keep: bool) -> tuple[int, ...]:
    if keep:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def _pattern(ctx) -> OpPattern:
    return OpPattern.ELEMWISE if _axes(ctx) is None else OpPattern.COMM_REDUCE


def _make(name: str, dtypes, np_fn, source=None, finish=None,
          combiner: Combiner = Combiner.SUM):
    """A reduction: ``np_fn(x, axes)`` is the numpy reference (float64 for floats, keepdims);
    the compute reduces ``source(v)`` with ``combiner`` and maps the result with
    ``finish(r, n)`` (n: the number of reduced elements)."""

    def infer(ctx):
        d = _dtype_of_data(ctx, dtypes)
        axes = _axes(ctx)
        shape = ctx.in_types[0].shape
        if axes is None:
            return [tt(shape, d)]
        return [tt(_out_shape(shape, axes, bool(ctx.attrs["keepdims"])), d)]

    def reference(ctx, xs):
        x = xs[0]
        axes = _axes(ctx)
        if axes is None:
            return [x.copy()]
        acc = x.astype(np.float64) if x.dtype.kind == "f" else x
        r = np_fn(acc, tuple(axes))
        if not ctx.attrs["keepdims"]:
            r = np.squeeze(r, axis=tuple(axes))
        return [np.asarray(r).astype(x.dtype)]

    def compute(ctx, ts):
        X = ts[0]
        axes = _axes(ctx)
        shape = ctx.out_types[0].shape
        if axes is None:
            return [lt.compute(shape, lambda *i: X[i], name=te_name(ctx))]
        return [_reduce_compute(ctx, X, axes, combiner, source, finish)]

    return register(OpDef(name, _pattern, infer, reference, compute,
                          attrs={"axes": None, "keepdims": 1, "noop_with_empty_axes": 0},
                          inputs=(1, 2), const_inputs=(1,),
                          doc=f"{name}: reduction over axes (attribute or input)."))


def _dtype_of_data(ctx, dtypes) -> str:
    d = ctx.in_types[0].dtype
    if d not in dtypes:
        raise ctx.error(f"dtype {d} is not supported (supported: {', '.join(dtypes)})")
    return d


def _reduce_compute(ctx, X, axes, combiner, source, finish):
    keep = bool(ctx.attrs["keepdims"])
    shape = ctx.out_types[0].shape
    ks = {d: lt.reduce_axis(X.shape[d], name=f"k{d}") for d in axes}
    n = int(np.prod([X.shape[d] for d in axes]))

    def src(*o):
        pos = iter(o)
        idx = []
        for d in range(len(X.shape)):
            if d in ks:
                idx.append(ks[d])
                if keep:
                    next(pos)
            else:
                idx.append(next(pos))
        v = X[tuple(idx)]
        return source(v) if source is not None else v

    axis = list(ks.values())
    R = lt.compute(shape, lambda *o: reduce(combiner, src(*o), axis),
                   name=te_name(ctx, "red" if finish is not None else ""))
    if finish is None:
        return R
    return lt.compute(shape, lambda *o: finish(R[o], n), name=te_name(ctx))


_make("ReduceSum", NUMBERS, lambda x, a: np.sum(x, axis=a, keepdims=True))
_make("ReduceMean", FLOATS, lambda x, a: np.mean(x, axis=a, keepdims=True),
      finish=lambda r, n: r / float(n))
_make("ReduceMax", NUMBERS, lambda x, a: np.max(x, axis=a, keepdims=True), combiner=Combiner.MAX)
_make("ReduceMin", NUMBERS, lambda x, a: np.min(x, axis=a, keepdims=True), combiner=Combiner.MIN)
_make("ReduceProd", NUMBERS, lambda x, a: np.prod(x, axis=a, keepdims=True), combiner=Combiner.PROD)
_make("ReduceSumSquare", NUMBERS, lambda x, a: np.sum(x * x, axis=a, keepdims=True),
      source=lambda v: v * v)
_make("ReduceL1", NUMBERS, lambda x, a: np.sum(np.abs(x), axis=a, keepdims=True),
      source=abs)
_make("ReduceL2", FLOATS, lambda x, a: np.sqrt(np.sum(x * x, axis=a, keepdims=True)),
      source=lambda v: v * v, finish=lambda r, n: lt.sqrt(r))
_make("ReduceLogSum", FLOATS, lambda x, a: np.log(np.sum(x, axis=a, keepdims=True)),
      finish=lambda r, n: lt.log(r))
