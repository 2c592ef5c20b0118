"""Blocked-layout operators, as the layout transform pass emits them (TVM's
``layout_transform`` and ``conv2d_NCHWc``).

``NCHW{b}c`` is NCHW with the channels split into blocks of ``b``: element (n, c, h, w) of the
NCHW tensor sits at (n, c // b, h, w, c % b) of the (N, C/b, H, W, b) one, so the innermost
axis is one SIMD vector of channels. Blocks always divide the channel count (no padding), so
every transform is exact and invertible.

- ``LayoutTransform(x; src_layout, dst_layout)``: NCHW <-> NCHW{b}c, NCHW{b}c -> NCHW{b2}c.
- ``ConvNCHWc(x, w[, bias]; strides, pads, dilations)``: a 2-D convolution (group 1) on
  x (N, C/bc, H, W, bc) with weights pre-blocked to (K/bk, C/bc, KH, KW, bc, bk) and a bias
  (K/bk, bk); out (N, K/bk, OH, OW, bk). Elementwise ops need no blocked twin: they work on
  5-D tensors as they are (the pass re-blocks per-channel constants).
"""
from __future__ import annotations

import re

import numpy as np

import looptune as lt

from ..registry import REQUIRED, OpDef, OpPattern, register
from ._util import FLOATS, same_dtype, te_name, tt

_BLOCKED = re.compile(r"^NCHW([1-9][0-9]*)c$")


def layout_block(layout: str) -> int:
    """0 for ``"NCHW"``, b for ``"NCHW{b}c"``; ValueError for anything else."""
    if layout == "NCHW":
        return 0
    m = _BLOCKED.match(layout)
    if m is None:
        raise ValueError(layout)
    return int(m.group(1))


def blocked_layout(block: int) -> str:
    return f"NCHW{block}c" if block else "NCHW"


