"""Tail specialisation (schedule/passes/partition.py): when a split's last tile is the only
partial one, its branch runs with the loop variable known, so its extents are constants."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.lang.expr import BinKind, BinOp, Const, Var
from looptune.schedule.passes.partition import MAX_TAIL_SCAN, _only_failure
from looptune.schedule.stmt import EMPTY, For, ForKind


def _scaled(shape):
    A = lt.placeholder(shape, name="A")
    if len(shape) == 1:
        C = lt.compute(shape, lambda i: A[i] * 2.0 + 1.0, name="C")
    else:
        C = lt.compute(shape, lambda i, j: A[i, j] * 2.0 + 1.0, name="C")
    return A, C


def test_the_last_partial_tile_gets_a_constant_extent():
    A, C = _scaled((10, 37))
    s = lt.create_schedule(C)
    _, j = s[C].op.axis
    _, ji = s[C].split(j, factor=16)
    s[C].vectorize(ji)
    text = str(lt.lower(s, [A, C]))
    assert "for j.inner in [0, 16) vectorized:" in text
    assert "for j.inner in [0, 5) vectorized:" in text        # 37 = 2 * 16 + 5
    assert "(37 - (j.outer * 16))" not in text.split("else:")[1]
    assert "(j.inner + 32)" in text                           # j.outer = 2 there


def test_symbolic_extents_keep_the_general_tail():
    n = lt.var("n")
    A, C = _scaled((n,))
    s = lt.create_schedule(C)
    _, ji = s[C].split(s[C].op.axis[0], factor=8)
    s[C].vectorize(ji)
    text = str(lt.lower(s, [A, C]))
    assert "for i.inner in [0, min(8, (n - (i.outer * 8)))) vectorized:" in text
    mod = lt.build(s, [A, C])
    for size in (1, 7, 8, 9, 30):
        a = np.arange(size, dtype="float32")
        c = np.full_like(a, np.nan)
        mod(a, c)
        np.testing.assert_array_equal(c, a * 2 + 1)


def _loop(extent):
    return For(Var("io", "int32"), Const(0, "int32"), Const(extent, "int32"), ForKind.SERIAL,
               EMPTY)


def test_only_failure_finds_the_one_iteration_or_none():
    loop = _loop(4)
    io = loop.var
    full = BinOp(BinKind.LE, Const(16, "int32"), Const(56, "int32") - io * 16)
    assert _only_failure(full, loop).value == 3
    # fails at io = 0 and io = 3: two tails, no specialisation
    both = BinOp(BinKind.AND, BinOp(BinKind.LE, Const(1, "int32"), io), full)
    assert _only_failure(both, loop) is None
    # never fails: nothing to specialise
    assert _only_failure(BinOp(BinKind.LE, Const(0, "int32"), io), loop) is None
    # reads another variable
    n = Var("n", "int32")
    assert _only_failure(BinOp(BinKind.LE, Const(16, "int32"), n - io * 16), loop) is None
    # too long to scan
    long = _loop(MAX_TAIL_SCAN + 1)
    cond = BinOp(BinKind.LE, Const(16, "int32"), Const(16 * MAX_TAIL_SCAN + 3, "int32")
                 - long.var * 16)
    assert _only_failure(cond, long) is None


CASES = list(range(40))


@pytest.mark.parametrize("seed", CASES)
def test_random_tiles_with_tails_are_exact(seed):
    """2-D tiles at random sizes and factors (tails on both axes), inner loops vectorized or
    unrolled, a producer computed at the outer tile loop; against numpy."""
    rng = np.random.default_rng(7100 + seed)
    H, W = (int(x) for x in rng.integers(1, 70, size=2))
    fy, fx = (int(x) for x in rng.integers(1, 18, size=2))
    A = lt.placeholder((H, W), name="A")
    B = lt.compute((H, W), lambda i, j: A[i, j] * 3.0, name="B")
    C = lt.compute((H, W), lambda i, j: B[i, j] + B[i, W - 1 - j], name="C")
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, fy, fx)
    kind = rng.integers(3)
    if kind == 0:
        s[C].vectorize(ji)
    elif kind == 1:
        s[C].unroll(ji)
    if rng.integers(2):
        s[C].parallel(io)
    if rng.integers(2):
        s[B].compute_at(s[C], io)
    mod = lt.build(s, [A, C])
    a = rng.standard_normal((H, W)).astype("float32")
    c = np.full_like(a, np.nan)
    mod(a, c)
    b = a * 3.0
    np.testing.assert_allclose(c, b + b[:, ::-1], rtol=1e-6)
