"""Pooling: MaxPool, AveragePool (OUT_ELEMWISE_FUSABLE, as TVM registers pool2d), and
GlobalAveragePool, GlobalMaxPool (COMM_REDUCE: a plain reduction over the spatial axes).

The window (kernel_shape, strides, pads, dilations, auto_pad, ceil_mode) is shared with Conv
(``_window.py``). Padding is its own injective stage (the dtype's lowest value for the
maximum, zero for the average) that the auto scheduler inlines; the average divides by the
number of taps inside the input (count_include_pad=0) or inside the padded input
(count_include_pad=1), never counting the taps a ceil_mode window reaches past the end pad
(ONNX Runtime's and PyTorch's convention). That count is a constant where it does not vary
over the output, else index arithmetic in the dividing stage.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

from ...lang import dtype as dt
from ..registry import REQUIRED, OpDef, OpPattern, register
from ._util import (FLOATS, check_rank, int_list, pad_const, pad_types, refuse_extra_outputs,
                    same_dtype, te_name, tt)
from ._window import Window, window, window_count

MAX_DTYPES = FLOATS + ("int8", "uint8")


def _window(ctx) -> Window:
    xs = ctx.in_types[0].shape
    kernel = int_list(ctx, "kernel_shape", ctx.attrs["kernel_shape"])
    if len(kernel) != len(xs) - 2 or any(k < 1 for k in kernel):
        raise ctx.error(f"kernel_shape={kernel} must have {len(xs) - 2} positive entries (one "
                        f"per spatial axis of X, shape {list(xs)})")
    return window(ctx, xs[2:], kernel, bool(ctx.attrs["ceil_mode"]))


def _pool_infer(ctx, dtypes):
    d = same_dtype(ctx, dtypes)
    check_rank(ctx, 0, 3, 99, "X: N x C x spatial...")
    w = _window(ctx)
    xs = ctx.in_types[0].shape
    return [tt(xs[:2] + w.out, d)]


def _maxpool_infer(ctx):
    refuse_extra_outputs(ctx, ("Indices",), "looptune computes the maximum only")
    if ctx.attrs["storage_order"] not in (0, 1):
        raise ctx.error(f"storage_order={ctx.attrs['storage_order']} must be 0 or 1")
    return pad_types(ctx, _pool_infer(ctx, MAX_DTYPES))


def _taps(arr: np.ndarray, w: Window):
    """Each kernel tap's strided view of the padded ``arr`` (N, C, out...)."""
    for tap in np.ndindex(*w.kernel):
        sl = tuple(slice(t * dl, t * dl + (o - 1) * s + 1, s)
                   for t, dl, o, s in zip(tap, w.dilations, w.out, w.strides))
        yield arr[(slice(None), slice(None), *sl)]


def _np_padded(x: np.ndarray, w: Window, value) -> np.ndarray:
    ends = [e + t for e, t in zip(w.end, w.tail)]
    return np.pad(x, [(0, 0), (0, 0), *zip(w.begin, ends)], constant_values=value)


def _lowest(d: str):
    return dt.min_value(d)


def _maxpool_reference(ctx, xs):
    x = xs[0]
    w = _window(ctx)
    xp = _np_padded(x, w, _lowest(x.dtype.name))
    return [np.max(np.stack(list(_taps(xp, w))), axis=0).astype(x.dtype)]


def _avgpool_reference(ctx, xs):
    x = xs[0]
    w = _window(ctx)
    xp = _np_padded(x.astype(np.float64), w, 0.0)
    if ctx.attrs["count_include_pad"]:
        inside = _np_padded(np.ones(x.shape), w, 1.0)
        tail = tuple(slice(0, n - t) for n, t in zip(inside.shape[2:], w.tail))
        counted = np.zeros(inside.shape)
        counted[(slice(None), slice(None), *tail)] = inside[(slice(None), slice(None), *tail)]
    else:
        counted = _np_padded(np.ones(x.shape), w, 0.0)
    total = sum(_taps(xp, w))
    count = sum(_taps(counted, w))
    return [(total / count).astype(x.dtype)]


def _window_compute(ctx, X, combine, fill):
    """The reduction of ``combine`` ("max" or "sum") over each window of padded ``X``."""
    w = _window(ctx)
    P = pad_const(X, (0, 0, *w.begin), (0, 0, *(e + t for e, t in zip(w.end, w.tail))),
                  fill, te_name(ctx, "pad"))
    rk = [lt.reduce_axis(k, name=f"r{d}") if k > 1 else None for d, k in enumerate(w.kernel)]
    axes = [r for r in rk if r is not None]

    def body(*i):
        idx = list(i[:2])
        for d, o in enumerate(i[2:]):
            e = o * w.strides[d] if w.strides[d] != 1 else o
            if rk[d] is not None:
                e = e + (rk[d] * w.dilations[d] if w.dilations[d] != 1 else rk[d])
            idx.append(e)
        v = P[tuple(idx)]
        if not axes:
            return v
        return lt.max(v, axis=axes) if combine == "max" else lt.sum(v, axis=axes)

    return w, body


