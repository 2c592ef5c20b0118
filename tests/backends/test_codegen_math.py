"""Math intrinsics, casts and dtypes through the C backend, against numpy: every function under
the default schedule and a split/vectorize/parallel schedule, on odd sizes, with broadcasts."""
from __future__ import annotations

import math
import re
import subprocess

import numpy as np
import pytest
from util import ALIVE, rand, run_check, softmax

import looptune as lt
from looptune.backends.compiler import flags_for, predefined_macros

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
@pytest.mark.slow
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


# ---- the inlined float32 exp (backends/c_math.py) -------------------------------------------

F32_MAX_ULP = 1.03      # the documented bound of lt_expf (backends/c_math.py)
AVX2 = "c -march=x86-64-v3"


def _need_avx2() -> None:
    """Skip on a machine that cannot run AVX2 + FMA code (the x86-64-v3 lanes tests run it)."""
    macros = predefined_macros("gcc", "native")
    if not {"__AVX2__", "__FMA__"} <= macros:
        pytest.skip("this CPU runs no AVX2 + FMA code (gcc -march=native defines neither)")


def _map_kernel(n: int, fn, name: str, target: str = "c"):
    """Y[i] = fn(X[i]) over n float32s, vectorized 64 at a time."""
    X = lt.placeholder((n,), "float32", name="X")
    Y = lt.compute((n,), lambda i: fn(X[i]), name="Y")
    s = lt.create_schedule(Y)
    _, xi = s[Y].split(s[Y].op.axis[0], factor=64)
    s[Y].vectorize(xi)
    f = lt.build(s, [X, Y], target=target, name=name)
    ALIVE.append(f)
    return f


def _exp_kernel(n: int, target: str = "c"):
    return _map_kernel(n, lt.exp, "exp_kernel", target)


def _ulp_error(x: np.ndarray, got: np.ndarray) -> np.ndarray:
    """|got - exp(x)| in float32 ulps of the exact value (numpy's float64 exp); a result that
    overflows float32 must be +inf (error 0), any other value there counts as infinitely off."""
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64))
        rounded = exact.astype(np.float32)
    e = np.floor(np.log2(np.maximum(exact, 2.0**-149)))
    ulp = np.exp2(np.maximum(e, -126) - 23)
    with np.errstate(invalid="ignore"):
        err = np.abs(got.astype(np.float64) - exact) / ulp
    over = np.isinf(rounded)
    err[over] = np.where(got[over] == np.inf, 0.0, np.inf)
    return err


def _dense_float32(stride: int, chunk: int = 1 << 22):
    """Every ``stride``-th float32 bit pattern of both signs, from 0 up to |x| = 105 (beyond it
    exp is 0 or +inf), in chunks."""
    for sign, top in ((0, 90.0), (0x80000000, 105.0)):
        last = int(np.float32(top).view(np.uint32))
        for start in range(0, last + 1, chunk * stride):
            bits = np.arange(start, min(start + chunk * stride, last + 1), stride,
                             dtype=np.uint32)
            yield (bits | np.uint32(sign)).view(np.float32)


def _worst_ulp(f, n: int, stride: int) -> tuple[float, float]:
    """(largest ulp error, its input) of the ``n``-element exp kernel ``f`` over the sample."""
    worst = (0.0, 0.0)
    xs, y = np.zeros(n, np.float32), np.empty(n, np.float32)
    for x in _dense_float32(stride, n):
        xs[:x.size] = x
        f(xs, y)
        err = _ulp_error(x, y[:x.size])
        k = int(np.argmax(err))
        if err[k] > worst[0]:
            worst = (float(err[k]), float(x[k]))
    return worst


def _exp_of(f, x) -> np.ndarray:
    x = np.asarray(x, np.float32)
    y = np.empty_like(x)
    f(x, y)
    return y


def test_fast_exp_is_inlined_by_default_and_libm_on_request():
    f = _exp_kernel(64)
    assert "lt_expf(" in f.source and "expf(" not in f.source.replace("lt_expf(", "")
    g = _exp_kernel(64, "c -libm-exp")
    assert "lt_expf" not in g.source and "expf(" in g.source
    x = np.linspace(-20, 20, 64, dtype=np.float32)
    assert _ulp_error(x, _exp_of(f, x)).max() <= F32_MAX_ULP
    assert _ulp_error(x, _exp_of(g, x)).max() <= 4     # glibc's vector expf: up to 2.64 ulp