def block_nchw(x: np.ndarray, b: int) -> np.ndarray:
    """(N, C, H, W) -> (N, C/b, H, W, b)."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def unblock_nchw(x: np.ndarray) -> np.ndarray:
    """(N, C/b, H, W, b) -> (N, C, H, W)."""
    n, cb, h, w, b = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w))


def block_weight(w: np.ndarray, bc: int, bk: int) -> np.ndarray:
    """OIHW (K, C, KH, KW) -> (K/bk, C/bc, KH, KW, bc, bk)."""
    k, c, kh, kw = w.shape
    return np.ascontiguousarray(
        w.reshape(k // bk, bk, c // bc, bc, kh, kw).transpose(0, 2, 4, 5, 3, 1))

# ---- LayoutTransform -------------------------------------------------------------------------


def _layouts(ctx) -> tuple[int, int]:
    try:
        return layout_block(ctx.attrs["src_layout"]), layout_block(ctx.attrs["dst_layout"])
    except ValueError as e:
        raise ctx.error(f"layout {e.args[0]!r} is not supported; use 'NCHW' or 'NCHW<b>c' "
                        "(e.g. 'NCHW8c')") from None


def _transform_infer(ctx):
    src, dst = _layouts(ctx)
    t = ctx.in_types[0]
    if len(t.shape) != (5 if src else 4) or (src and t.shape[4] != src):
        raise ctx.error(f"src_layout {ctx.attrs['src_layout']} needs a "
                        f"{'5-D input whose last axis is ' + str(src) if src else '4-D input'}"
                        f"; got shape {list(t.shape)}")
    n, _, h, w = t.shape[:4]
    c = t.shape[1] * src if src else t.shape[1]
    if dst and c % dst:
        raise ctx.error(f"{c} channels do not split into blocks of {dst}; choose a block "
                        f"that divides {c}")
    return [tt((n, c // dst, h, w, dst) if dst else (n, c, h, w), t.dtype)]


def _transform_reference(ctx, xs):
    src, dst = _layouts(ctx)
    x = unblock_nchw(xs[0]) if src else xs[0]
    return [block_nchw(x, dst) if dst else np.ascontiguousarray(x)]


def _transform_compute(ctx, ts):
    src, dst = _layouts(ctx)
    X = ts[0]
    shape = ctx.out_types[0].shape

    def load(n, c, h, w):
        return X[n, c // src, h, w, c % src] if src else X[n, c, h, w]

    if dst:
        body = lambda n, co, h, w, ci: load(n, co * dst + ci, h, w)   # noqa: E731
    else:
        body = load
    return [lt.compute(shape, body, name=te_name(ctx))]


register(OpDef("LayoutTransform", OpPattern.INJECTIVE, _transform_infer, _transform_reference,
               _transform_compute, attrs={"src_layout": REQUIRED, "dst_layout": REQUIRED},
               doc="NCHW <-> NCHW{b}c (exact; b divides the channels)"))

# ---- ConvNCHWc ---------------------------------------------------------------------------------


def _conv_attrs(ctx) -> tuple[list[int], list[int], list[int]]:
    a = ctx.attrs
    strides = list(a["strides"] or (1, 1))
    pads = list(a["pads"] or (0, 0, 0, 0))
    dil = list(a["dilations"] or (1, 1))
    if len(strides) != 2 or len(pads) != 4 or len(dil) != 2 or min(strides + dil) < 1 \
            or min(pads) < 0:
        raise ctx.error(f"strides {strides}, pads {pads}, dilations {dil} do not describe a "
                        "2-D convolution (2 positive strides, 4 pads >= 0, 2 dilations)")
    return strides, pads, dil


def _conv_infer(ctx):
    d = same_dtype(ctx, FLOATS)
    x, w = ctx.in_types[0].shape, ctx.in_types[1].shape
    if len(x) != 5 or len(w) != 6 or w[1] != x[1] or w[4] != x[4]:
        raise ctx.error(f"input {list(x)} and weight {list(w)} are not NCHW{{bc}}c data and "
                        "(K/bk, C/bc, KH, KW, bc, bk) weights of the same channel blocks")
    if ctx.has_input(2) and ctx.in_types[2].shape != (w[0], w[5]):
        raise ctx.error(f"bias shape {list(ctx.in_types[2].shape)} should be {[w[0], w[5]]}")
    (sy, sx), (pt, pl, pb, pr), (dy, dx) = _conv_attrs(ctx)
    oh = (x[2] + pt + pb - dy * (w[2] - 1) - 1) // sy + 1
    ow = (x[3] + pl + pr - dx * (w[3] - 1) - 1) // sx + 1
    if oh < 1 or ow < 1:
        raise ctx.error(f"the {w[2]}x{w[3]} kernel does not fit the {x[2]}x{x[3]} input")
    return [tt((x[0], w[0], oh, ow, w[5]), d)]


def conv2d_nchw_np(x, w, bias, strides, pads, dilations) -> np.ndarray:
    """A plain NCHW conv (group 1) in float64 by kernel offsets; the oracle for ConvNCHWc."""
    (sy, sx), (pt, pl, pb, pr), (dy, dx) = strides, pads, dilations
    K, _, KH, KW = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (xp.shape[2] - dy * (KH - 1) - 1) // sy + 1
    ow = (xp.shape[3] - dx * (KW - 1) - 1) // sx + 1
    out = np.zeros((x.shape[0], K, oh, ow))
    for ry in range(KH):
        for rx in range(KW):
            win = xp[:, :, ry * dy: ry * dy + sy * (oh - 1) + 1: sy,
                     rx * dx: rx * dx + sx * (ow - 1) + 1: sx]
            out += np.einsum("nchw,kc->nkhw", win, w[:, :, ry, rx].astype(np.float64))
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out


def _conv_reference(ctx, xs):
    x, w = xs[0], xs[1]
    kb, cb, kh, kw, bc, bk = w.shape
    w_oihw = w.transpose(0, 5, 1, 4, 2, 3).reshape(kb * bk, cb * bc, kh, kw)
    bias = xs[2].reshape(-1) if len(xs) > 2 and xs[2] is not None else None
    out = conv2d_nchw_np(unblock_nchw(x), w_oihw, bias, *_conv_attrs(ctx))
    return [block_nchw(out, bk).astype(x.dtype)]


def _conv_compute(ctx, ts):
    X, W = ts[0], ts[1]
    B = ts[2] if len(ts) > 2 else None
    (sy, sx), (pt, pl, pb, pr), (dy, dx) = _conv_attrs(ctx)
    n_, cb, h, w_, bc = X.shape
    kb, _, kh, kw, _, bk = W.shape
    if pt or pl or pb or pr:
        def pad(n, c, y, x, i):
            inside = lt.all(y >= pt, y < h + pt, x >= pl, x < w_ + pl)
            return lt.if_then_else(inside, X[n, c, y - pt, x - pl, i], lt.const(0, X.dtype))
        X = lt.compute((n_, cb, h + pt + pb, w_ + pl + pr, bc), pad, name=te_name(ctx, "pad"))
    co, ry, rx, ci = (lt.reduce_axis(cb, name="co"), lt.reduce_axis(kh, name="ry"),
                      lt.reduce_axis(kw, name="rx"), lt.reduce_axis(bc, name="ci"))
    shape = ctx.out_types[0].shape
    conv = lt.compute(
        shape, lambda n, ko, y, x, ki: lt.sum(
            X[n, co, y * sy + ry * dy, x * sx + rx * dx, ci] * W[ko, co, ry, rx, ci, ki],
            axis=[co, ry, rx, ci]),
        name=te_name(ctx, "conv" if B is not None else ""))
    if B is None:
        return [conv]
    return [lt.compute(shape, lambda n, ko, y, x, ki: conv[n, ko, y, x, ki] + B[ko, ki],
                       name=te_name(ctx))]


register(OpDef("ConvNCHWc", OpPattern.OUT_ELEMWISE_FUSABLE, _conv_infer, _conv_reference,
               _conv_compute, attrs={"strides": None, "pads": None, "dilations": None},
               inputs=(2, 3), doc="2-D convolution on NCHW{b}c data, pre-blocked weights"))
