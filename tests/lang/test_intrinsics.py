"""The intrinsic table: every row is usable by every consumer. It has an ``lt.<name>`` builder,
folds constants with its numpy function, emits and builds in C (float32 and float64, against
numpy on odd sizes) and emits in OpenCL text; Call refuses names and arities not in it."""
from __future__ import annotations

import numpy as np
import pytest
from util import rand, run_check

import looptune as lt
from looptune.backends import c_math
from looptune.backends.c_codegen import _proto, generate_c, vector_math_functions
from looptune.backends.opencl_codegen import generate_opencl
from looptune.lang.expr import Call, Const, Var
from looptune.lang.intrinsics import INTRINSICS, render
from looptune.lang.simplify import simplify

ROWS = list(INTRINSICS.values())
N, M = 7, 13


def _apply(row, x):
    """``row`` applied to ``x`` through its ``lt.<name>`` builder (``pow(x, x)`` for arity 2)."""
    return getattr(lt, row.name)(*([x] * row.arity))


def _kernel(dtype: str):
    """Y[r, i, j] = the r-th row of the table at X[i, j]."""
    X = lt.placeholder((N, M), dtype, name="X")
    Y = lt.compute((len(ROWS), N, M), lambda r, i, j: _select(r, X[i, j]), name="Y")
    return X, Y


def _select(r, x):
    out = _apply(ROWS[-1], x)
    for k in range(len(ROWS) - 2, -1, -1):
        out = lt.if_then_else(lt.equal(r, k), _apply(ROWS[k], x), out)
    return out


def test_every_row_has_an_lt_builder_with_its_arity():
    for row in ROWS:
        e = _apply(row, Var("f", "float64"))
        assert isinstance(e, Call) and e.name == row.name and len(e.args) == row.arity


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_row_folds_with_numpy(row, dtype):
    for v in (0.37, 1.75):
        args = [Const(v, dtype)] * row.arity
        got = simplify(Call(row.name, tuple(args), dtype))
        want = row.numpy(*[np.array(v, dtype)] * row.arity)
        assert isinstance(got, Const) and got.dtype == dtype, f"{row.name}({v}) -> {got}"
        assert got.value == np.asarray(want).astype(dtype).item()


def test_non_finite_results_are_not_folded():
    e = lt.log(lt.const(0.0, "float32"))
    assert simplify(e) == e  # log(0) = -inf stays a call, evaluated at run time


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_row_builds_in_c_against_numpy(dtype, rng):
    X, Y = _kernel(dtype)
    x = rand(rng, (N, M), dtype, lo=0.05, hi=2.5)  # inside every row's domain
    want = np.stack([np.asarray(row.numpy(*[x.astype(np.float64)] * row.arity))
                     for row in ROWS]).astype(dtype)
    tol = 2e-6 if dtype == "float32" else 1e-13
    run_check(lt.create_schedule(Y), [X, Y], {"X": x}, {"Y": want}, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_row_emits_its_c_function(dtype):
    X, Y = _kernel(dtype)
    for libm_exp in (False, True):
        code = generate_c(lt.lower(lt.create_schedule(Y), [X, Y]), libm_exp=libm_exp)
        for row in ROWS:
            if row.c is not None:
                fast = row.c_fast_f32 if dtype == "float32" and not libm_exp else None
                name = fast or row.c_name(dtype)
                assert f"{name}(" in code.function, f"{row.name}: no call of {name}"
            else:
                assert _c_expansion(row, dtype, libm_exp) in code.function, row.name


def _c_expansion(row, dtype: str, libm_exp: bool) -> str:
    def fn(name):
        other = INTRINSICS[name]
        if other.c_fast_f32 and dtype == "float32" and not libm_exp:
            return other.c_fast_f32
        return other.c_name(dtype)
    # the expansion's text around its argument, which the kernel writes as a load
    return render(row, ["@"] * row.arity, dtype, None, fn).split("@")[0]


def test_every_row_emits_in_opencl():
    X = lt.placeholder((64, 5), "float32", name="X")
    Y = lt.compute((len(ROWS), 64, 5), lambda r, i, j: _select(r, X[i, j]), name="Y")
    s = lt.create_schedule(Y)
    io, ii = s[Y].split(Y.op.axis[1], factor=16)
    s[Y].bind(io, "blockIdx.x")
    s[Y].bind(ii, "threadIdx.x")
    s[Y].bind(Y.op.axis[0], "blockIdx.y")
    src = generate_opencl(lt.lower(s, [X, Y], name="k")).source
    for row in ROWS:
        text = f"{row.opencl}(" if row.opencl is not None else render(
            row, ["@"] * row.arity, "float32", None, lambda n: INTRINSICS[n].opencl).split("@")[0]
        assert text in src, f"{row.name}: {text!r} not in the OpenCL program"


def test_libmvec_rows_and_helpers():
    vm = vector_math_functions()
    for row in ROWS:
        if row.libmvec and vm:
            assert {row.c_name("float32"), row.c_name("float64")} <= vm, row.name
        if not row.libmvec:
            assert row.c is None or row.c_name("float64") not in vm, row.name
        if row.c_fast_f32 is not None:
            assert row.c_fast_f32 in c_math.HELPERS, row.name
        if row.c is not None:
            assert _proto(row.c_name("float32")).startswith(f"float {row.c}f(")
            assert _proto(row.c_name("float64")).count("double") == row.arity + 1
        assert row.c is not None or row.expand is not None, row.name
        assert row.opencl is not None or row.expand is not None, row.name


def test_call_refuses_unknown_names_and_arities():
    f = Var("f", "float32")
    with pytest.raises(lt.LangError, match=r"no intrinsic called 'expm1'.*exp, log.*add a row"):
        Call("expm1", (f,), "float32")
    with pytest.raises(lt.LangError, match=r"Call\('pow'\): takes 2 argument\(s\); got 1"):
        Call("pow", (f,), "float32")
