"""Depthwise 2-D convolution, NCHW (float32): each channel convolved with its own KH x KW
filter, out[n, c, y, x] = sum_{ry, rx} pad(data)[n, c, y*s + ry, x*s + rx] * w[c, ry, rx]
(default: a MobileNet-v1 layer, 1 x 128 x 56 x 56, 3 x 3, stride 1, pad 1).

Hand schedule: with 9 FLOPs per output element the kernel is bound by memory traffic, so the
point is to touch each input once. Channels are spread over threads; each thread builds the
zero-padded plane of its channel (compute_at the channel loop: 13 KB, stays in L1) and sweeps
it with a register tile of ``ty`` rows x ``tx`` columns (cache_write, the 3 x 3 reduction
outside the tile and unrolled, columns vectorized, rows unrolled), so the 9 weights are
broadcast once per tile and each output is stored once.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

NAME = "depthwise_conv2d"
DEFAULT_ARGS = (1, 128, 56, 56, 3, 3, 1, 1)   # N, C, H, W, KH, KW, stride, pad


def algorithm(N, C, H, W, KH, KW, stride=1, pad=1, dtype="float32"):
    """data (N,C,H,W), weight (C,KH,KW) -> out (N,C,OH,OW). Returns [data, weight, out]."""
    data = lt.placeholder((N, C, H, W), dtype, name="data")
    weight = lt.placeholder((C, KH, KW), dtype, name="weight")
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1

    def pad_body(n, c, y, x):
        inside = lt.all(y >= pad, y < H + pad, x >= pad, x < W + pad)
        return lt.if_then_else(inside, data[n, c, y - pad, x - pad], 0.0)
    dp = lt.compute((N, C, H + 2 * pad, W + 2 * pad), pad_body, name="pad")
    ry = lt.reduce_axis(KH, name="ry")
    rx = lt.reduce_axis(KW, name="rx")
    out = lt.compute(
        (N, C, OH, OW),
        lambda n, c, y, x: lt.sum(dp[n, c, y * stride + ry, x * stride + rx] * weight[c, ry, rx],
                                  axis=[ry, rx]),
        name="out")
    return [data, weight, out]


def _schedule(args, dtype, ty, tx, pad_at_channel):
    data, weight, out = algorithm(*args, dtype=dtype)
    dp = out.op.inputs[0]
    s = lt.create_schedule(out)
    OL = s.cache_write(out, "local")
    n, c, y, x = s[out].op.axis
    nc = s[out].fuse(n, c)
    _yo, xo, _yi, xi = s[out].tile(y, x, ty, tx)
    s[out].parallel(nc)
    s[out].vectorize(xi)
    s[OL].compute_at(s[out], xo)
    _, _, ly, lx = s[OL].op.axis
    lry, lrx = s[OL].op.reduce_axis
    s[OL].reorder(lry, lrx, ly, lx)
    s[OL].unroll(lry)
    s[OL].unroll(lrx)
    s[OL].unroll(ly)
    s[OL].vectorize(lx)
    pn, pc, _py, px = s[dp].op.axis
    if pad_at_channel:
        s[dp].compute_at(s[out], nc)
    else:
        s[dp].parallel(s[dp].fuse(pn, pc))
    s[dp].vectorize(px)
    return s, [data, weight, out]


def hand_schedule(N, C, H, W, KH, KW, stride=1, pad=1, dtype="float32"):
    return _schedule((N, C, H, W, KH, KW, stride, pad), dtype, ty=4, tx=16,
                     pad_at_channel=True)


@lt.template(NAME)
def template(cfg, N, C, H, W, KH, KW, stride=1, pad=1, dtype="float32"):
    """Register tile and where the padded plane lives; the fallback config is the hand
    schedule."""
    cfg.define_knob("tile_y", [4, 1, 2, 8])
    cfg.define_knob("tile_x", [16, 32, 64, 8])
    cfg.define_knob("pad_at_channel", [True, False])
    return _schedule((N, C, H, W, KH, KW, stride, pad), dtype, cfg["tile_y"].val,
                     cfg["tile_x"].val, cfg["pad_at_channel"].val)


def reference(data: np.ndarray, weight: np.ndarray, stride: int = DEFAULT_ARGS[6],
              pad: int = DEFAULT_ARGS[7]) -> np.ndarray:
    """Shifted multiply-adds over the padded array (9 vectorized numpy passes for 3 x 3);
    stride/pad default as DEFAULT_ARGS."""
    C, KH, KW = weight.shape
    N, _, H, W = data.shape
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1
    dp = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((N, C, OH, OW), data.dtype)
    for ry in range(KH):
        for rx in range(KW):
            win = dp[:, :, ry:ry + stride * (OH - 1) + 1:stride,
                     rx:rx + stride * (OW - 1) + 1:stride]
            out += win * weight[None, :, ry, rx, None, None]
    return out


def main(args=DEFAULT_ARGS) -> None:
    s, tensors = hand_schedule(*args)
    print(lt.lower(s, tensors))
    f = lt.build(s, tensors, name="depthwise_conv2d")
    N, C, H, W, KH, KW, stride, pad = args
    rng = np.random.default_rng(0)
    data = rng.random((N, C, H, W), dtype=np.float32)
    weight = rng.random((C, KH, KW), dtype=np.float32) - 0.5
    expect = reference(data, weight, stride, pad)
    out = np.empty_like(expect)
    f(data, weight, out)
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-5)
    t = f.time(data, weight, out, number=10, repeat=7)
    tn = lt.backends.module.time_callable(lambda: reference(data, weight, stride, pad), 10, 7)
    print(f"looptune {t.median * 1e3:8.3f} ms")
    print(f"numpy    {tn.median * 1e3:8.3f} ms")
    print(f"looptune / numpy time: {t.median / tn.median:.2f}x")


if __name__ == "__main__":
    main()
