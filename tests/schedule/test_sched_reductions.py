"""Reductions: softmax in 4 stages, sum with ``where=``, max/min reductions (float and int),
under the default schedule and hand schedules. Differential against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from util import rand, run_check, softmax

import looptune as lt


# ---- softmax -------------------------------------------------------------------------------

def _sm_rows(s, w):
    out = w["softmax"]
    i, j = s[out].op.axis
    return i, j


def _sm_all_at_row(s, w):
    """Every stage computed inside the output's row loop (one row at a time)."""
    i, j = _sm_rows(s, w)
    for name in ("rowmax", "expx", "rowsum"):
        s[w[name]].compute_at(s[w["softmax"]], i)
    s[w["softmax"]].parallel(i)
    s[w["softmax"]].vectorize(j)


def _sm_inline_exp(s, w):
    i, j = _sm_rows(s, w)
    s[w["expx"]].compute_inline()
    s[w["rowmax"]].compute_at(s[w["softmax"]], i)
    s[w["rowsum"]].compute_at(s[w["softmax"]], i)
    jo, ji = s[w["softmax"]].split(j, factor=8)
    s[w["softmax"]].vectorize(ji)


def _sm_row_blocks(s, w):
    """Rows in blocks of 5 (37 = 7*5 + 2): stages at the block loop; split reductions."""
    out = w["softmax"]
    i, j = _sm_rows(s, w)
    io, ii = s[out].split(i, factor=5)
    s[out].parallel(io)
    for name in ("rowmax", "expx", "rowsum"):
        s[w[name]].compute_at(s[out], io)
    mx = w["rowmax"]
    (k1,) = s[mx].op.reduce_axis
    ko, ki = s[mx].split(k1, factor=4)
    s[mx].unroll(ki)
    sm = w["rowsum"]
    (k2,) = s[sm].op.reduce_axis
    k2o, k2i = s[sm].split(k2, nparts=3)
    s[sm].reorder(k2o, s[sm].op.axis[0], k2i)


def _sm_root_scheduled(s, w):
    ex = w["expx"]
    i, j = s[ex].op.axis
    jo, ji = s[ex].split(j, factor=16)
    s[ex].vectorize(ji)
    s[ex].parallel(i)
    mx = w["rowmax"]
    (k1,) = s[mx].op.reduce_axis
    (mi,) = s[mx].op.axis
    s[mx].reorder(k1, mi)
    s[mx].vectorize(mi)
    out = w["softmax"]
    oi, oj = s[out].op.axis
    s[out].parallel(s[out].fuse(oi, oj))


def _sm_exp_at_rowsum(s, w):
    """expx attached to the row sum's loop would leave the divide without it: expx is read by
    rowsum and softmax, so attach it where both run: softmax's row loop, and rowsum there too."""
    i, j = _sm_rows(s, w)
    s[w["rowsum"]].compute_at(s[w["softmax"]], i)
    s[w["expx"]].compute_at(s[w["softmax"]], i)
    ex = w["expx"]
    ei, ej = s[ex].op.axis
    s[ex].vectorize(ej)


SOFTMAX = {
    "default": lambda s, w: None,
    "all_at_row": _sm_all_at_row,
    "inline_exp": _sm_inline_exp,
    "row_blocks": _sm_row_blocks,
    "root_scheduled": _sm_root_scheduled,
    "exp_and_sum_at_row": _sm_exp_at_rowsum,
}


@pytest.mark.parametrize("name", SOFTMAX)
@pytest.mark.slow
def test_softmax(name):
    w = softmax(37, 53)
    s = w.schedule()
    SOFTMAX[name](s, w)
    w.check(s)


# ---- sum with where= -----------------------------------------------------------------------

def _masked(N=37, M=53):
    X = lt.placeholder((N, M), "float32", name="X")
    k = lt.reduce_axis(M, name="k")
    tri = lt.compute((N,), lambda i: lt.sum(X[i, k], axis=k, where=k <= i), name="tri")
    k2 = lt.reduce_axis(M, name="k2")
    pos = lt.compute((N,), lambda i: lt.sum(X[i, k2] * X[i, k2], axis=k2,
                                            where=(X[i, k2] > 0.0) & lt.not_equal(k2 % 3, 0)),
                     name="pos")
    return X, tri, pos


def _where_reference(x):
    n, m = x.shape
    x = x.astype(np.float64)
    tri = np.array([x[i, :min(i + 1, m)].sum() for i in range(n)])
    mask = (x > 0) & (np.arange(m) % 3 != 0)
    pos = np.where(mask, x * x, 0.0).sum(axis=1)
    return {"tri": tri, "pos": pos}