@pytest.mark.parametrize("target", ["c", AVX2])
def test_fast_exp_within_1_03_ulp_on_a_dense_sample_of_float32(target):
    """Every 1021st float32 bit pattern of both signs up to |x| = 105 (2.2 million inputs),
    with this machine's vectors and with AVX2's (8 lanes)."""
    if target == AVX2:
        _need_avx2()
    err, at = _worst_ulp(_exp_kernel(1 << 21, target), 1 << 21, 1021)
    assert err <= F32_MAX_ULP, f"exp({at!r}) is {err:.3f} ulp off"


@pytest.mark.slow
def test_fast_exp_within_1_03_ulp_on_a_denser_sample_of_float32():
    """Every 61st float32 bit pattern (37 million inputs), every exponent and mantissa region."""
    err, at = _worst_ulp(_exp_kernel(1 << 21), 1 << 21, 61)
    assert err <= F32_MAX_ULP, f"exp({at!r}) is {err:.3f} ulp off"


@pytest.mark.parametrize("target", ["c", AVX2])
def test_fast_exp_special_values_overflow_and_underflow(target):
    if target == AVX2:
        _need_avx2()
    f = _exp_kernel(22, target)
    big = np.float32(88.72283935546875)           # the first float32 whose exp overflows
    tiny = np.float32(-103.97207641601562)       # the last whose exp rounds up to 2^-149
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, big, np.nextafter(big, 0), 89.0, 1e30,
                  -87.33654, -87.5, -100.0, tiny, np.nextafter(tiny, -200), -104.0, -1e30,
                  3.4e38, -3.4e38, 1e-45, -1e-45, 0.5, -0.5], np.float32)
    y = _exp_of(f, x)
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == 0.0 and y[3] == 1.0 and y[4] == 1.0
    assert y[5] == np.inf and np.isfinite(y[6]) and y[7] == np.inf and y[8] == np.inf
    assert y[13] == 0.0 and y[14] == 0.0 and y[15] == 0.0 and y[16] == np.inf and y[17] == 0
    assert 0 < y[10] < np.finfo(np.float32).tiny and y[12] == np.float32(2.0**-149)
    assert _ulp_error(x[1:], y[1:]).max() <= F32_MAX_ULP


@pytest.mark.parametrize("target", ["c", AVX2])
def test_fast_exp_nan_payloads_and_every_lane_position(target):
    """A NaN anywhere in a vector (every position of a 67-element array) stays NaN and leaves
    its neighbours exact."""
    if target == AVX2:
        _need_avx2()
    f = _exp_kernel(67, target)
    rng = np.random.default_rng(21)
    for pos in range(67):
        x = rand(rng, (67,), lo=-30, hi=30)
        x[pos] = np.nan
        y = _exp_of(f, x)
        assert np.isnan(y[pos])
        ok = np.arange(67) != pos
        assert _ulp_error(x[ok], y[ok]).max() <= F32_MAX_ULP


def test_fast_exp_worst_case_is_the_documented_one():
    """The worst input over every float32 (backends/c_math.py: 1.0192 ulp at -0x1.b60c42p+4)
    against numpy's float64 exp, with its float32 neighbours."""
    worst = np.float32(float.fromhex("-0x1.b60c42p+4"))
    x = np.array([np.nextafter(worst, -np.inf), worst, np.nextafter(worst, 0)], np.float32)
    err = _ulp_error(x, _exp_of(_exp_kernel(3), x))
    assert 1.019 < err[1] <= F32_MAX_ULP and err.max() == err[1], err


@pytest.mark.parametrize("march, reg", [("x86-64-v3", "ymm"), ("x86-64-v4", "zmm")])
def test_fast_exp_vectorizes_with_avx2_and_avx512(march, reg, tmp_path):
    """gcc 12 vectorizes the inlined exp for both: packed fused multiply-adds on the
    -march's widest registers and no call (a ``?:`` clamp made gcc keep it scalar, with
    branches, under AVX2). Compiles the generated source to assembly only."""
    try:
        predefined_macros("gcc", march)
    except lt.BuildError:
        pytest.skip(f"this gcc does not target -march={march} (not an x86-64 compiler)")
    src = tmp_path / "exp_kernel.c"
    src.write_text(_exp_kernel(64, f"c -march={march}").source)
    asm = subprocess.run(["gcc", *flags_for({"march": march}, parallel=False), "-S", "-o", "-",
                          str(src)], capture_output=True, text=True, check=True).stdout
    packed = re.findall(rf"vfn?m(?:add|sub)\w*ps\s.*%{reg}", asm)
    assert len(packed) >= 9, f"{len(packed)} packed {reg} FMAs:\n{asm}"
    assert not re.search(r"\bcall\b", asm) and not re.search(r"vfn?m(?:add|sub)\w*ss", asm)


