"""The layout transform: chains of NCHW convolutions switch to the blocked NCHW[x]c layout.

In NCHW{b}c the innermost axis is a block of ``b`` channels, one SIMD vector (``b`` from the
target's float32 vector lanes), so a convolution's inner loop is a vector multiply-add with no
gathers (the layout of ``examples/conv2d.py``'s ``conv2d_nchwc``, and TVM's AlterOpLayout).

How the pass rewrites, node by node in graph order:

- A Conv (float32, 2-D, group 1, constant weights and bias, explicit or VALID pads) whose
  output channels split into blocks of at least 2 becomes ``ConvNCHWc`` with weights blocked
  once, as constants. Block = the largest divisor of the channel count not above the lanes
  (16 channels -> 16 on AVX-512; 24 -> 12; 3 input channels -> 3), so no tensor is padded and
  every transform is exact; a Conv whose output channels have no divisor >= 2 within the lanes
  (e.g. 17) stays NCHW. A 3x3 stride-1 one with at least 32 channels in and out and 8 output
  rows and columns becomes ``WinogradNCHWc`` instead (``by_winograd``; F(4x4, 3x3): its
  weights transformed once, as constants; ``winograd=False`` keeps ConvNCHWc).
- An elementwise op (Relu, Sigmoid, ... ; Add/Mul/... with a constant, or with a tensor of the
  same shape) whose input is blocked works on the blocked tensor as it is; a per-channel
  constant (the bias of a folded BatchNormalization) is blocked once to (1, C/b, 1, 1, b).
- MaxPool and AveragePool of a blocked value pool the blocked tensor as it is (one more
  window axis, of size 1), and GlobalAveragePool/GlobalMaxPool become ReduceMean/ReduceMax
  over H and W, so a conv-pool-conv chain stays blocked.
- A ``LayoutTransform`` is inserted only where a value crosses the boundary: into the block
  from an NCHW value (a graph input, a non-blocked op), and back for each NCHW reader (the
  back transform keeps the value's name, so graph outputs and other readers are unchanged).
  Between two blocked operators the pair of transforms cancels: the reader takes the blocked
  value directly.
"""
from __future__ import annotations

from ...backends.target import Target
from ...errors import BuildError
from ..ir import Graph, Node
from ..ops.layout import block_nchw, block_weight, blocked_layout
from ..ops.winograd import DEFAULT_M, winograd_weights
from .base import Builder, PassStats, count, has_ops
from .simplify import ELEMENTWISE_BINARY, ELEMENTWISE_UNARY


_GLOBAL_POOLS = {"GlobalAveragePool": "ReduceMean", "GlobalMaxPool": "ReduceMax"}


def target_lanes(target) -> int | None:
    """float32 SIMD lanes of a C target (``"c"``: the machine's own); None for other kinds."""
    t = Target.parse(target)
    if t.kind != "c":
        return None
    return t.vector_lanes("float32")


WINOGRAD_MIN_CHANNELS = 32  # input and output channels at least: with fewer, the transforms
WINOGRAD_MIN_PIXELS = 8     # (and output rows and columns) cost more than the products save


def by_winograd(w_shape, x_shape, attrs: dict) -> bool:
    """Whether a blocked Conv of weights ``w_shape`` (K, C, KH, KW) on input ``x_shape``
    (N, C, H, W) with ``attrs`` (strides, pads, dilations) runs as WinogradNCHWc: 3x3,
    stride 1, dilation 1, at least WINOGRAD_MIN_CHANNELS channels in and out and an output
    of at least WINOGRAD_MIN_PIXELS rows and columns. Conv + bias + Relu, compiled (the auto
    scheduler's first choices), 2-core Zen 4 VM, ms against ConvNCHWc: 1 x 64 x 56^2 -> 64
    0.55-0.72 / 1.12-1.20; 8 x 32 x 16^2 -> 32 0.21 / 0.28; 128 x 14^2 -> 128 0.19-0.21 /
    0.30; 64 x 28^2 -> 128 0.39-0.42 / 0.58-0.62; 256 x 8^2 -> 256 0.27-0.29 / 0.38; but 16
    x 32^2 -> 16 0.08-0.09 / 0.06 (too few channels)."""
    k, c, kh, kw = w_shape
    if (kh, kw) != (3, 3) or list(attrs.get("strides", (1, 1))) != [1, 1] or \
            list(attrs.get("dilations", (1, 1))) != [1, 1]:
        return False
    pt, pl, pb, pr = attrs.get("pads", (0, 0, 0, 0))
    oh, ow = x_shape[2] + pt + pb - 2, x_shape[3] + pl + pr - 2
    return min(k, c) >= WINOGRAD_MIN_CHANNELS and min(oh, ow) >= WINOGRAD_MIN_PIXELS


