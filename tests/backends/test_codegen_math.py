"""Math intrinsics, casts and dtypes through the C backend, against numpy: every function under
the default schedule and a split/vectorize/parallel schedule, on odd sizes, with broadcasts."""
from __future__ import annotations

import math

import numpy as np
import pytest
from util import rand, run_check

import looptune as lt

N, M = 37, 53
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _halves(rng, shape):
    """Values k/2 (exact in float32): exercises round's half-to-even rule."""
    return (rng.integers(-41, 42, size=shape) / 2.0).astype(np.float32)


# name -> (looptune function of two placeholders' loads, numpy reference, input generator)
UNARY = {
    "exp": (lt.exp, np.exp, lambda r, s: rand(r, s, lo=-5, hi=5)),
    "log": (lt.log, np.log, lambda r, s: rand(r, s, lo=1e-3, hi=50)),
    "log2": (lt.log2, np.log2, lambda r, s: rand(r, s, lo=1e-3, hi=50)),
    "log1p": (lt.log1p, np.log1p, lambda r, s: rand(r, s, lo=-0.5, hi=10)),
    "sqrt": (lt.sqrt, np.sqrt, lambda r, s: rand(r, s, lo=0, hi=100)),
    "rsqrt": (lt.rsqrt, lambda x: 1.0 / np.sqrt(x), lambda r, s: rand(r, s, lo=0.01, hi=100)),
    "sin": (lt.sin, np.sin, lambda r, s: rand(r, s, lo=-6, hi=6)),
    "cos": (lt.cos, np.cos, lambda r, s: rand(r, s, lo=-6, hi=6)),
    "tanh": (lt.tanh, np.tanh, lambda r, s: rand(r, s, lo=-6, hi=6)),
    "sigmoid": (lt.sigmoid, lambda x: 1.0 / (1.0 + np.exp(-x)),
                lambda r, s: rand(r, s, lo=-20, hi=20)),
    "erf": (lt.erf, _erf, lambda r, s: rand(r, s, lo=-3, hi=3)),
    "floor": (lt.floor, np.floor, lambda r, s: rand(r, s, lo=-10, hi=10)),
    "ceil": (lt.ceil, np.ceil, lambda r, s: rand(r, s, lo=-10, hi=10)),
    "trunc": (lt.trunc, np.trunc, lambda r, s: rand(r, s, lo=-10, hi=10)),
    "round_half_even": (lt.round, np.round, _halves),
    "abs": (abs, np.abs, lambda r, s: rand(r, s, lo=-10, hi=10)),
    "fabs": (lt.fabs, np.abs, lambda r, s: rand(r, s, lo=-10, hi=10)),
    "neg": (lambda x: -x, np.negative, lambda r, s: rand(r, s)),
    "pow_const": (lambda x: lt.pow(x, 2.5), lambda x: np.power(x, 2.5),
                  lambda r, s: rand(r, s, lo=0, hi=4)),
    "square_operator": (lambda x: x ** 2, np.square, lambda r, s: rand(r, s, lo=-4, hi=4)),
}


def _vec_par(s, T):
    i, j = s[T].op.axis
    jo, ji = s[T].split(j, factor=8)
    s[T].vectorize(ji)
    s[T].parallel(i)


@pytest.mark.parametrize("scheduled", [False, True], ids=["default", "vec_par"])
@pytest.mark.parametrize("fname", UNARY)
def test_unary_math(fname, scheduled):
    fn, ref, gen = UNARY[fname]
    X = lt.placeholder((N, M), "float32", name="X")
    Y = lt.compute((N, M), lambda i, j: fn(X[i, j]), name="Y")
    assert Y.dtype == "float32"
    s = lt.create_schedule(Y)
    if scheduled:
        _vec_par(s, Y)
    x = gen(np.random.default_rng(len(fname)), (N, M))
    exact = fname in ("floor", "ceil", "trunc", "round_half_even", "abs", "fabs", "neg")
    want = ref(x) if exact else ref(x.astype(np.float64))
    run_check(s, [X, Y], {"X": x}, {"Y": want}, rtol=0 if exact else 2e-5,
              atol=0 if exact else 1e-6)


