"""2-D convolution, NCHW (float32), three ways: ``conv2d``, ``conv2d_nchwc`` (packed layouts)
and ``conv2d_winograd`` (Winograd's minimal filtering, stride 1).

Both compute out[n, k, y, x] = sum_{c, ry, rx} pad(data)[n, c, y*s + ry, x*s + rx] *
weight[k, c, ry, rx], the padding being a compute with ``lt.if_then_else`` (default: a
ResNet-18 3x3 layer, 1 x 64 x 56 x 56 -> 64 channels, stride 1, pad 1).

``conv2d`` hand schedule (plain NCHW): the padded input is materialised once (parallel,
vectorized), then threads take blocks of output channels x rows; a register tile of 8
channels x 2 rows x 16 columns (16 AVX-512 accumulators) sits in a cache_write buffer with
the whole reduction (c, ry, rx) outside the tile, so every step broadcasts one weight per
channel against a contiguous 16-column segment of an input row (columns vectorized, rows
and channels unrolled). Widths that are not multiples of 16 (28, 56) vectorize poorly.

``conv2d_nchwc`` hand schedule: the layout transform is part of the algorithm. The input is
packed (and padded) to NCHW[16]c and the weights to KCRS[16c][16k], so the innermost axis of
every operand is a 16-float channel block: a register tile of 14 columns x 2 channel blocks
(28 AVX-512 accumulators; ``nchwc_tile`` sizes it from the target's vector registers and
lanes: 3 columns x 2 rows, 12 accumulators, with AVX2) takes one weight vector per block and
broadcasts one input scalar per column at each reduction step, feeding both blocks, with no
unaligned loads or lane shuffles. The tile is
unpacked straight into the NCHW output as it is written back. Against the former tile of 14
columns x 1 block: 0.781 -> 0.704 ms (296 -> 329 GFLOP/s, 71% of the FMA peak), 2 threads, in
one process, 12 interleaved blocks of 20 calls, 2-core Intel Xeon VM (model 167, AVX-512);
28 x 1 0.770, 7 x 2 rows x 2 blocks 0.740, the blocks outermost in the tile 1.31 (gcc then
keeps fewer accumulators in registers). Channel counts that are not multiples of 16 are padded
with zeros in the packs, so any size is exact.

``conv2d_winograd``: F(4x4, 3x3) (``algorithm_winograd``: weight and input transforms, one
matrix product per point of the 6 x 6 input tile, output transform), 4x fewer multiplies than
the direct form; the hand schedule keeps every transform a few vectorized, unrolled adds
(rows then columns, the padded plane and a row of tiles in cache) and the products in
``winograd_tile`` register tiles. At the default layer, 2 threads, 2-core Zen 4 VM (AVX-512),
one process, 7 blocks of 10 calls, 3 rounds: 0.755 ms against conv2d_nchwc's 1.08 (which runs
at 92% of the FMA peak: a direct convolution has little left to gain). Its float32 results differ
from the direct sum by about 1e-6 of the output's scale.
"""
from __future__ import annotations

import looptune as lt
import numpy as np
from looptune.graph.ops.winograd import (
    DEFAULT_M,
    MAX_ALPHA,
    coefficient_sum,
    select_table,
    winograd_matrices,
)

NAME = "conv2d"
DEFAULT_ARGS = (1, 64, 56, 56, 64, 3, 3, 1, 1)   # N, C, H, W, K, KH, KW, stride, pad


