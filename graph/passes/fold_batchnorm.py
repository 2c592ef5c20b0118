"""Batch-normalization folding: an inference BatchNormalization disappears into the Conv
before it, or else becomes one Mul and one Add by constants; a per-channel Mul or Add after a
Conv folds into the Conv's weights or bias the same way.

With ``k = scale / sqrt(var + epsilon)``, BN(y) = y*k + (bias - mean*k) per channel, and for
y = Conv(x, W, B): y*k = Conv(x, W*k[:, None, ...], B*k), so the two are one Conv.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .base import Builder, PassStats, has_ops, rewrite


def _bn_params(b: Builder, n: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(k, shift) of an inference BN with constant parameters: BN(y) = y*k + shift per
    channel (float64 until stored)."""
    if n.op_type != "BatchNormalization" or len(n.outputs) > 1 and any(
            o and b.uses(o) for o in n.outputs[1:]):
        return None
    attrs = b.attrs(n)
    if attrs.get("training_mode", 0):
        return None
    params = [b.const(i) for i in n.inputs[1:5]]
    if any(p is None for p in params):
        return None
    scale, bias, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
    k = scale / np.sqrt(var + attrs["epsilon"])
    return k, bias - mean * k


def _conv_parts(b: Builder, v: str) -> tuple[Node, np.ndarray, np.ndarray | None] | None:
    """(conv, W, B) when ``v`` is computed by a Conv with constant weights (and bias, if
    any) that nothing else reads."""
    conv = b.producer_of(v, "Conv")
    if conv is None or b.uses(v) != 1:
        return None
    w = b.const(conv.inputs[1])
    has_bias = len(conv.inputs) > 2 and conv.inputs[2]
    bias = b.const(conv.inputs[2]) if has_bias else None
    if w is None or (has_bias and bias is None):
        return None
    return conv, w, bias


def _rebuild_conv(b: Builder, n: Node, conv: Node, w: np.ndarray, bias: np.ndarray) -> str:
    dtype = b.type(conv.inputs[1]).dtype
    wn = b.add_const(w.astype(dtype), base=conv.inputs[1] + "_folded")
    bn = b.add_const(bias.astype(dtype), base=(conv.inputs[2] if len(conv.inputs) > 2
                                              and conv.inputs[2] else conv.outputs[0] + "_bias"))
    return b.add("Conv", [conv.inputs[0], wn, bn], conv.attributes, out=n.outputs[0])


def _scaled(w: np.ndarray, bias: np.ndarray | None, k: np.ndarray, shift: np.ndarray):
    """The weights and bias of Conv(x, W, B)*k + shift (k, shift per output channel)."""
    kk = np.broadcast_to(k, (w.shape[0],))
    w2 = w.astype(np.float64) * kk.reshape((-1,) + (1,) * (w.ndim - 1))
    b0 = np.zeros(w.shape[0]) if bias is None else bias.astype(np.float64)
    return w2, b0 * kk + shift


def _bn_into_conv(b: Builder, n: Node) -> str | None:
    # BatchNormalization(Conv(x, W, B)) -> Conv(x, W*k, (B - mean)*k + bias)
    p = _bn_params(b, n)
    parts = _conv_parts(b, n.inputs[0]) if p is not None else None
    if parts is None:
        return None
    conv, w, bias = parts
    return _rebuild_conv(b, n, conv, *_scaled(w, bias, *p))


def _bn_to_mul_add(b: Builder, n: Node) -> str | None:
    # BatchNormalization(x) -> x*k + (bias - mean*k)   (k = scale / sqrt(var + eps))
    p = _bn_params(b, n)
    if p is None or not has_ops("Mul", "Add"):
        return None
    k, shift = p
    d = b.type(n.inputs[0]).dtype
    shape = (-1,) + (1,) * (len(b.shape(n.inputs[0])) - 2)
    kn = b.add_const(k.reshape(shape).astype(d), base="bn_scale")
    sn = b.add_const(shift.reshape(shape).astype(d), base="bn_shift")
    y = b.add("Mul", [n.inputs[0], kn], base=n.outputs[0])
    return b.add("Add", [y, sn], out=n.outputs[0])


def _per_channel(b: Builder, n: Node, op: str):
    """(conv, W, B, c) for op(Conv(..), c) with c a constant of one value per output
    channel (or one value) that does not broadcast the Conv's output."""
    if n.op_type != op or len(n.inputs) != 2:
        return None
    for k in (0, 1):
        c = b.const(n.inputs[1 - k])
        parts = _conv_parts(b, n.inputs[k]) if c is not None else None
        if parts is None:
            continue
        shape = b.shape(n.inputs[k])
        if c.ndim > len(shape) or b.out_type(n).shape != shape:
            return None
        full = c.reshape((1,) * (len(shape) - c.ndim) + c.shape)
        if any(s != 1 for d, s in enumerate(full.shape) if d != 1):
            return None
        return (*parts, full.reshape(-1).astype(np.float64))
    return None


def _mul_into_conv(b: Builder, n: Node) -> str | None:
    # Conv(x, W, B) * c -> Conv(x, W*c, B*c)   (c one value per output channel)
    m = _per_channel(b, n, "Mul")
    if m is None:
        return None
    conv, w, bias, c = m
    return _rebuild_conv(b, n, conv, *_scaled(w, bias, c, np.zeros(w.shape[0])))


def _add_into_conv(b: Builder, n: Node) -> str | None:
    # Conv(x, W, B) + c -> Conv(x, W, B + c)   (c one value per output channel)
    m = _per_channel(b, n, "Add")
    if m is None:
        return None
    conv, w, bias, c = m
    return _rebuild_conv(b, n, conv, *_scaled(w, bias, np.ones(1), c))


RULES = [_bn_into_conv, _bn_to_mul_add, _mul_into_conv, _add_into_conv]


def fold_batchnorm(graph: Graph, stats: PassStats | None = None) -> Graph:
    """Fold inference BatchNormalization (constant parameters) into the Conv that is its only
    input's producer (that Conv's output read by nothing else, its weights constant), else
    replace it by a Mul and an Add by per-channel constants; fold a per-channel constant Mul or
    Add after such a Conv into its weights and bias. Counts ``bn_into_conv``,
    ``bn_to_mul_add``, ``mul_into_conv``, ``add_into_conv``.

    Before -> after::

        %c = Conv(%x, %w); %y = BatchNormalization(%c, %s, %b, %m, %v)  ->  %y = Conv(%x, %w', %b')
    """
    return rewrite(graph, RULES, stats, "fold_batchnorm")