def test_libm_exp_option_takes_no_value():
    with pytest.raises(lt.BuildError, match="option -libm-exp takes no value"):
        lt.Target.parse("c -libm-exp=1")


@pytest.mark.parametrize("target", ["c", "c -libm-exp"])
def test_softmax_sigmoid_logsumexp_with_fast_exp(target):
    """Kernels built on exp stay within float32 tolerance of float64 numpy over wide ranges:
    a row softmax (terms down to exp(-200), underflowing), sigmoid over [-100, 100] (both
    tails) and tanh (libm), vectorized. rtol 1e-5: x - max rounds in float32 before exp (an
    error of a few 1e-6 at |x - max| ~ 64, the same with either exp)."""
    n, m = 13, 61
    w = softmax(N=n, M=m)                   # row max, exp(x - max), row sum, divide
    X, e, out = w["X"], w["expx"], w["softmax"]
    sg = lt.compute((n, m), lambda i, j: lt.sigmoid(X[i, j]), name="sg")
    th = lt.compute((n, m), lambda i, j: lt.tanh(X[i, j] * 0.05), name="th")
    s = lt.create_schedule([out, sg, th])
    for T in (out, sg, th, e):
        s[T].vectorize(s[T].op.axis[1])
    x = rand(np.random.default_rng(22), (n, m), lo=-100, hi=100)
    x64 = x.astype(np.float64)
    ex = np.exp(x64 - x64.max(axis=1, keepdims=True))
    f = lt.build(s, [X, out, sg, th], target=target)
    assert ("lt_expf" in f.source) == (target == "c")
    run_check(s, [X, out, sg, th], {"X": x},
              {"softmax": ex / ex.sum(axis=1, keepdims=True), "sg": 1 / (1 + np.exp(-x64)),
               "th": np.tanh(x64 * 0.05)}, rtol=1e-5, atol=1e-37, f=f)


# ---- float32 division by a constant (lt_divf, backends/c_math.py) ---------------------------

DENSE_DIVISORS = [3.0, 10.0, 1.41421356]            # every 1021st bit pattern
DIVISORS = [7.0, 255.0, 1000.0, 6.0, 12.5, 16777215.0, 1.00000012, 1.99999988, -3.0,
            -1.7]                                      # every 12289th
TINY = 2.0 ** -100      # below it lt_divf may be 1 ulp off (r underflows); exact above


def _div_kernel(n: int, c: float, target: str = "c"):
    return _map_kernel(n, lambda x: x / c, "div_kernel", target)


def _div_mismatches(f, c: float, bits: np.ndarray) -> tuple[int, int, float]:
    """(mismatches with |x| >= 2^-100, largest ulp distance below it, a mismatching input) of
    the kernel ``f`` against numpy's x / c over the float32 bit patterns ``bits``."""
    x = bits.view(np.float32)
    got = np.empty_like(x)
    f(x, got)
    with np.errstate(all="ignore"):
        want = x / np.float32(c)
    differ = got.view(np.uint32) != want.view(np.uint32)
    if not differ.any():          # the common case: every bit equal (one cheap pass)
        return 0, 0, 0.0
    at = np.flatnonzero(differ)   # the rest is judged on the differing inputs only
    x, got, want = x[at], got[at], want[at]
    differ = ~(np.isnan(got) & np.isnan(want))
    big = differ & (np.abs(x) >= TINY)
    small = differ & ~big
    ulps = np.abs(got[small].view(np.int32).astype(np.int64)
                  - want[small].view(np.int32).astype(np.int64))
    return int(big.sum()), int(ulps.max(initial=0)), float(x[big][0]) if big.any() else 0.0


@pytest.mark.parametrize("target", ["c", AVX2])
@pytest.mark.parametrize("c, stride", [(c, 1021) for c in DENSE_DIVISORS]
                         + [(c, 12289) for c in DIVISORS])
def test_division_by_a_constant_equals_ieee_division_on_a_dense_sample(c, stride, target):
    """Every ``stride``-th float32 bit pattern of both signs (4.2 million inputs or 350,000,
    every exponent): bit for bit x / c for |x| >= 2^-100, zeros, infinities and NaN; within
    1 ulp below."""
    if target == AVX2:
        _need_avx2()
    n = 1 << 22
    f = _div_kernel(n, c, target)
    assert "lt_divf(" in f.source and " / " not in f.source.split("int div_kernel")[1]
    bits = np.arange(0, 1 << 32, stride, dtype=np.uint64).astype(np.uint32)
    bits = np.concatenate([bits, np.zeros(-bits.size % n, np.uint32)])    # whole kernels
    for k in range(0, bits.size, n):
        big, small_ulp, at = _div_mismatches(f, c, bits[k:k + n])
        assert big == 0, f"x / {c}: {big} results differ from the division, e.g. x = {at!r}"
        assert small_ulp <= 1, f"x / {c}: {small_ulp} ulp off for some |x| < 2^-100"