def _out_size(H, W, KH, KW, stride, pad):
    return (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1


def _pad(data, pad, name="pad"):
    N, C, H, W = data.shape

    def body(n, c, y, x):
        inside = lt.all(y >= pad, y < H + pad, x >= pad, x < W + pad)
        return lt.if_then_else(inside, data[n, c, y - pad, x - pad], 0.0)
    return lt.compute((N, C, H + 2 * pad, W + 2 * pad), body, name=name)


# ---- conv2d: plain NCHW ---------------------------------------------------------------------


def algorithm(N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32"):
    """data (N,C,H,W), weight (K,C,KH,KW) -> out (N,K,OH,OW). Returns [data, weight, out]."""
    data = lt.placeholder((N, C, H, W), dtype, name="data")
    weight = lt.placeholder((K, C, KH, KW), dtype, name="weight")
    OH, OW = _out_size(H, W, KH, KW, stride, pad)
    dp = _pad(data, pad)
    c = lt.reduce_axis(C, name="c")
    ry = lt.reduce_axis(KH, name="ry")
    rx = lt.reduce_axis(KW, name="rx")
    out = lt.compute(
        (N, K, OH, OW),
        lambda n, k, y, x: lt.sum(dp[n, c, y * stride + ry, x * stride + rx]
                                  * weight[k, c, ry, rx], axis=[c, ry, rx]),
        name="out")
    return [data, weight, out]


def _schedule(args, dtype, tk, tx, ty):
    data, weight, out = algorithm(*args, dtype=dtype)
    dp = out.op.inputs[0]
    s = lt.create_schedule(out)
    OL = s.cache_write(out, "local")
    n, k, y, x = s[out].op.axis
    ko, ki = s[out].split(k, factor=tk)
    yo, yi = s[out].split(y, factor=ty)
    xo, xi = s[out].split(x, factor=tx)
    s[out].reorder(n, ko, yo, xo, yi, ki, xi)
    s[out].parallel(s[out].fuse(n, ko, yo))
    s[out].vectorize(xi)
    s[OL].compute_at(s[out], xo)
    _, lk, ly, lx = s[OL].op.axis
    lc, lry, lrx = s[OL].op.reduce_axis
    s[OL].reorder(lc, lry, lrx, ly, lk, lx)
    s[OL].unroll(ly)
    s[OL].unroll(lk)
    s[OL].vectorize(lx)
    pn, pc, _py, px = s[dp].op.axis
    s[dp].parallel(s[dp].fuse(pn, pc))
    s[dp].vectorize(px)
    return s, [data, weight, out]


def hand_schedule(N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32"):
    return _schedule((N, C, H, W, K, KH, KW, stride, pad), dtype, tk=8, tx=16, ty=2)


# ---- conv2d_nchwc: packed NCHW[16]c ----------------------------------------------------------

NAME_NCHWC = "conv2d_nchwc"
BLOCK = 16   # channels per block: one AVX-512 vector of float32


def algorithm_nchwc(N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32"):
    """As ``algorithm``, through packed layouts: data -> dpack (N, C/16, H+2p, W+2p, 16),
    weight -> wpack (K/16, C/16, KH, KW, 16c, 16k), conv -> oc (N, K/16, OH, OW, 16), and
    oc unpacked to out (N, K, OH, OW). Returns [data, weight, out]."""
    data = lt.placeholder((N, C, H, W), dtype, name="data")
    weight = lt.placeholder((K, C, KH, KW), dtype, name="weight")
    OH, OW = _out_size(H, W, KH, KW, stride, pad)
    b = BLOCK
    CB, KB = -(-C // b), -(-K // b)

    def pack_data(n, co, y, x, ci):
        c = co * b + ci
        inside = lt.all(c < C, y >= pad, y < H + pad, x >= pad, x < W + pad)
        return lt.if_then_else(inside, data[n, c, y - pad, x - pad], 0.0)
    dpack = lt.compute((N, CB, H + 2 * pad, W + 2 * pad, b), pack_data, name="dpack")

    def pack_weight(ko, co, ry, rx, ci, ki):
        k, c = ko * b + ki, co * b + ci
        return lt.if_then_else(lt.all(k < K, c < C), weight[k, c, ry, rx], 0.0)
    wpack = lt.compute((KB, CB, KH, KW, b, b), pack_weight, name="wpack")
    co = lt.reduce_axis(CB, name="co")
    ci = lt.reduce_axis(b, name="ci")
    ry = lt.reduce_axis(KH, name="ry")
    rx = lt.reduce_axis(KW, name="rx")
    oc = lt.compute(
        (N, KB, OH, OW, b),
        lambda n, ko, y, x, ki: lt.sum(dpack[n, co, y * stride + ry, x * stride + rx, ci]
                                       * wpack[ko, co, ry, rx, ci, ki], axis=[co, ry, rx, ci]),
        name="oc")
    out = lt.compute((N, K, OH, OW), lambda n, k, y, x: oc[n, k // b, y, x, k % b], name="out")
    return [data, weight, out]


def nchwc_tile(N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32", target="c"):
    """The hand schedule's register tile for this machine: (columns, rows, channel blocks).
    Each output position of the tile holds ``blocks`` 16-channel blocks of accumulators (a
    block is ``16 / Target.vector_lanes`` registers); the tile, one weight vector per block
    register and a broadcast input fit the vector registers. Of the tiles that fit, the one
    with the most accumulators doing useful work (positions x the share of the guarded tiles
    that is inside the output), then the widest: 14 columns x 1 row x 2 blocks (28 + 2 + 1
    zmm) with AVX-512; 3 columns x 2 rows x 1 block (12 + 2 + 1 ymm) with AVX2, where the
    former 4 x 1 (8 accumulators, too few to cover the FMA latency on both pipes) ran 3.09 ms
    against 2.83 (56 x 56, one thread, 2-core Xeon VM at -march=x86-64-v3). Two blocks where
    the output channels make an even number of blocks (every input broadcast feeds two FMAs)."""
    t = lt.Target.parse(target)
    per_block = max(1, BLOCK // t.vector_lanes(dtype))
    KB = -(-K // BLOCK)
    blocks = 2 if t.vector_registers() >= 32 and KB % 2 == 0 else 1
    per_pos = blocks * per_block
    OH, OW = _out_size(H, W, KH, KW, stride, pad)
    most = max(1, (t.vector_registers() - per_pos - 1) // per_pos)

    def useful(tx: int, ty: int) -> float:
        covered = -(-OW // tx) * tx * -(-OH // ty) * ty
        return tx * ty * OW * OH / covered
    tiles = [(tx, ty) for tx in range(1, min(OW, most) + 1)
             for ty in range(1, min(OH, most // tx) + 1)]
    tx, ty = max(tiles, key=lambda c: (round(useful(*c), 6), c[0]))
    return tx, ty, blocks


def _schedule_nchwc(args, dtype, tx, ty, unroll_rx, blocks=1):
    data, weight, out = algorithm_nchwc(*args, dtype=dtype)
    oc = out.op.inputs[0]
    dpack, wpack = oc.op.inputs
    s = lt.create_schedule(out)
    OL = s.cache_write(oc, "local")
    s[oc].compute_inline()
    n, k, y, x = s[out].op.axis
    ko, ki = s[out].split(k, factor=BLOCK)
    koo, koi = s[out].split(ko, factor=blocks)
    yo, yi = s[out].split(y, factor=ty)
    xo, xi = s[out].split(x, factor=tx)
    s[out].reorder(n, koo, yo, xo, koi, ki, yi, xi)
    s[out].parallel(s[out].fuse(n, koo, yo))
    s[OL].compute_at(s[out], xo)
    _, lko, ly, lx, lk = s[OL].op.axis
    lco, lry, lrx, lci = s[OL].op.reduce_axis
    # per reduction step: for each column, its blocks side by side (one broadcast input
    # feeds them); blocks innermost measured 0.70 ms against 1.31 with blocks outermost
    s[OL].reorder(lco, lry, lrx, lci, ly, lx, lko, lk)
    if unroll_rx:
        s[OL].unroll(lrx)
    s[OL].unroll(ly)
    s[OL].unroll(lx)
    s[OL].unroll(lko)
    s[OL].vectorize(lk)
    pn, pc, py, _px, pb = s[dpack].op.axis
    s[dpack].parallel(s[dpack].fuse(pn, pc, py))
    s[dpack].vectorize(pb)
    s[wpack].parallel(s[wpack].op.axis[0])
    s[wpack].vectorize(s[wpack].op.axis[5])
    return s, [data, weight, out]


def hand_schedule_nchwc(N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32",
                        target="c"):
    args = (N, C, H, W, K, KH, KW, stride, pad)
    tx, ty, blocks = nchwc_tile(*args, dtype=dtype, target=target)
    return _schedule_nchwc(args, dtype, tx=tx, ty=ty, unroll_rx=False, blocks=blocks)


# ---- conv2d_winograd: Winograd F(m x m, r x r) ---------------------------------------------

NAME_WINOGRAD = "conv2d_winograd"


def winograd_tiles(N, C, H, W, K, KH, KW, stride=1, pad=1, m=DEFAULT_M):
    """(OH, OW, tile rows nH, tile columns nW, input tile rows, input tile columns) of
    conv2d_winograd at ``m``; ValueError naming the argument where Winograd does not apply."""
    if stride != 1:
        raise ValueError(f"conv2d_winograd: stride={stride}: Winograd convolution needs stride "
                         "1; use conv2d or conv2d_nchwc for a strided layer")
    if max(KH, KW) + m - 1 > MAX_ALPHA or m < 1:
        raise ValueError(f"conv2d_winograd: m={m} with a {KH}x{KW} kernel makes input tiles of "
                         f"{max(KH, KW) + m - 1} (at most {MAX_ALPHA}: rounding grows "
                         "with the tile); use a smaller m, or conv2d_nchwc")
    OH, OW = _out_size(H, W, KH, KW, stride, pad)
    if OH < 1 or OW < 1:
        raise ValueError(f"conv2d_winograd: a {KH}x{KW} kernel with pad={pad} leaves no output "
                         f"of a {H}x{W} input")
    return OH, OW, -(-OH // m), -(-OW // m), m + KH - 1, m + KW - 1


def algorithm_winograd(N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32",
                       m=DEFAULT_M):
    """As ``algorithm`` (stride 1), by Winograd's F(m x m, KH x KW): per tile of m x m outputs,
    out = AT (sum_c (G w G^T) * (BT d BT^T)) A, as stages (Lavin & Gray 2016; TVM's
    conv2d_winograd):

    - U[a, b, k, c] = (G w[k, c] G^T)[a, b]: the weight transform (W1: its first half);
    - V[a, b, c, p] = (BT d_p BT^T)[a, b] over the input tile d_p of tile p (T1: its first
      half, BT's rows over the padded input ``dp``);
    - M[a, b, k, p] = sum_c U[a, b, k, c] V[a, b, c, p]: one matrix product per (a, b);
    - out = AT M[., ., k, p] A (O1: its first half), cropped to the output.

    Tiles p = (n, tile row, tile column), row-major, so a row of tiles is contiguous in V and
    M. F(4x4, 3x3) multiplies 2.25 * 16 / 36 = 4x fewer times than the direct form; its
    float32 results differ from the direct sum by about 1e-6 relative (tests bound it)."""
    OH, OW, nH, nW, ah, aw = winograd_tiles(N, C, H, W, K, KH, KW, stride, pad, m)
    data = lt.placeholder((N, C, H, W), dtype, name="data")
    weight = lt.placeholder((K, C, KH, KW), dtype, name="weight")
    ATh, Gh, BTh = winograd_matrices(m, KH)
    ATw, Gw, BTw = winograd_matrices(m, KW)
    P = N * nH * nW
    W1 = lt.compute((ah, K, C, KW), lambda a, k, c, j: select_table(
        a, ah, lambda a_: coefficient_sum([(Gh[a_, i], weight[k, c, i, j])
                                           for i in range(KH)])), name="W1")
    U = lt.compute((ah, aw, K, C), lambda a, b, k, c: select_table(
        b, aw, lambda b_: coefficient_sum([(Gw[b_, j], W1[a, k, c, j])
                                           for j in range(KW)])), name="U")
    Hp, Wp = nH * m + KH - 1, nW * m + KW - 1

    def padded(n, c, y, x):
        inside = lt.all(y >= pad, y < H + pad, x >= pad, x < W + pad)
        return lt.if_then_else(inside, data[n, c, y - pad, x - pad], 0.0)
    dp = lt.compute((N, C, Hp, Wp), padded, name="dp")
    T1 = lt.compute((ah, N, C, nH, Wp), lambda a, n, c, yt, x: select_table(
        a, ah, lambda a_: coefficient_sum([(BTh[a_, i], dp[n, c, yt * m + i, x])
                                           for i in range(ah)])), name="T1")

    def v_body(a, b, c, p):
        n, t = p // (nH * nW), p % (nH * nW)
        return select_table(b, aw, lambda b_: coefficient_sum(
            [(BTw[b_, j], T1[a, n, c, t // nW, (t % nW) * m + j]) for j in range(aw)]))
    V = lt.compute((ah, aw, C, P), v_body, name="V")
    rc = lt.reduce_axis(C, name="rc")
    M = lt.compute((ah, aw, K, P), lambda a, b, k, p: lt.sum(U[a, b, k, rc] * V[a, b, rc, p],
                                                            axis=rc), name="M")
    O1 = lt.compute((m, aw, K, P), lambda i, b, k, p: select_table(
        i, m, lambda i_: coefficient_sum([(ATh[i_, a], M[a, b, k, p])
                                          for a in range(ah)])), name="O1")

    def out_body(n, k, y, x):
        p = n * nH * nW + (y // m) * nW + x // m
        return select_table(x % m, m, lambda j_: coefficient_sum(
            [(ATw[j_, b], O1[y % m, b, k, p]) for b in range(aw)]))
    out = lt.compute((N, K, OH, OW), out_body, name="out")
    return [data, weight, out]


def winograd_tile(N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32", target="c"):
    """The batched product's register tile for this machine: (rows of K, columns of tiles):
    two vectors of tiles wide and as many rows as leave a vector register for each column
    vector and one broadcast, at most 8 (8 x 32 with AVX-512, 6 x 16 with AVX2: 16 and 12
    accumulators; 8 to 14 rows ran alike, 0.76 ms for the whole 1 x 64 x 56^2 layer, on a
    2-core Zen 4 VM)."""
    t = lt.Target.parse(target)
    lanes = t.vector_lanes(dtype)
    rows = max(1, min(8, (t.vector_registers() - 4) // 2, K))
    return rows, 2 * lanes


def _schedule_winograd(args, dtype, m, tk, tp):
    data, weight, out = algorithm_winograd(*args, dtype=dtype, m=m)
    nW = winograd_tiles(*args, m=m)[3]
    O1 = out.op.inputs[0]
    M = O1.op.inputs[0]
    U, V = M.op.inputs
    W1 = U.op.inputs[0]
    T1 = V.op.inputs[0]
    dp = T1.op.inputs[0]
    s = lt.create_schedule(out)
    # weight transform: per output channel, the kernel's rows then columns, unrolled
    a, b, k, c = s[U].op.axis
    s[U].reorder(k, a, c, b)
    s[U].unroll(b)
    s[U].parallel(k)
    s[W1].compute_at(s[U], k)
    wa, _, _, wj = s[W1].op.axis
    s[W1].unroll(wa)
    s[W1].unroll(wj)
    # input transform: per channel (padded plane in cache), per row of tiles the rows
    # transform over the padded width (T1), then the columns, across the tiles (vectorized)
    a, b, c, p = s[V].op.axis
    yt, xt = s[V].split(p, factor=nW)
    s[V].reorder(c, yt, a, xt, b)
    s[V].unroll(b)
    s[V].vectorize(xt)
    s[V].parallel(c)
    s[T1].compute_at(s[V], yt)
    ta, _, _, _, tx = s[T1].op.axis
    s[T1].unroll(ta)
    s[T1].vectorize(tx)
    s[dp].compute_at(s[V], c)
    s[dp].vectorize(s[dp].op.axis[3])
    # batched product: per (a, b), tk x tp register tiles over (K, tiles), C innermost
    ML = s.cache_write(M, "local")
    a, b, k, p = s[M].op.axis
    ko, ki = s[M].split(k, factor=tk)
    po, pi = s[M].split(p, factor=tp)
    s[M].reorder(a, b, ko, po, ki, pi)
    s[M].parallel(s[M].fuse(a, b))
    s[M].vectorize(pi)
    s[ML].compute_at(s[M], po)
    _, _, lk, lp = s[ML].op.axis
    (lc,) = s[ML].op.reduce_axis
    s[ML].reorder(lc, lk, lp)
    s[ML].unroll(lk)
    s[ML].vectorize(lp)
    # output transform: per output channel and row of tiles, the rows (O1), then the columns
    # into the output, vectorized across the tiles of the row
    n, k, y, x = s[out].op.axis
    yo, yi = s[out].split(y, factor=m)
    xo, xi = s[out].split(x, factor=m)
    s[out].reorder(n, k, yo, yi, xo, xi)
    s[out].unroll(yi)
    s[out].unroll(xi)
    s[out].vectorize(xo)
    s[out].parallel(s[out].fuse(n, k))
    s[O1].compute_at(s[out], yo)
    oi, ob, _, op_ = s[O1].op.axis
    s[O1].unroll(oi)
    s[O1].unroll(ob)
    s[O1].vectorize(op_)
    return s, [data, weight, out]


def hand_schedule_winograd(N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32",
                           target="c"):
    args = (N, C, H, W, K, KH, KW, stride, pad)
    m = min(DEFAULT_M, MAX_ALPHA + 1 - max(KH, KW))
    tk, tp = winograd_tile(*args, dtype=dtype, target=target)
    return _schedule_winograd(args, dtype, m, tk, tp)


# ---- templates ------------------------------------------------------------------------------


@lt.template(NAME)
def template(cfg, N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32"):
    """Register tile (channels x rows x columns); the fallback config is the hand schedule."""
    cfg.define_knob("tile_k", [8, 4, 6, 12, 16])
    cfg.define_knob("tile_x", [16, 32, 8])
    cfg.define_knob("tile_y", [2, 1, 3])
    return _schedule((N, C, H, W, K, KH, KW, stride, pad), dtype, cfg["tile_k"].val,
                     cfg["tile_x"].val, cfg["tile_y"].val)


@lt.template(NAME_NCHWC)
def template_nchwc(cfg, N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32"):
    """Register tile (rows x columns x 16-channel blocks), unrolling of the kernel width;
    the fallback config is the hand schedule."""
    args = (N, C, H, W, K, KH, KW, stride, pad)
    tx, ty, blocks = nchwc_tile(*args, dtype=dtype)
    cfg.define_knob("tile_x", list(dict.fromkeys([tx, 14, 8, 7, 16, 28])))
    cfg.define_knob("tile_y", list(dict.fromkeys([ty, 1, 2, 3])))
    cfg.define_knob("unroll_rx", [False, True])
    cfg.define_knob("blocks", list(dict.fromkeys([blocks, 1, 2])))
    return _schedule_nchwc(args, dtype, cfg["tile_x"].val, cfg["tile_y"].val,
                           cfg["unroll_rx"].val, cfg["blocks"].val)


@lt.template(NAME_WINOGRAD)
def template_winograd(cfg, N, C, H, W, K, KH, KW, stride=1, pad=1, dtype="float32"):
    """Output tile m, the batched product's register tile; the fallback config is the hand
    schedule."""
    args = (N, C, H, W, K, KH, KW, stride, pad)
    tk, tp = winograd_tile(*args, dtype=dtype)
    lanes = lt.Target.parse("c").vector_lanes(dtype)
    top = MAX_ALPHA + 1 - max(KH, KW)
    cfg.define_knob("m", list(dict.fromkeys([min(DEFAULT_M, top), min(2, top), min(6, top)])))
    cfg.define_knob("tile_k", list(dict.fromkeys([tk, 4, 12, 16])))
    cfg.define_knob("tile_p", list(dict.fromkeys([tp, lanes, 4 * lanes])))
    return _schedule_winograd(args, dtype, cfg["m"].val, cfg["tile_k"].val, cfg["tile_p"].val)


def reference(data: np.ndarray, weight: np.ndarray, stride: int = DEFAULT_ARGS[7],
              pad: int = DEFAULT_ARGS[8]) -> np.ndarray:
    """im2col (a strided window view) + one tensordot (BLAS); stride/pad default as
    DEFAULT_ARGS."""
    KH, KW = weight.shape[2:]
    dp = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(dp, (KH, KW), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]                       # N, C, OH, OW, KH, KW
    out = np.tensordot(win, weight, axes=([1, 4, 5], [1, 2, 3]))   # N, OH, OW, K
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


OPERATORS = [
    dict(NAME=NAME, DEFAULT_ARGS=DEFAULT_ARGS, algorithm=algorithm,
         hand_schedule=hand_schedule, template=template, reference=reference),
    dict(NAME=NAME_NCHWC, DEFAULT_ARGS=DEFAULT_ARGS, algorithm=algorithm_nchwc,
         hand_schedule=hand_schedule_nchwc, template=template_nchwc, reference=reference),
    dict(NAME=NAME_WINOGRAD, DEFAULT_ARGS=DEFAULT_ARGS, algorithm=algorithm_winograd,
         hand_schedule=hand_schedule_winograd, template=template_winograd,
         reference=reference),
]


def main(args=DEFAULT_ARGS) -> None:
    N, C, H, W, K, KH, KW, stride, pad = args
    rng = np.random.default_rng(0)
    data = rng.random((N, C, H, W), dtype=np.float32)
    weight = rng.random((K, C, KH, KW), dtype=np.float32) - 0.5
    expect = reference(data, weight, stride, pad)
    out = np.empty_like(expect)
    tn = lt.backends.module.time_callable(lambda: reference(data, weight, stride, pad), 3, 7)
    gflop = 2 * N * K * C * KH * KW * expect.shape[2] * expect.shape[3] / 1e9
    modules = []
    for op in OPERATORS:
        s, tensors = op["hand_schedule"](*args)
        print(f"--- {op['NAME']}")
        print(lt.lower(s, tensors))
        f = lt.build(s, tensors, name=op["NAME"])
        modules.append(f)   # keep every module loaded until the end
        out.fill(np.nan)
        f(data, weight, out)
        np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-3)
        t = f.time(data, weight, out, number=3, repeat=7)
        print(f"{op['NAME']:<14} {t.median * 1e3:8.3f} ms  {gflop / t.median:6.1f} GFLOP/s  "
              f"looptune / numpy time: {t.median / tn.median:.2f}x")
    print(f"{'numpy':<14} {tn.median * 1e3:8.3f} ms  {gflop / tn.median:6.1f} GFLOP/s "
          "(im2col + tensordot)")


if __name__ == "__main__":
    main()