def _where_split(s, tri, pos):
    for t in (tri, pos):
        (k,) = s[t].op.reduce_axis
        (i,) = s[t].op.axis
        ko, ki = s[t].split(k, factor=8)
        io, ii = s[t].split(i, factor=6)
        s[t].reorder(io, ko, ii, ki)
        s[t].unroll(ki)
        s[t].vectorize(ii)
        s[t].parallel(io)


def _where_k_outer(s, tri, pos):
    for t in (tri, pos):
        (k,) = s[t].op.reduce_axis
        (i,) = s[t].op.axis
        ko, ki = s[t].split(k, nparts=4)
        s[t].reorder(ko, ki, i)
        s[t].vectorize(i)


WHERE = {"default": lambda s, a, b: None, "split": _where_split, "k_outer": _where_k_outer}


@pytest.mark.parametrize("name", WHERE)
def test_sum_where(name):
    X, tri, pos = _masked()
    s = lt.create_schedule([tri, pos])
    WHERE[name](s, tri, pos)
    x = rand(np.random.default_rng(3), (37, 53))
    run_check(s, [X, tri, pos], {"X": x}, _where_reference(x))


def test_sum_where_never_true_gives_identity():
    X = lt.placeholder((7, 9), "float32", name="X")
    k = lt.reduce_axis(9, name="k")
    S = lt.compute((7,), lambda i: lt.sum(X[i, k], axis=k, where=k > 100), name="S")
    P = lt.compute((7,), lambda i: lt.prod(X[i, k] + 2.0, axis=k, where=k < 0), name="P")
    s = lt.create_schedule([S, P])
    x = rand(np.random.default_rng(4), (7, 9))
    run_check(s, [X, S, P], {"X": x}, {"S": np.zeros(7), "P": np.ones(7)})


# ---- max / min reductions --------------------------------------------------------------------

def _minmax(dtype, N=37, M=53):
    X = lt.placeholder((N, M), dtype, name="X")
    k = lt.reduce_axis(M, name="k")
    rmax = lt.compute((N,), lambda i: lt.max(X[i, k], axis=k), name="rmax")
    r = lt.reduce_axis(N, name="r")
    cmin = lt.compute((M,), lambda j: lt.min(X[r, j], axis=r), name="cmin")
    k3 = lt.reduce_axis((3, M - 2), name="k3")
    pmax = lt.compute((N,), lambda i: lt.max(X[i, k3] * 2, axis=k3, where=lt.equal(k3 % 2, 1)),
                      name="pmax")
    return X, rmax, cmin, pmax


def _mm_sched(s, X, rmax, cmin, pmax):
    (i,) = s[rmax].op.axis
    (k,) = s[rmax].op.reduce_axis
    ko, ki = s[rmax].split(k, factor=6)
    s[rmax].reorder(ko, i, ki)
    s[rmax].unroll(ki)
    (j,) = s[cmin].op.axis
    (r,) = s[cmin].op.reduce_axis
    s[cmin].reorder(r, j)
    jo, ji = s[cmin].split(j, factor=16)
    s[cmin].vectorize(ji)
    (pi,) = s[pmax].op.axis
    (k3,) = s[pmax].op.reduce_axis
    k3o, k3i = s[pmax].split(k3, factor=5)
    s[pmax].parallel(pi)


@pytest.mark.parametrize("dtype", ["float32", "int16", "uint8"])
@pytest.mark.parametrize("scheduled", [False, True], ids=["default", "scheduled"])
def test_max_min_reductions(dtype, scheduled):
    X, rmax, cmin, pmax = _minmax(dtype)
    s = lt.create_schedule([rmax, cmin, pmax])
    if scheduled:
        _mm_sched(s, X, rmax, cmin, pmax)
    rng = np.random.default_rng(5)
    if dtype == "float32":
        x = rand(rng, (37, 53), dtype, -100.0, -1.0)   # all negative: the identity is not 0
    elif dtype == "int16":
        x = rand(rng, (37, 53), dtype, -30000, -5)
    else:
        x = rand(rng, (37, 53), dtype, 10, 120)        # max(x*2) wraps nowhere below 255
    wide = x.astype(np.float64) if dtype == "float32" else x
    sub = (wide[:, 3:51] * 2)[:, [t % 2 == 1 for t in range(3, 51)]]   # k3 in range(3, 51)
    want = {"rmax": wide.max(axis=1), "cmin": wide.min(axis=0),
            "pmax": sub.max(axis=1).astype(dtype) if dtype != "float32" else sub.max(axis=1)}
    run_check(s, [X, rmax, cmin, pmax], {"X": x}, want)