def _maxpool_compute(ctx, ts):
    X = ts[0]
    _, body = _window_compute(ctx, X, "max", _lowest(X.dtype))
    return [lt.compute(ctx.out_types[0].shape, body, name=te_name(ctx))]


def _avgpool_compute(ctx, ts):
    X = ts[0]
    w, body = _window_compute(ctx, X, "sum", 0)
    shape = ctx.out_types[0].shape
    S = lt.compute(shape, body, name=te_name(ctx, "sum"))
    spatial = X.shape[2:]
    if ctx.attrs["count_include_pad"]:
        bounds = [(-b, n + e) for b, n, e in zip(w.begin, spatial, w.end)]
    else:
        bounds = [(0, n) for n in spatial]
    const_count, varying = 1, []
    for d, (lo, hi) in enumerate(bounds):
        counts = {window_count(w, d, o, lo, hi) for o in range(w.out[d])}
        if len(counts) == 1:
            const_count *= counts.pop()
        else:
            varying.append(d)

    def divide(*i):
        n = None
        for d in varying:
            c = window_count(w, d, i[2 + d], *bounds[d])
            n = c if n is None else n * c
        if n is None:
            return S[i] / float(const_count)
        n = lt.cast(n, X.dtype)
        return S[i] / (n * float(const_count) if const_count != 1 else n)

    return [lt.compute(shape, divide, name=te_name(ctx))]


_WINDOW_ATTRS = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None,
                 "kernel_shape": REQUIRED, "pads": None, "strides": None}

register(OpDef(
    "MaxPool", OpPattern.OUT_ELEMWISE_FUSABLE, _maxpool_infer, _maxpool_reference,
    _maxpool_compute, attrs={**_WINDOW_ATTRS, "storage_order": 0},
    doc="Maximum over sliding windows (the Indices output is not supported)."))
register(OpDef(
    "AveragePool", OpPattern.OUT_ELEMWISE_FUSABLE, lambda ctx: _pool_infer(ctx, FLOATS),
    _avgpool_reference, _avgpool_compute, attrs={**_WINDOW_ATTRS, "count_include_pad": 0},
    doc="Average over sliding windows (count_include_pad, ceil_mode)."))


# ---- global pools ----------------------------------------------------------------------------

def _global_infer(ctx, dtypes):
    d = same_dtype(ctx, dtypes)
    xs = ctx.in_types[0].shape
    check_rank(ctx, 0, 3, 99, "X: N x C x spatial...")
    return [tt(xs[:2] + (1,) * (len(xs) - 2), d)]


def _global_reference(ctx, xs, fn):
    x = xs[0]
    axes = tuple(range(2, x.ndim))
    acc = x.astype(np.float64) if x.dtype.kind == "f" else x
    return [fn(acc, axis=axes, keepdims=True).astype(x.dtype)]


def _global_compute(ctx, ts, combine: str):
    X = ts[0]
    spatial = X.shape[2:]
    ks = [lt.reduce_axis(n, name=f"r{d}") for d, n in enumerate(spatial)]
    shape = ctx.out_types[0].shape
    size = int(np.prod(spatial))

    def body(n, c, *_):
        return X[(n, c, *ks)]

    if combine == "max":
        return [lt.compute(shape, lambda *i: lt.max(body(*i), axis=ks), name=te_name(ctx))]
    S = lt.compute(shape, lambda *i: lt.sum(body(*i), axis=ks), name=te_name(ctx, "sum"))
    return [lt.compute(shape, lambda *i: S[i] / float(size), name=te_name(ctx))]


register(OpDef(
    "GlobalAveragePool", OpPattern.COMM_REDUCE, lambda ctx: _global_infer(ctx, FLOATS),
    lambda ctx, xs: _global_reference(ctx, xs, np.mean),
    lambda ctx, ts: _global_compute(ctx, ts, "mean"),
    doc="Mean over every spatial axis (N x C x 1 x 1 ...)."))
register(OpDef(
    "GlobalMaxPool", OpPattern.COMM_REDUCE, lambda ctx: _global_infer(ctx, MAX_DTYPES),
    lambda ctx, xs: _global_reference(ctx, xs, np.max),
    lambda ctx, ts: _global_compute(ctx, ts, "max"),
    doc="Maximum over every spatial axis (N x C x 1 x 1 ...)."))