def test_division_by_a_constant_special_values_in_every_lane():
    f = _div_kernel(67, 3.0)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.0, -3.0,
                        3.4028235e38, -3.4028235e38, 1.1754944e-38, 6.0, 1.0, -1.0],
                       np.float32)
    rng = np.random.default_rng(5)
    for pos in range(67):
        x = rng.uniform(-1e6, 1e6, 67).astype(np.float32)
        x[pos] = special[pos % special.size]
        y = np.empty_like(x)
        f(x, y)
        want = x / np.float32(3.0)
        same = (y.view(np.uint32) == want.view(np.uint32)) | (np.isnan(y) & np.isnan(want))
        assert same.all(), f"x[{pos}] = {x[pos]!r}: got {y[~same]}, want {want[~same]}"


def test_a_power_of_two_divisor_is_a_multiply_and_other_divisors_keep_the_division():
    by_4 = _div_kernel(64, 4.0)
    assert "(X[" in by_4.source and "* 0.25f" in by_4.source
    assert "* 2.0f" in _div_kernel(64, 0.5).source
    for c in (0.3, 1e30, 3e7):        # outside 1 <= |c| <= 2^24: a division
        src = _div_kernel(64, c).source
        assert "lt_divf" not in src and " / " in src.split("int div_kernel")[1], c
    g = _div_kernel(64, 3.0, "c -ieee-div")
    assert "lt_divf" not in g.source and " / 3.0f" in g.source
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    for f, c in ((by_4, 4.0), (_div_kernel(64, 0.3), 0.3), (g, 3.0)):
        y = np.empty_like(x)
        f(x, y)
        np.testing.assert_array_equal(y, x / np.float32(c))


def test_fast_math_divides_by_a_constant_as_a_plain_multiply_by_its_reciprocal():
    """-fast-math (the user gives up exactness): x / 3 is x * RN(1/3), no correction, within
    1.5 ulp of the division (what gcc's -ffast-math makes of it)."""
    f = _div_kernel(4096, 3.0, "c -fast-math")
    body = f.source.split("int div_kernel")[1]
    assert "lt_divf" not in f.source and "* 0.3333333" in body and " / " not in body
    x = np.random.default_rng(1).uniform(-1e6, 1e6, 4096).astype(np.float32)
    y = np.empty_like(x)
    f(x, y)
    np.testing.assert_array_equal(y, x * np.float32(1 / 3))
    want = x / np.float32(3)
    ulps = np.abs(y.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1 and (ulps > 0).any()     # inexact, as asked


def test_a_divisor_read_from_data_is_a_division():
    X = lt.placeholder((64,), "float32", name="X")
    D = lt.placeholder((64,), "float32", name="D")
    Y = lt.compute((64,), lambda i: X[i] / D[i], name="Y")
    f = lt.build(lt.create_schedule(Y), [X, D, Y], name="div_data")
    assert "lt_divf" not in f.source


@pytest.mark.slow
def test_division_by_a_constant_over_every_non_negative_float32():
    """All 2^31 inputs with the sign bit clear (+0 up to the positive NaNs) for c = 10, one
    whose tiny inputs are 1 ulp off, in chunks of 2^24 (about 15 s).

    The negative half is left out, not untested: lt_divf is sign-symmetric (q = x * rc,
    r = fma(-q, c, x), f = fma(r, rc, q) and the test r != 0 all flip sign with x, since
    round-to-nearest is symmetric), and so is IEEE x / c, so every negative input's result
    is its positive twin's negated. Negative inputs are still run, bit for bit, by
    test_division_by_a_constant_equals_ieee_division_on_a_dense_sample (every 1021st or
    12289th pattern of both signs, negative divisors too) and by the special values in every
    lane. (backends/c_math.py quotes the check over all 2^32 inputs for 12 divisors.)"""
    n, c = 1 << 24, 10.0
    f = _div_kernel(n, c)
    lane = np.arange(n, dtype=np.uint32)
    for k in range(0, 1 << 31, n):
        bits = lane + np.uint32(k)        # k + n <= 2^31: no wrap-around
        big, small_ulp, at = _div_mismatches(f, c, bits)
        assert big == 0, f"x / {c}: {big} results differ from the division, e.g. x = {at!r}"
        assert small_ulp <= 1
