"""2-D pooling, NCHW (float32): ``max_pool2d`` (default 3 x 3, stride 2, pad 1: the ResNet
stem, 1 x 64 x 112 x 112 -> 56 x 56) and ``avg_pool2d`` (default 2 x 2, stride 2; padding
counts as zeros, divisor KH*KW, PyTorch's count_include_pad=True).

Hand schedule (both): pooling does a handful of compares or adds per output, so it is bound
by memory traffic. Each thread takes whole channels (n and c fused, parallel); the padded
plane of a channel (-inf for max, 0 for average) is built at the channel loop so it stays in
L1 (for pad 0 the pad stage is the identity and is inlined away); each output row is reduced
in a local row buffer (cache_write at the row loop) with the window loops outside the
vectorized column loop, so the stride-s window reads become s-strided vector loads instead
of a scalar reduction per output.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

MAX_ARGS = (1, 64, 112, 112, 3, 3, 2, 1)   # N, C, H, W, KH, KW, stride, pad
AVG_ARGS = (1, 64, 112, 112, 2, 2, 2, 0)


def _padded(data, pad, value):
    N, C, H, W = data.shape
    if pad == 0:
        return lt.compute((N, C, H, W), lambda n, c, y, x: data[n, c, y, x], name="pad")

    def body(n, c, y, x):
        inside = lt.all(y >= pad, y < H + pad, x >= pad, x < W + pad)
        return lt.if_then_else(inside, data[n, c, y - pad, x - pad], value)
    return lt.compute((N, C, H + 2 * pad, W + 2 * pad), body, name="pad")


def _pool(kind, N, C, H, W, KH, KW, stride, pad, dtype):
    data = lt.placeholder((N, C, H, W), dtype, name="data")
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    dp = _padded(data, pad, -np.inf if kind == "max" else 0.0)
    ry = lt.reduce_axis(KH, name="ry")
    rx = lt.reduce_axis(KW, name="rx")

    def window(n, c, y, x):
        return dp[n, c, y * stride + ry, x * stride + rx]
    if kind == "max":
        out = lt.compute((N, C, OH, OW),
                         lambda n, c, y, x: lt.max(window(n, c, y, x), axis=[ry, rx]),
                         name="out")
        return [data, out]
    acc = lt.compute((N, C, OH, OW),
                     lambda n, c, y, x: lt.sum(window(n, c, y, x), axis=[ry, rx]), name="acc")
    out = lt.compute((N, C, OH, OW), lambda n, c, y, x: acc[n, c, y, x] * (1.0 / (KH * KW)),
                     name="out")
    return [data, out]


def algorithm_max(N, C, H, W, KH, KW, stride=2, pad=1, dtype="float32"):
    """data (N,C,H,W) -> out (N,C,OH,OW), the max over each window. Returns [data, out]."""
    return _pool("max", N, C, H, W, KH, KW, stride, pad, dtype)


def algorithm_avg(N, C, H, W, KH, KW, stride=2, pad=0, dtype="float32"):
    """data (N,C,H,W) -> out (N,C,OH,OW), the mean over each window. Returns [data, out]."""
    return _pool("avg", N, C, H, W, KH, KW, stride, pad, dtype)


def _schedule(kind, args, dtype, rows, pad_at_channel):
    data, out = (algorithm_max if kind == "max" else algorithm_avg)(*args, dtype=dtype)
    s = lt.create_schedule(out)
    red = out if kind == "max" else out.op.inputs[0]
    RL = s.cache_write(red, "local")
    dp = RL.op.inputs[0]
    n, c, y, x = s[out].op.axis
    nc = s[out].fuse(n, c)
    yo, _yi = s[out].split(y, factor=rows)
    s[out].parallel(nc)
    s[out].vectorize(x)
    if red is not out:
        s[red].compute_inline()
    s[RL].compute_at(s[out], yo)
    _, _, ly, lx = s[RL].op.axis
    lry, lrx = s[RL].op.reduce_axis
    s[RL].reorder(ly, lry, lrx, lx)
    s[RL].unroll(lry)
    s[RL].unroll(lrx)
    s[RL].vectorize(lx)
    if args[-1] == 0:
        s[dp].compute_inline()
    else:
        if pad_at_channel:
            s[dp].compute_at(s[out], nc)
        else:
            pn, pc, _, _ = s[dp].op.axis
            s[dp].parallel(s[dp].fuse(pn, pc))
        s[dp].vectorize(s[dp].op.axis[3])
    return s, [data, out]


def hand_schedule_max(N, C, H, W, KH, KW, stride=2, pad=1, dtype="float32"):
    return _schedule("max", (N, C, H, W, KH, KW, stride, pad), dtype, rows=1,
                     pad_at_channel=True)


def hand_schedule_avg(N, C, H, W, KH, KW, stride=2, pad=0, dtype="float32"):
    return _schedule("avg", (N, C, H, W, KH, KW, stride, pad), dtype, rows=1,
                     pad_at_channel=True)


@lt.template("max_pool2d")
def template_max(cfg, N, C, H, W, KH, KW, stride=2, pad=1, dtype="float32"):
    """Rows per reduction buffer, where the padded plane lives; fallback = hand schedule."""
    cfg.define_knob("rows", [1, 2, 4, 8])
    cfg.define_knob("pad_at_channel", [True, False])
    return _schedule("max", (N, C, H, W, KH, KW, stride, pad), dtype, cfg["rows"].val,
                     cfg["pad_at_channel"].val)


@lt.template("avg_pool2d")
def template_avg(cfg, N, C, H, W, KH, KW, stride=2, pad=0, dtype="float32"):
    """Rows per reduction buffer, where the padded plane lives; fallback = hand schedule."""
    cfg.define_knob("rows", [1, 2, 4, 8])
    cfg.define_knob("pad_at_channel", [True, False])
    return _schedule("avg", (N, C, H, W, KH, KW, stride, pad), dtype, cfg["rows"].val,
                     cfg["pad_at_channel"].val)


def _windows(data, KH, KW, stride, pad, value):
    H, W = data.shape[2:]
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    dp = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=value)
    for ry in range(KH):
        for rx in range(KW):
            yield dp[:, :, ry:ry + stride * (OH - 1) + 1:stride,
                     rx:rx + stride * (OW - 1) + 1:stride]


def reference_max(data, KH=MAX_ARGS[4], KW=MAX_ARGS[5], stride=MAX_ARGS[6], pad=MAX_ARGS[7]):
    """Elementwise maximum of the KH*KW strided views (window sizes default as MAX_ARGS)."""
    win = _windows(data, KH, KW, stride, pad, -np.inf)
    out = next(win).copy()
    for w in win:
        np.maximum(out, w, out=out)
    return out


def reference_avg(data, KH=AVG_ARGS[4], KW=AVG_ARGS[5], stride=AVG_ARGS[6], pad=AVG_ARGS[7]):
    """Sum of the KH*KW strided views over KH*KW (window sizes default as AVG_ARGS)."""
    win = _windows(data, KH, KW, stride, pad, 0)
    out = next(win).copy()
    for w in win:
        out += w
    return out * out.dtype.type(1.0 / (KH * KW))


OPERATORS = [
    dict(NAME="max_pool2d", DEFAULT_ARGS=MAX_ARGS, algorithm=algorithm_max,
         hand_schedule=hand_schedule_max, template=template_max, reference=reference_max),
    dict(NAME="avg_pool2d", DEFAULT_ARGS=AVG_ARGS, algorithm=algorithm_avg,
         hand_schedule=hand_schedule_avg, template=template_avg, reference=reference_avg),
]

# the single-operator names refer to the first operator (tools that load one template per file)
NAME, DEFAULT_ARGS = "max_pool2d", MAX_ARGS
algorithm, hand_schedule, template = algorithm_max, hand_schedule_max, template_max
reference = reference_max


def main(args=None) -> None:
    """Runs both operators (each at its DEFAULT_ARGS, or both at ``args``)."""
    modules = []
    for op in OPERATORS:
        a = op["DEFAULT_ARGS"] if args is None else args
        N, C, H, W, KH, KW, stride, pad = a
        s, tensors = op["hand_schedule"](*a)
        print(f"--- {op['NAME']}{a}")
        print(lt.lower(s, tensors))
        f = lt.build(s, tensors, name=op["NAME"])
        modules.append(f)   # keep every module loaded until the end
        data = np.random.default_rng(0).random((N, C, H, W), dtype=np.float32)
        expect = op["reference"](data, KH, KW, stride, pad)
        out = np.empty_like(expect)
        f(data, out)
        np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)
        t = f.time(data, out, number=10, repeat=7)
        ref, win = op["reference"], (KH, KW, stride, pad)
        tn = lt.backends.module.time_callable(lambda r=ref, d=data, w=win: r(d, *w), 10, 7)
        print(f"{op['NAME']}: looptune {t.median * 1e3:7.3f} ms   numpy {tn.median * 1e3:7.3f} ms"
              f"   looptune / numpy time: {t.median / tn.median:.2f}x")


if __name__ == "__main__":
    main()