def channel_block(channels: int, lanes: int) -> int:
    """The largest divisor of ``channels`` that is at most ``lanes``."""
    return max(d for d in range(1, min(lanes, channels) + 1) if channels % d == 0)


def layout_nchwc(graph: Graph, stats: PassStats | None = None, *, target="c",
                 block: int | None = None, winograd: bool = True) -> Graph:
    """Switch Conv chains to NCHW{b}c (see the module docstring). ``block`` overrides the
    target's lanes; a non-C target (OpenCL) without ``block`` leaves the graph as it is.
    ``winograd``: a 3x3 stride-1 Conv with enough channels and pixels becomes
    ``WinogradNCHWc`` (F(4x4, 3x3), weights transformed once), else ``ConvNCHWc``.
    Counts ``convs blocked``, ``convs by Winograd`` (of those), ``elementwise blocked``,
    ``pools blocked``, ``transforms inserted`` (at the boundaries, after dead
    back-transforms are dropped) and ``transform pairs cancelled``.

    Before -> after (16 lanes)::

        %c = Conv(%x, %w; pads=[1, 1, 1, 1]); %y = Relu(%c)
        ->  %xb = LayoutTransform(%x; NCHW -> NCHW16c)
            %cb = ConvNCHWc(%xb, %w_blocked; pads=[1, 1, 1, 1]); %yb = Relu(%cb)
            %y = LayoutTransform(%yb; NCHW16c -> NCHW)
    """
    if block is not None and (not isinstance(block, int) or block < 1):
        raise BuildError(f"layout_nchwc(block={block!r}): the block must be a positive int "
                         "(channels per vector), or None for the target's lanes")
    lanes = block if block is not None else target_lanes(target)
    if lanes is None or lanes < 2 or not has_ops("Conv"):
        count(stats, "layout_nchwc", "skipped (no vector lanes)")
        return graph
    rw = _Blocker(graph, lanes, winograd)
    for node in graph.nodes:
        if not (rw.conv(node) or rw.elementwise(node) or rw.pool(node)):
            rw.b.keep(node)
    if not rw.counts["convs blocked"]:
        return graph
    out, _ = rw.b.finish()
    rw.counts["transforms inserted"] = sum(n.op_type == "LayoutTransform" for n in out.nodes)
    for what, n in rw.counts.items():
        count(stats, "layout_nchwc", what, n)
    return out


