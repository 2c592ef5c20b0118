"""The simplifier: random integer expressions keep their value at every point of small ranges;
constant bounds are sound; the documented rewrite rules fire."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from util import eval_int, random_int_expr

import looptune as lt
from looptune.lang.expr import BinKind, BinOp, Const, Var
from looptune.lang.simplify import const_bound, simplify, upper_bound
from looptune.lang.visitor import substitute

X, Y, Z = Var("x"), Var("y"), Var("z")
RANGES = {X: (-5, 6), Y: (0, 7), Z: (-3, 2)}
POINTS = [dict(zip((X, Y, Z), p)) for p in itertools.product(
    *(range(lo, hi + 1) for lo, hi in RANGES.values()))]


def _values(e, points=POINTS) -> list:
    return [eval_int(e, p) for p in points]


def _exprs(seed: int, n: int, depth: int = 4):
    rng = np.random.default_rng(seed)
    return [random_int_expr(rng, [X, Y, Z], depth) for _ in range(n)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.slow
def test_random_expressions_keep_their_value_with_ranges(seed):
    for e in _exprs(seed, 120):
        s = simplify(e, RANGES)
        assert s.dtype == e.dtype
        assert _values(s) == _values(e), f"simplify({e}, ranges) = {s} changes the value"


@pytest.mark.parametrize("seed", range(4, 7))
@pytest.mark.slow
def test_random_expressions_keep_their_value_without_ranges(seed):
    for e in _exprs(seed, 120):
        s = simplify(e)
        assert _values(s) == _values(e), f"simplify({e}) = {s} changes the value"


@pytest.mark.parametrize("seed", range(7, 9))
def test_simplify_is_idempotent_in_value(seed):
    for e in _exprs(seed, 80):
        s1 = simplify(e, RANGES)
        s2 = simplify(s1, RANGES)
        assert _values(s2) == _values(e), f"simplify twice of {e}: {s1} then {s2}"


@pytest.mark.parametrize("seed", range(9, 12))
@pytest.mark.slow
def test_const_bound_is_sound(seed):
    for e in _exprs(seed, 120):
        vals = _values(e)
        lo, hi = const_bound(e, RANGES)
        assert lo is None or lo <= min(vals), f"const_bound({e}) low {lo} > {min(vals)}"
        assert hi is None or hi >= max(vals), f"const_bound({e}) high {hi} < {max(vals)}"
        ub = upper_bound(e, RANGES)
        assert ub is None or ub >= max(vals), f"upper_bound({e}) = {ub} < {max(vals)}"


@pytest.mark.parametrize("seed", range(12, 14))
def test_substituted_constants_fold_to_the_value(seed):
    """substitute Consts for every variable, then simplify folds to the exact value."""
    pts = POINTS[::37]
    for e in _exprs(seed, 40, depth=3):
        for p in pts:
            folded = simplify(substitute(e, {v: lt.const(x, "int32") for v, x in p.items()}))
            assert isinstance(folded, Const) and folded.value == eval_int(e, p), \
                f"{e} at {p}: folded to {folded}, expected {eval_int(e, p)}"


@pytest.mark.slow
def test_comparisons_and_selects_keep_their_value():
    rng = np.random.default_rng(99)
    for _ in range(150):
        a = random_int_expr(rng, [X, Y, Z], 3)
        b = random_int_expr(rng, [X, Y, Z], 3)
        kind = [BinKind.LT, BinKind.LE, BinKind.EQ, BinKind.NE][rng.integers(4)]
        cond = BinOp(kind, a, b)
        e = lt.if_then_else(cond & (X < 3) | ~(Y < Z), a, b)
        s = simplify(e, RANGES)
        assert _values(s) == _values(e), f"simplify({e}) = {s} changes the value"


# ---- documented rules ----------------------------------------------------------------------

def test_mul_one_and_add_zero():
    assert simplify(X * 1) == X                      # x*1 -> x
    assert simplify(1 * X) == X                      # 1*x -> x
    assert simplify(X + 0) == X                      # x+0 -> x
    assert simplify(0 + X) == X
    assert simplify(X - 0) == X
    assert simplify(X * 0) == Const(0, "int32")
    assert simplify(X - X) == Const(0, "int32")


def test_float_identities():
    f = Var("f", "float32")
    assert simplify(f * 1.0) == f
    assert simplify(1.0 * f) == f
    assert simplify(f / 1.0) == f
    assert simplify(f - 0.0) == f


def test_constant_folding_has_floor_semantics():
    c = lambda v: lt.const(v, "int32")  # noqa: E731
    assert simplify(c(-7) // c(2)) == c(-4)
    assert simplify(c(-7) % c(2)) == c(1)
    assert simplify(c(7) % c(-2)) == c(-1)
    assert simplify(c(7) // c(-2)) == c(-4)
    assert simplify(lt.min(c(3), c(-2))) == c(-2)


def test_mul_then_floordiv_cancels():
    assert simplify((X * 4) // 4) == X               # (a*c)//c -> a
    assert simplify((Y * 8) % 8) == Const(0, "int32")
    assert simplify((X * 6 + 3) // 3) == simplify(X * 2 + 1)


def test_div_mod_recombine():
    assert simplify((X // 8) * 8 + X % 8) == X       # (x//c)*c + x%c -> x
    assert simplify(X % 8 + (X // 8) * 8) == X
    assert simplify(((X + Y) // 5) * 5 + (X + Y) % 5) == simplify(X + Y)


def test_split_index_recovers_outer_and_inner():
    io, ii = Var("io"), Var("ii")
    ranges = {io: (0, 9), ii: (0, 31)}
    assert simplify((io * 32 + ii) // 32, ranges) == io   # (io*32+ii)//32 -> io
    assert simplify((io * 32 + ii) % 32, ranges) == ii    # (io*32+ii)%32 -> ii
    assert simplify(ii // 32, ranges) == Const(0, "int32")
    assert simplify(ii % 32, ranges) == ii


def test_split_index_without_ranges_keeps_its_value():
    """Without ii's range, ``(io*32 + ii) // 32`` must not become io (ii may exceed 31)."""
    io, ii = Var("io"), Var("ii")
    s = simplify((io * 32 + ii) // 32)
    assert eval_int(s, {io: 1, ii: 40}) == 2
    assert eval_int(s, {io: 1, ii: -1}) == 0


def test_affine_terms_cancel():
    io, ii = Var("io"), Var("ii")
    assert simplify(io * 32 + ii - io * 32) == ii
    assert simplify((X + 3) - (X + 1)) == Const(2, "int32")


def test_minmax_with_ranges():
    ranges = {Y: (0, 7)}
    assert simplify(lt.min(Y, 8), ranges) == Y
    assert simplify(lt.max(Y, 0), ranges) == Y
    assert simplify(lt.min(Y, Y)) == Y


def test_compare_with_ranges():
    ranges = {Y: (0, 7)}
    assert simplify(Y < 8, ranges) == Const(True, "bool")
    assert simplify(Y < 0, ranges) == Const(False, "bool")
    assert simplify(lt.if_then_else(Y >= 0, Y, Y + 1), ranges) == Y


def test_const_bound_of_a_split_index():
    io, ii = Var("io"), Var("ii")
    assert const_bound(io * 8 + ii, {io: (0, 4), ii: (0, 7)}) == (0, 39)
    assert const_bound(X % 5, {}) == (0, 4)
    assert const_bound(Y // 3, RANGES) == (0, 2)
    assert const_bound(X, {}) == (None, None)


def test_simplify_returns_same_object_when_nothing_changes():
    f = Var("f", "float32")
    e = lt.exp(f) + f
    assert simplify(e) is e


def test_data_arithmetic_wraps_like_numpy():
    """Constants in non-index dtypes fold with numpy's wrap-around."""
    a = lt.const(100, "int8")
    assert simplify(a + a) == Const(np.int8(-56).item(), "int8")
    assert simplify(lt.const(250, "uint8") + lt.const(10, "uint8")) == Const(4, "uint8")
