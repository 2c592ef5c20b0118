"""Elementwise stages: index arithmetic with // and % (reshapes, flips, rolls, negative offsets
guarded by if_then_else), an elementwise chain with a broadcast, and symbolic sizes bound at
call time. Default schedule and hand schedules; differential against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from util import chain, rand, run_check

import looptune as lt

N, M = 37, 53


# ---- index arithmetic ----------------------------------------------------------------------

def _index_ops():
    X = lt.placeholder((N, M), "float32", name="X")
    flat = lt.compute((N * M,), lambda t: X[t // M, t % M], name="flat")
    back = lt.compute((M, N), lambda a, b: flat[a * N + b], name="back")     # reshape (M, N)
    flip = lt.compute((N, M), lambda i, j: X[N - 1 - i, M - 1 - j], name="flip")
    diff = lt.compute((N, M), lambda i, j: X[i, j] - lt.if_then_else(
        lt.all(i >= 1, j >= 1), X[i - 1, j - 1], 0.0), name="diff")
    roll = lt.compute((N, M), lambda i, j: X[i, (j - 5) % M], name="roll")
    q = lambda i: (i - 7) // 3  # noqa: E731 - negative numerators: floor, not truncation
    down = lt.compute((N, M), lambda i, j: lt.if_then_else(q(i) >= 0, X[q(i), j],
                                                            X[q(i) + 3, j] * -1.0), name="down")
    outs = [back, flip, diff, roll, down]
    return X, flat, outs


def _index_reference(x):
    d = np.zeros_like(x, dtype=np.float64)
    d[1:, 1:] = x[:-1, :-1]
    q = (np.arange(N) - 7) // 3
    down = np.where((q >= 0)[:, None], x[np.maximum(q, 0)], -x[np.where(q < 0, q + 3, 0)])
    return {"back": x.reshape(M, N), "flip": x[::-1, ::-1], "diff": x - d,
            "roll": np.roll(x, 5, axis=1), "down": down}


def _idx_split_vec(s, flat, outs):
    for t in outs:
        a, b = s[t].op.axis
        bo, bi = s[t].split(b, factor=8)
        s[t].vectorize(bi)
        s[t].parallel(a)


def _idx_fused(s, flat, outs):
    for t in outs:
        a, b = s[t].op.axis
        f = s[t].fuse(a, b)
        fo, fi = s[t].split(f, nparts=7)
        s[t].parallel(fo)


def _idx_flat_at_rows(s, flat, outs):
    back = outs[0]
    a, b = s[back].op.axis
    s[flat].compute_at(s[back], a)       # one row of back is a contiguous run of flat
    (t,) = s[flat].op.axis
    to, ti = s[flat].split(t, factor=4)
    s[flat].vectorize(ti)


def _idx_flat_at_inner(s, flat, outs):
    back = outs[0]
    a, b = s[back].op.axis
    bo, bi = s[back].split(b, factor=6)
    s[flat].compute_at(s[back], bi)


def _idx_flat_inline(s, flat, outs):
    s[flat].compute_inline()
    _idx_split_vec(s, flat, outs)


def _idx_tiles(s, flat, outs):
    for t in outs:
        a, b = s[t].op.axis
        ao, bo, ai, bi = s[t].tile(a, b, 5, 7)
        s[t].unroll(bi)


INDEX = {
    "default": lambda s, f, o: None,
    "split_vec_par": _idx_split_vec,
    "fused_nparts": _idx_fused,
    "flat_at_rows": _idx_flat_at_rows,
    "flat_at_innermost": _idx_flat_at_inner,
    "flat_inline": _idx_flat_inline,
    "tiles_unrolled": _idx_tiles,
}


@pytest.mark.parametrize("name", INDEX)
@pytest.mark.slow
def test_index_arithmetic(name):
    X, flat, outs = _index_ops()
    s = lt.create_schedule(outs)
    INDEX[name](s, flat, outs)
    x = rand(np.random.default_rng(21), (N, M))
    run_check(s, [X, *outs], {"X": x}, _index_reference(x.astype(np.float64)))


def test_flat_stage_as_an_output():
    X, flat, outs = _index_ops()
    s = lt.create_schedule([flat, outs[0]])
    (t,) = s[flat].op.axis
    to, ti = s[flat].split(t, factor=16)
    s[flat].vectorize(ti)
    x = rand(np.random.default_rng(22), (N, M))
    run_check(s, [X, flat, outs[0]], {"X": x}, {"flat": x.ravel(), "back": x.reshape(M, N)})


# ---- an elementwise chain ----------------------------------------------------------------

def _ch_inline_all(s, w):
    s[w["B1"]].compute_inline()
    s[w["B2"]].compute_inline()
    i, j = s[w["D"]].op.axis
    jo, ji = s[w["D"]].split(j, factor=16)
    s[w["D"]].vectorize(ji)
    s[w["D"]].parallel(i)


def _ch_at(level):
    def sched(s, w):
        D = w["D"]
        i, j = s[D].op.axis
        io, jo, ii, ji = s[D].tile(i, j, 4, 8)
        loops = {"io": io, "jo": jo, "ii": ii, "ji": ji}
        s[w["B2"]].compute_at(s[D], loops[level])
        s[w["B1"]].compute_at(s[D], loops[level])
    return sched


def _ch_nested_at(s, w):
    """B1 at a loop of B2, which is at a loop of D."""
    D, B2, B1 = w["D"], w["B2"], w["B1"]
    i, j = s[D].op.axis
    io, ii = s[D].split(i, factor=4)
    s[B2].compute_at(s[D], io)
    bi, bj = s[B2].op.axis
    s[B1].compute_at(s[B2], bi)
    s[B2].vectorize(bj)
    s[D].parallel(io)


def _ch_mixed(s, w):
    D, B2, B1 = w["D"], w["B2"], w["B1"]
    s[B1].compute_inline()
    i, j = s[D].op.axis
    jo, ji = s[D].split(j, nparts=3)
    s[D].reorder(jo, i, ji)
    s[B2].compute_at(s[D], i)
    s[D].vectorize(ji)


def _ch_root(s, w):
    for name in ("B1", "B2"):
        t = w[name]
        s[t].compute_root()
        i, j = s[t].op.axis
        s[t].parallel(s[t].fuse(i, j))


CHAIN = {
    "default": lambda s, w: None,
    "inline_all": _ch_inline_all,
    "at_outer_io": _ch_at("io"),
    "at_middle_jo": _ch_at("jo"),
    "at_ii": _ch_at("ii"),
    "at_innermost_ji": _ch_at("ji"),
    "nested_at": _ch_nested_at,
    "mixed": _ch_mixed,
    "root_fused_parallel": _ch_root,
}


@pytest.mark.parametrize("name", CHAIN)
@pytest.mark.slow
def test_elementwise_chain(name):
    w = chain(N, M)
    s = w.schedule()
    CHAIN[name](s, w)
    w.check(s)


def test_heap_buffer_inside_a_parallel_loop():
    """A compute_at buffer larger than the stack limit (64 KiB) lives on the heap, one per
    iteration of a parallel loop, and is freed on every path."""
    w = chain(300, 301)
    s = w.schedule()
    D, B2 = w["D"], w["B2"]
    i, j = s[D].op.axis
    io, ii = s[D].split(i, factor=64)          # 64 x 301 float32 = 77 KB; 300 = 4*64 + 44
    s[D].parallel(io)
    s[B2].compute_at(s[D], io)
    s[w["B1"]].compute_inline()
    f = w.check(s)
    assert "lt_alloc" in f.source and "free(" in f.source


# ---- symbolic sizes ------------------------------------------------------------------------

def _vadd():
    n = lt.var("n")
    X = lt.placeholder((n,), "float32", name="X")
    Y = lt.placeholder((n,), "float32", name="Y")
    Z = lt.compute((n,), lambda i: X[i] + Y[i] * 2.0, name="Z")
    return n, X, Y, Z


def _v_split_vec(s, Z):
    io, ii = s[Z].split(s[Z].op.axis[0], factor=8)
    s[Z].vectorize(ii)


def _v_nparts_par(s, Z):
    io, ii = s[Z].split(s[Z].op.axis[0], nparts=4)
    s[Z].parallel(io)
    iio, iii = s[Z].split(ii, factor=3)
    s[Z].unroll(iii)


VADD = {"default": lambda s, Z: None, "split_vec": _v_split_vec, "nparts_par": _v_nparts_par}


@pytest.mark.parametrize("name", VADD)
def test_symbolic_vector_add_called_with_several_sizes(name):
    n, X, Y, Z = _vadd()
    s = lt.create_schedule(Z)
    VADD[name](s, Z)
    f = lt.build(s, [X, Y, Z])
    rng = np.random.default_rng(23)
    for size in (1, 2, 7, 8, 37, 101, 1000):
        x, y = rand(rng, (size,)), rand(rng, (size,))
        run_check(s, [X, Y, Z], {"X": x, "Y": y}, {"Z": x.astype(np.float64) + 2.0 * y}, f=f)


def _sym2d():
    n, m = lt.var("n"), lt.var("m")
    X = lt.placeholder((n, m), "float32", name="X")
    B = lt.compute((n, m), lambda i, j: X[i, j] * 3.0, name="B")
    C = lt.compute((n, m), lambda i, j: B[i, j] + B[n - 1 - i, m - 1 - j], name="C")
    k = lt.reduce_axis(m, name="k")
    S = lt.compute((n,), lambda i: lt.sum(C[i, k], axis=k), name="S")
    return X, B, C, S


def _s2_tiled(s, X, B, C, S):
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    s[C].vectorize(ji)
    s[C].parallel(io)
    (k,) = s[S].op.reduce_axis
    ko, ki = s[S].split(k, factor=5)
    s[S].unroll(ki)


def _s2_at(s, X, B, C, S):
    (si,) = s[S].op.axis
    s[C].compute_at(s[S], si)
    s[B].compute_inline()
    (k,) = s[S].op.reduce_axis
    ko, ki = s[S].split(k, nparts=2)


SYM2 = {"default": lambda *a: None, "tiled": _s2_tiled, "at_row": _s2_at}


@pytest.mark.parametrize("name", SYM2)
def test_symbolic_2d_stages(name):
    X, B, C, S = _sym2d()
    outs = [S] if name == "at_row" else [C, S]     # an output cannot be computed at
    s = lt.create_schedule(outs)
    SYM2[name](s, X, B, C, S)
    f = lt.build(s, [X, *outs])
    rng = np.random.default_rng(24)
    for shape in ((1, 1), (3, 17), (37, 5), (10, 64)):
        x = rand(rng, shape).astype(np.float64)
        c = 3 * x + 3 * x[::-1, ::-1]
        run_check(s, [X, *outs], {"X": x.astype(np.float32)}, {"C": c, "S": c.sum(axis=1)},
                  f=f)