class _Blocker:
    """The state of one run: the builder, and the blocked twin of each value that has one."""

    def __init__(self, graph: Graph, lanes: int, winograd: bool = True):
        self.b = Builder(graph)
        self.lanes = lanes
        self.winograd = winograd
        self.blocked: dict[str, tuple[str, int]] = {}     # NCHW value -> (blocked value, b)
        self.transforms: dict[tuple[str, int], str] = {}
        self.counts = {"convs blocked": 0, "convs by Winograd": 0, "elementwise blocked": 0,
                       "pools blocked": 0, "transform pairs cancelled": 0}

    def into_block(self, v: str, blk: int) -> str:
        """``v`` in NCHW{blk}c: its blocked twin, or one LayoutTransform (made once)."""
        if v in self.blocked and self.blocked[v][1] == blk:
            self.counts["transform pairs cancelled"] += 1
            return self.blocked[v][0]
        if (v, blk) not in self.transforms:
            self.transforms[(v, blk)] = self.b.add(
                "LayoutTransform", [v], {"src_layout": "NCHW", "dst_layout": blocked_layout(blk)},
                base=v + "_" + blocked_layout(blk))
        return self.transforms[(v, blk)]

    def emit(self, n: Node, op_type: str, inputs, attrs, blk: int) -> None:
        """The blocked node, and the transform back to NCHW under the old output's name."""
        out = n.outputs[0]
        yb = self.b.add(op_type, inputs, attrs, base=out + "_" + blocked_layout(blk))
        self.b.add("LayoutTransform", [yb], {"src_layout": blocked_layout(blk),
                                             "dst_layout": "NCHW"}, out=out)
        self.blocked[out] = (yb, blk)

    def conv(self, n: Node) -> bool:
        b = self.b
        if n.op_type != "Conv" or len(n.outputs) != 1 or b.type(n.inputs[0]).dtype != "float32":
            return False
        w = b.const(n.inputs[1])
        bias = b.const(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else None
        a = b.attrs(n)
        if (w is None or w.ndim != 4 or len(b.shape(n.inputs[0])) != 4 or a.get("group", 1) != 1
                or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID")
                or (bias is None and len(n.inputs) > 2 and n.inputs[2])):
            return False
        k, c = w.shape[:2]
        bk, bc = channel_block(k, self.lanes), channel_block(c, self.lanes)
        if bk < 2:
            return False
        blocked = block_weight(w, bc, bk)
        attrs = {key: a[key] for key in ("strides", "pads", "dilations") if a.get(key)}
        op, wname = "ConvNCHWc", n.inputs[1] + "_" + f"{bc}c{bk}k"
        if self.winograd and by_winograd(w.shape, b.shape(n.inputs[0]), attrs):
            op, wname = "WinogradNCHWc", wname + f"_wino{DEFAULT_M}"
            blocked = winograd_weights(blocked, DEFAULT_M).astype(w.dtype)
            attrs = {"pads": list(attrs.get("pads", (0, 0, 0, 0))), "m": DEFAULT_M}
            self.counts["convs by Winograd"] += 1
        ins = [self.into_block(n.inputs[0], bc), b.add_const(blocked, base=wname)]
        if bias is not None:
            ins.append(b.add_const(bias.reshape(k // bk, bk), base=n.inputs[2] + f"_{bk}k"))
        self.emit(n, op, ins, attrs, bk)
        self.counts["convs blocked"] += 1
        return True

    def elementwise(self, n: Node) -> bool:
        if len(n.outputs) != 1 or not any(i in self.blocked for i in n.inputs):
            return False
        if n.op_type in ELEMENTWISE_UNARY and n.inputs[0] in self.blocked and all(
                self.b.shape(i) == () for i in n.inputs[1:] if i):
            x, blk = self.blocked[n.inputs[0]]
            self.counts["transform pairs cancelled"] += 1
            self.emit(n, n.op_type, [x, *n.inputs[1:]], n.attributes, blk)
            self.counts["elementwise blocked"] += 1
            return True
        if n.op_type not in ELEMENTWISE_BINARY or len(n.inputs) != 2:
            return False
        out = self.b.old.types[n.outputs[0]].shape
        blk = next(self.blocked[i][1] for i in n.inputs if i in self.blocked)
        ins = [self._operand(i, out) for i in n.inputs]
        if any(i is None for i in ins):
            return False
        self.emit(n, n.op_type, [self._materialize(i, blk) for i in ins], n.attributes, blk)
        self.counts["elementwise blocked"] += 1
        return True

    def pool(self, n: Node) -> bool:
        """A pool of a blocked value pools the 5-D tensor: the window gains a last axis of
        size 1 (stride 1, no padding), so each channel of a block pools on its own; a global
        pool becomes a ReduceMean/ReduceMax over H, W."""
        if len(n.outputs) != 1 or n.inputs[0] not in self.blocked:
            return False
        x, blk = self.blocked[n.inputs[0]]
        if n.op_type in _GLOBAL_POOLS and has_ops(_GLOBAL_POOLS[n.op_type]):
            self.emit(n, _GLOBAL_POOLS[n.op_type], [x], {"axes": [2, 3], "keepdims": 1}, blk)
        elif n.op_type in ("MaxPool", "AveragePool"):
            a = dict(n.attributes)
            pads = list(a.get("pads") or (0, 0, 0, 0))
            a["kernel_shape"] = list(a["kernel_shape"]) + [1]
            a["pads"] = pads[:2] + [0] + pads[2:] + [0]
            for key in ("strides", "dilations"):
                a[key] = list(a.get(key) or (1, 1)) + [1]
            self.emit(n, n.op_type, [x], a, blk)
        else:
            return False
        self.counts["transform pairs cancelled"] += 1
        self.counts["pools blocked"] += 1
        return True

    def _operand(self, v: str, out: tuple[int, ...]):
        """How a binary op's input enters the block: ("v", v) a tensor of the output's shape
        (blocked, or transformed), ("s", v) a scalar as it is, ("c", array) a constant to
        block; None when it cannot."""
        c = self.b.const(v)
        if c is None:
            return ("v", v) if self.b.shape(v) == out else None
        if c.ndim == 0:
            return ("s", v)
        if c.ndim > 4:
            return None
        full = c.reshape((1,) * (4 - c.ndim) + c.shape)
        return ("c", full) if full.shape[1] in (1, out[1]) else None

    def _materialize(self, operand, blk: int) -> str:
        kind, val = operand
        if kind == "v":
            return self.into_block(val, blk)
        if kind == "s":
            return val
        if val.shape[1] == 1:
            return self.b.add_const(val.reshape(val.shape + (1,)), base="const_nchwc")
        return self.b.add_const(block_nchw(val, blk), base="const_" + blocked_layout(blk))

