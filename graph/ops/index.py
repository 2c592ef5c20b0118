"""Operators that pick elements by index: Slice, Pad, Gather (all INJECTIVE).

Slice's starts/ends/axes/steps and Pad's pads/axes are compile-time (attributes in old
opsets, constant inputs in new ones). Pad's constant_value may be a run-time scalar; where
the graph holds it, the kernel uses its value. Gather reads its indices from a tensor (a
constant index table, or a run-time one): negative indices count from the end, and the
kernel clamps every index into range so it never reads out of bounds; constant indices are
checked when the node is built, run-time ones by the reference run.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

from ..registry import OpDef, OpPattern, register
from ._util import (ints_arg, norm_axes, norm_axis, scalar_input, scalar_operand,
                    te_name, tt)

# ---- Slice ---------------------------------------------------------------------------------


def _slice_params(ctx) -> list[tuple[int, int, int]]:
    """Per axis of the input: (start, step, length) of the slice (whole axes: (0, 1, n))."""
    shape = ctx.in_types[0].shape
    starts = ints_arg(ctx, "starts", 1, "starts")
    ends = ints_arg(ctx, "ends", 2, "ends")
    if starts is None or ends is None:
        raise ctx.error("starts and ends are required (inputs 1 and 2, or attributes)")
    axes = ints_arg(ctx, "axes", 3, "axes")
    steps = [int(s) for s in ctx.const(4, "steps").reshape(-1)] if ctx.has_input(4) else None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} must "
                        "have the same length")
    out = [(0, 1, n) for n in shape]
    for a, s, e, st in zip(norm_axes(ctx, axes, len(shape)), starts, ends, steps):
        if st == 0:
            raise ctx.error(f"steps {steps}: a step is 0 (axis {a})")
        lo, hi, step = slice(s, e, st).indices(shape[a])
        out[a] = (lo, step, len(range(lo, hi, step)))
    return out


def _slice_infer(ctx):
    return [tt([n for _, _, n in _slice_params(ctx)], ctx.in_types[0].dtype)]


def _slice_reference(ctx, xs):
    picks = [s + st * np.arange(n) for s, st, n in _slice_params(ctx)]
    return [xs[0][np.ix_(*picks)] if picks else xs[0].copy()]


def _slice_compute(ctx, ts):
    X = ts[0]
    p = _slice_params(ctx)

    def index(i):
        return tuple(v if (s, st) == (0, 1) else v * st + s for v, (s, st, _) in zip(i, p))
    return [lt.compute(ctx.out_types[0].shape, lambda *i: X[index(i)], name=te_name(ctx))]


register(OpDef(
    "Slice", OpPattern.INJECTIVE, _slice_infer, _slice_reference, _slice_compute,
    attrs={"axes": None, "ends": None, "starts": None}, inputs=(1, 5),
    const_inputs=(1, 2, 3, 4),
    doc="numpy slicing per axis: starts, ends (clamped), axes, steps (negative too)."))


# ---- Pad -------------------------------------------------------------------------------------

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_params(ctx):
    """(mode, begin per axis, end per axis)."""
    shape = ctx.in_types[0].shape
    r = len(shape)
    mode = ctx.attrs["mode"]
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in PAD_MODES:
        raise ctx.error(f"mode={mode!r} is not one of {', '.join(PAD_MODES)}")
    pads = ints_arg(ctx, "pads", 1, "pads")
    if pads is None:
        raise ctx.error("pads are required (input 1, or the attribute 'pads')")
    axes = list(range(r))
    if ctx.has_input(3):
        axes = norm_axes(ctx, [int(a) for a in ctx.const(3, "axes").reshape(-1)], r)
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads={pads} must have 2 entries per padded axis ({2 * len(axes)}: "
                        "all begins, then all ends)")
    begin, end = [0] * r, [0] * r
    for k, a in enumerate(axes):
        begin[a], end[a] = pads[k], pads[len(axes) + k]
    for a in range(r):
        n = shape[a]
        if n + begin[a] + end[a] < 0:
            raise ctx.error(f"pads {pads} crop axis {a} (size {n}) below zero")
        if mode != "constant" and min(begin[a], end[a]) < 0:
            raise ctx.error(f"negative pads {pads} (cropping) are only supported in mode "
                            f"'constant'; got mode '{mode}'")
        if mode == "reflect" and max(begin[a], end[a]) > n - 1:
            raise ctx.error(f"mode 'reflect' pads axis {a} of size {n} by "
                            f"{max(begin[a], end[a])}; at most {n - 1} (one reflection)")
        if mode == "edge" and n == 0:
            raise ctx.error(f"mode 'edge' cannot pad the empty axis {a}")
    return mode, begin, end


def _pad_value(ctx):
    v = ctx.attrs["value"]
    return 0 if v is None else v


def _pad_infer(ctx):
    scalar_input(ctx, 2, "constant_value")
    _, begin, end = _pad_params(ctx)
    shape = ctx.in_types[0].shape
    return [tt([n + b + e for n, b, e in zip(shape, begin, end)], ctx.in_types[0].dtype)]


def _pad_reference(ctx, xs):
    x = xs[0]
    mode, begin, end = _pad_params(ctx)
    crop = tuple(slice(max(0, -b), x.shape[d] - max(0, -e))
                 for d, (b, e) in enumerate(zip(begin, end)))
    x = x[crop]
    width = [(max(0, b), max(0, e)) for b, e in zip(begin, end)]
    if mode == "constant":
        cv = xs[2].reshape(-1)[0] if len(xs) > 2 and xs[2] is not None else _pad_value(ctx)
        return [np.pad(x, width, mode="constant", constant_values=cv).astype(x.dtype)]
    return [np.pad(x, width, mode=mode)]


def _pad_compute(ctx, ts):
    X = ts[0]
    mode, begin, end = _pad_params(ctx)
    d = X.dtype
    if mode == "constant":
        fill = scalar_operand(ctx, 2, ts[2], d) if ctx.has_input(2) else \
            lt.const(_pad_value(ctx), d)

    def body(*o):
        conds, idx = [], []
        for a, (v, n, b, e) in enumerate(zip(o, X.shape, begin, end)):
            i = v - b if b else v
            if mode == "constant":
                if b > 0:
                    conds.append(i >= 0)
                if e > 0:
                    conds.append(i < n)
            elif mode == "edge" and (b or e):
                i = lt.max(lt.min(i, n - 1), 0)
            elif mode == "reflect" and (b or e):
                i = lt.if_then_else(i < 0, -i, i)
                i = lt.if_then_else(i >= n, 2 * (n - 1) - i, i)
            elif mode == "wrap" and (b or e):
                i = i % n
            idx.append(i)
        val = X[tuple(idx)]
        return lt.if_then_else(lt.all(*conds), val, fill) if conds else val

    return [lt.compute(ctx.out_types[0].shape, body, name=te_name(ctx))]


register(OpDef(
    "Pad", OpPattern.INJECTIVE, _pad_infer, _pad_reference, _pad_compute,
    attrs={"mode": "constant", "pads": None, "value": None}, inputs=(1, 4),
    const_inputs=(1, 3),
    doc="Pad (constant, reflect, edge, wrap); negative pads crop in constant mode."))


# ---- Gather ------------------------------------------------------------------------------

def _gather_axis(ctx) -> int:
    return norm_axis(ctx, ctx.attrs["axis"], len(ctx.in_types[0].shape))


def _check_indices(ctx, idx: np.ndarray, n: int, a: int) -> None:
    bad = idx[(idx < -n) | (idx >= n)]
    if bad.size:
        raise ctx.error(f"index {int(bad.reshape(-1)[0])} is out of range for axis {a} of size "
                        f"{n} (allowed {-n}..{n - 1}); {bad.size} such indices")


def _gather_infer(ctx):
    xs, it = ctx.in_types[0].shape, ctx.in_types[1]
    if len(xs) == 0:
        raise ctx.error("cannot gather from a scalar (rank 0)")
    if it.dtype not in ("int32", "int64"):
        raise ctx.error(f"indices (input 1) must be int32 or int64; got {it.dtype}")
    a = _gather_axis(ctx)
    if ctx.consts[1] is not None:
        _check_indices(ctx, ctx.consts[1], xs[a], a)
    return [tt(xs[:a] + it.shape + xs[a + 1:], ctx.in_types[0].dtype)]


def _gather_reference(ctx, xs):
    a = _gather_axis(ctx)
    _check_indices(ctx, np.asarray(xs[1]), xs[0].shape[a], a)
    return [np.take(xs[0], xs[1].astype(np.int64), axis=a)]


def _gather_compute(ctx, ts):
    X, Ind = ts
    a = _gather_axis(ctx)
    n, q = X.shape[a], len(Ind.shape)

    def body(*o):
        v = Ind[tuple(o[a:a + q])]
        v = lt.if_then_else(v < 0, v + n, v)
        v = lt.max(lt.min(v, n - 1), 0)       # never out of bounds, even for a bad index
        return X[(*o[:a], v, *o[a + q:])]

    return [lt.compute(ctx.out_types[0].shape, body, name=te_name(ctx))]


register(OpDef(
    "Gather", OpPattern.INJECTIVE, _gather_infer, _gather_reference, _gather_compute,
    attrs={"axis": 0}, inputs=(2, 2),
    doc="numpy.take along `axis` (indices: a constant table or a run-time tensor)."))