def test_round_is_half_to_even():
    X = lt.placeholder((8,), "float32", name="X")
    Y = lt.compute((8,), lambda i: lt.round(X[i]), name="Y")
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 0.49999997], np.float32)
    run_check(lt.create_schedule(Y), [X, Y], {"X": x},
              {"Y": np.array([0, 2, 2, -0, -2, -2, 4, 0], np.float32)}, rtol=0, atol=0)


@pytest.mark.parametrize("scheduled", [False, True], ids=["default", "vec_par"])
def test_binary_math_with_broadcast(scheduled):
    """Row and column vectors broadcast against a matrix; pow, max, min, division."""
    X = lt.placeholder((N, M), "float32", name="X")
    row = lt.placeholder((M,), "float32", name="row")
    col = lt.placeholder((N, 1), "float32", name="col")
    Y = lt.compute((N, M), lambda i, j: lt.pow(X[i, j], row[j]) * col[i, 0]
                   + lt.max(X[i, j], row[j]) - lt.min(col[i, 0], 0.25) / (row[j] + 2.0),
                   name="Y")
    s = lt.create_schedule(Y)
    if scheduled:
        _vec_par(s, Y)
    rng = np.random.default_rng(11)
    x, r, c = rand(rng, (N, M), lo=0.1, hi=3), rand(rng, (M,), lo=-2, hi=2), rand(rng, (N, 1))
    x64, r64, c64 = (a.astype(np.float64) for a in (x, r, c))
    want = np.power(x64, r64) * c64 + np.maximum(x64, r64) - np.minimum(c64, 0.25) / (r64 + 2)
    run_check(s, [X, row, col, Y], {"X": x, "row": r, "col": c}, {"Y": want}, rtol=1e-4,
              atol=1e-5)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_float64_math_and_mixed_precision(dtype):
    X = lt.placeholder((N,), dtype, name="X")
    D = lt.placeholder((N,), "float64", name="D")
    Y = lt.compute((N,), lambda i: lt.exp(X[i]) * D[i] + lt.sqrt(D[i]) + lt.tanh(X[i]),
                   name="Y")
    assert Y.dtype == "float64"
    rng = np.random.default_rng(12)
    x, d = rand(rng, (N,), dtype, -3, 3), rand(rng, (N,), "float64", 0, 5)
    x64 = x.astype(np.float64)
    want = np.exp(x64) * d + np.sqrt(d) + np.tanh(x64)
    tol = 1e-12 if dtype == "float64" else 1e-6
    run_check(lt.create_schedule(Y), [X, D, Y], {"X": x, "D": d}, {"Y": want}, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16"])
def test_integer_arithmetic_wraps_and_floors_like_numpy(dtype):
    X = lt.placeholder((N,), dtype, name="X")
    Y = lt.placeholder((N,), dtype, name="Y")
    S = lt.compute((N,), lambda i: X[i] * Y[i] + X[i] - Y[i], name="S")
    Q = lt.compute((N,), lambda i: X[i] // Y[i], name="Q")
    R = lt.compute((N,), lambda i: X[i] % Y[i], name="R")
    A = lt.compute((N,), lambda i: abs(X[i]) + X[i] ** 3, name="A")
    Mx = lt.compute((N,), lambda i: lt.max(X[i], Y[i]) - lt.min(X[i], 3), name="Mx")
    s = lt.create_schedule([S, Q, R, A, Mx])
    xo, xi = s[S].split(s[S].op.axis[0], factor=8)
    s[S].vectorize(xi)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(13)
    x = rng.integers(info.min, info.max, size=N, endpoint=True, dtype=dtype)
    y = rng.integers(info.min, info.max, size=N, endpoint=True, dtype=dtype)
    y[y == 0] = 7
    x[:4] = [info.min, info.max, 0, 1][:4] if info.min < 0 else [0, info.max, 1, 2]
    if info.min < 0:
        y[:3] = [-1 if dtype != "int64" else 3, -3, 5]   # avoid min // -1 (overflow in C)
    with np.errstate(over="ignore"):
        want = {"S": x * y + x - y, "Q": x // y, "R": x % y, "A": np.abs(x) + x ** 3,
                "Mx": np.maximum(x, y) - np.minimum(x, np.array(3, dtype))}
    run_check(s, [X, Y, S, Q, R, A, Mx], {"X": x, "Y": y}, want)


def test_casts_between_dtypes():
    X = lt.placeholder((N,), "float32", name="X")
    Ti = lt.compute((N,), lambda i: X[i].astype("int32"), name="I")         # truncation
    U = lt.compute((N,), lambda i: (X[i] * 10.0).astype("int16").astype("uint8"), name="U")
    B = lt.compute((N,), lambda i: lt.cast(X[i] > 0.0, "float32") + 1.0, name="B")
    H = lt.compute((N,), lambda i: (Ti[i] // 2).astype("float64") / 4.0, name="H")
    s = lt.create_schedule([Ti, U, B, H])
    x = rand(np.random.default_rng(14), (N,), lo=-12, hi=12)
    i32 = x.astype(np.int32)
    want = {"I": i32, "U": (x * np.float32(10)).astype(np.int16).astype(np.uint8),
            "B": (x > 0).astype(np.float32) + 1, "H": (i32 // 2).astype(np.float64) / 4}
    run_check(s, [X, Ti, U, B, H], {"X": x}, want)


def test_bool_tensors_and_logic():
    X = lt.placeholder((N,), "float32", name="X")
    P = lt.compute((N,), lambda i: (X[i] > 0.0) & ~(X[i] > 0.5) | lt.equal(i % 5, 0), name="P")
    Q = lt.compute((N,), lambda i: lt.if_then_else(P[i] & lt.not_equal(i, 3), X[i], -X[i]),
                   name="Q")
    C = lt.compute((N,), lambda i: lt.any(X[i] < -0.5, X[i] > 0.5)
                   & ~lt.all(X[i] > 0.9, X[i] < 0.95), name="C")
    s = lt.create_schedule([P, Q, C])
    x = rand(np.random.default_rng(15), (N,))
    idx = np.arange(N)
    p = ((x > 0) & ~(x > 0.5)) | (idx % 5 == 0)
    want = {"P": p, "Q": np.where(p & (idx != 3), x, -x),
            "C": ((x < -0.5) | (x > 0.5)) & ~((x > 0.9) & (x < 0.95))}
    run_check(s, [X, P, Q, C], {"X": x}, want)


def test_sum_of_bools_counts():
    X = lt.placeholder((N, M), "float32", name="X")
    k = lt.reduce_axis(M, name="k")
    C = lt.compute((N,), lambda i: lt.sum(X[i, k] > 0.0, axis=k), name="C")
    assert C.dtype == "int32"
    x = rand(np.random.default_rng(16), (N, M))
    run_check(lt.create_schedule(C), [X, C], {"X": x}, {"C": (x > 0).sum(axis=1)})


def test_int32_overflow_wraps_like_numpy():
    """numpy wraps int32 arithmetic; the generated C must not rely on signed overflow (UB):
    gcc folds ``x + 1 > x`` to true, numpy says False for INT32_MAX."""
    X = lt.placeholder((4,), "int32", name="X")
    Y = lt.compute((4,), lambda i: lt.if_then_else(X[i] + 1 > X[i], 1, 0), name="Y")
    W = lt.compute((4,), lambda i: X[i] * 65536 // 65536, name="W")
    x = np.array([0, 5, 2**31 - 1, -7], np.int32)
    with np.errstate(over="ignore"):
        want = {"Y": np.where(x + np.int32(1) > x, 1, 0).astype(np.int32),
                "W": x * np.int32(65536) // np.int32(65536)}
    run_check(lt.create_schedule([Y, W]), [X, Y, W], {"X": x}, want)


def test_constant_bodies():
    F = lt.compute((5, 3), lambda i, j: 1.5, name="F")
    Ti = lt.compute((7,), lambda i: 4, name="I")
    assert F.dtype == "float32" and Ti.dtype == "int32"
    run_check(lt.create_schedule([F, Ti]), [F, Ti], {},
              {"F": np.full((5, 3), 1.5), "I": np.full(7, 4, np.int32)})
