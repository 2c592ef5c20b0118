"""Matmul-shaped workloads under the default schedule and hand schedules using every primitive;
odd sizes (37 x 53 x 101) that no split factor divides. Differential against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from util import matmul, matmul_scaled, rand, run_check

import looptune as lt


# ---- plain matmul --------------------------------------------------------------------------

def _tile_all(s, w):
    C = w["C"]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 8)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].unroll(ki)
    s[C].parallel(io)


def _nparts_fuse(s, w):
    C = w["C"]
    i, j = s[C].op.axis
    io, ii = s[C].split(i, nparts=5)
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(io, jo, ii, ji)
    f = s[C].fuse(io, jo)
    s[C].parallel(f)
    s[C].vectorize(ji)


def _reduction_outermost(s, w):
    C = w["C"]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, factor=7)
    s[C].reorder(ko, i, ki, j)
    s[C].vectorize(j)


def _reduction_innermost_unrolled(s, w):
    C = w["C"]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, factor=6)
    ko, ki = s[C].split(k, nparts=3)
    s[C].reorder(i, jo, ji, ko, ki)
    s[C].unroll(ki)
    s[C].parallel(i)


def _fuse_all_spatial(s, w):
    C = w["C"]
    i, j = s[C].op.axis
    f = s[C].fuse(i, j)
    fo, fi = s[C].split(f, factor=13)
    s[C].parallel(fo)
    s[C].unroll(fi)


def _fuse_reduction_loops(s, w):
    C = w["C"]
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, factor=9)
    kf = s[C].fuse(ko, ki)
    i, j = s[C].op.axis
    s[C].reorder(i, kf, j)
    s[C].vectorize(j)


def _split_of_split(s, w):
    C = w["C"]
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=16)
    jio, jii = s[C].split(ji, factor=3)
    ioo, ii = s[C].split(i, nparts=4)
    s[C].reorder(ioo, jo, ii, jio, jii)
    s[C].vectorize(jii)
    s[C].unroll(jio)
    s[C].parallel(ioo)


def _split_factor_one_and_larger_than_extent(s, w):
    C = w["C"]
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=1)
    jo, ji = s[C].split(j, factor=64)
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, nparts=1)
    s[C].vectorize(ji)


def _unroll_long_reduction(s, w):
    C = w["C"]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    s[C].reorder(i, k, j)
    s[C].unroll(k)          # 101 iterations: longer than the IR unroller takes (a pragma)
    s[C].vectorize(j)


MATMUL = {
    "default": lambda s, w: None,
    "tile_split_all_annotations": _tile_all,
    "nparts_fuse_parallel": _nparts_fuse,
    "reduction_outermost": _reduction_outermost,
    "reduction_innermost_unrolled": _reduction_innermost_unrolled,
    "fuse_all_spatial": _fuse_all_spatial,
    "fuse_reduction_loops": _fuse_reduction_loops,
    "split_of_split": _split_of_split,
    "split_factor_1_and_64": _split_factor_one_and_larger_than_extent,
    "unroll_long_reduction": _unroll_long_reduction,
}


@pytest.mark.parametrize("name", MATMUL)
@pytest.mark.slow
def test_matmul(name):
    w = matmul(37, 53, 101)
    s = w.schedule()
    MATMUL[name](s, w)
    w.check(s)


def test_matmul_float64_and_tiny_sizes():
    for N, M, K in [(1, 1, 1), (3, 1, 5), (1, 7, 2)]:
        A = lt.placeholder((N, K), "float64", name="A")
        B = lt.placeholder((K, M), "float64", name="B")
        k = lt.reduce_axis(K, name="k")
        C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
        s = lt.create_schedule(C)
        i, j = s[C].op.axis
        s[C].split(i, factor=4)
        s[C].split(j, factor=4)
        rng = np.random.default_rng(N * 100 + M)
        a, b = rand(rng, (N, K), "float64"), rand(rng, (K, M), "float64")
        run_check(s, [A, B, C], {"A": a, "B": b}, {"C": a @ b}, rtol=1e-12, atol=1e-12)


# ---- a producer feeding the matmul: compute_at at several levels, inline, root ----------------

def _tiled(s, w):
    C = w["C"]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    ko, ki = s[C].split(k, factor=5)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    return io, jo, ko, ii, ki, ji


def _at(level):
    def sched(s, w):
        loops = dict(zip(["io", "jo", "ko", "ii", "ki", "ji"], _tiled(s, w)))
        s[w["P"]].compute_at(s[w["C"]], loops[level])
        if level in ("io", "jo", "ko"):
            s[w["C"]].vectorize(loops["ji"])
    return sched


def _at_with_producer_schedule(s, w):
    io, jo, ko, ii, ki, ji = _tiled(s, w)
    P = w["P"]
    s[P].compute_at(s[w["C"]], ko)
    pi, pk = s[P].op.axis
    pko, pki = s[P].split(pk, factor=2)
    s[P].unroll(pki)
    s[w["C"]].parallel(io)


def _root_parallel_producer(s, w):
    _tiled(s, w)
    P = w["P"]
    s[P].compute_root()
    pi, pk = s[P].op.axis
    s[P].parallel(pi)
    s[P].vectorize(pk)


def _inline(s, w):
    io, jo, ko, ii, ki, ji = _tiled(s, w)
    s[w["P"]].compute_inline()
    s[w["C"]].unroll(ki)


def _inline_then_root(s, w):
    s[w["P"]].compute_inline()
    s[w["P"]].compute_root()
    _tiled(s, w)


def _at_untiled_reduction_loop(s, w):
    C = w["C"]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    s[C].reorder(i, k, j)
    s[w["P"]].compute_at(s[C], k)


SCALED = {
    "default": lambda s, w: None,
    "at_outer_io": _at("io"),
    "at_jo": _at("jo"),
    "at_middle_ko": _at("ko"),
    "at_ii": _at("ii"),
    "at_ki": _at("ki"),
    "at_innermost_ji": _at("ji"),
    "at_ko_with_producer_schedule": _at_with_producer_schedule,
    "root_parallel_producer": _root_parallel_producer,
    "inline": _inline,
    "inline_then_root": _inline_then_root,
    "at_untiled_reduction_loop": _at_untiled_reduction_loop,
}


@pytest.mark.parametrize("name", SCALED)
@pytest.mark.slow
def test_matmul_with_producer(name):
    w = matmul_scaled(37, 53, 29)
    s = w.schedule()
    SCALED[name](s, w)
    w.check(s)


# ---- int8 -> int32 dot product --------------------------------------------------------------

def _int8_dot(N=37, M=53, K=101):
    A = lt.placeholder((N, K), "int8", name="A")
    B = lt.placeholder((M, K), "int8", name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k].astype("int32") * B[j, k].astype("int32"),
                                               axis=k), name="C")
    return A, B, C


def _i8_tiled(s, C):
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 16)
    ko, ki = s[C].split(k, factor=8)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].unroll(ki)
    s[C].parallel(io)


def _i8_k_inner(s, C):
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, nparts=7)
    s[C].reorder(i, j, ko, ki)
    s[C].unroll(ki)
    s[C].parallel(s[C].fuse(i, j))


INT8 = {"default": lambda s, C: None, "tiled": _i8_tiled, "k_inner_fused": _i8_k_inner}


@pytest.mark.parametrize("name", INT8)
def test_int8_dot_product_accumulates_in_int32(name):
    A, B, C = _int8_dot()
    assert C.dtype == "int32"
    s = lt.create_schedule(C)
    INT8[name](s, C)
    rng = np.random.default_rng(8)
    a = rand(rng, (37, 101), "int8", -128, 127)
    b = rand(rng, (53, 101), "int8", -128, 127)
    a[0, :] = -128          # the extreme products must not overflow int32 accumulation
    b[0, :] = -128
    want = a.astype(np.int32) @ b.astype(np.int32).T
    run_check(s, [A, B, C], {"A": a, "B": b}, {"C": want})
