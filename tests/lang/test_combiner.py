"""The Combiner table: each reduction's identity and operator, the names it parses, and every
combiner through lowering and the C backend against its numpy ufunc (odd sizes, where=)."""
from __future__ import annotations

import numpy as np
import pytest
from util import rand, run_check

import looptune as lt
from looptune.lang.combiner import Combiner
from looptune.lang.expr import BinKind, BinOp, Reduce, Var
from looptune.lang.ops import reduce

DTYPES = ("float32", "float64", "int32", "int64", "uint8", "int8")


@pytest.mark.parametrize("c", list(Combiner), ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_identity_is_neutral_for_the_ufunc(c, dtype, rng):
    """ufunc(identity, x) == x for values across the dtype's range."""
    e = c.identity(dtype)
    assert e.dtype == dtype
    x = rand(rng, (101,), dtype, lo=-1e6, hi=1e6)
    if dtype.startswith("float"):
        x[:3] = (np.inf, -np.inf, 0.0)
    got = c.ufunc(np.array(e.value, dtype), x)
    np.testing.assert_array_equal(got, x)


def test_identities_and_operators():
    assert Combiner.SUM.identity("float32").value == 0.0
    assert Combiner.PROD.identity("int32").value == 1
    assert Combiner.MAX.identity("float64").value == -np.inf
    assert Combiner.MAX.identity("int8").value == -128
    assert Combiner.MIN.identity("uint8").value == 255
    assert [c.op for c in Combiner] == [BinKind.ADD, BinKind.MUL, BinKind.MAX, BinKind.MIN]
    a, b = Var("a"), Var("b")
    assert Combiner.MAX.combine(a, b) == BinOp(BinKind.MAX, a, b)


def test_names_parse_and_print():
    assert Combiner.of("max") is Combiner.MAX
    assert Combiner.of(Combiner.SUM) is Combiner.SUM
    assert [str(c) for c in Combiner] == ["sum", "prod", "max", "min"]
    with pytest.raises(lt.LangError, match=r"unknown reduction combiner 'mean'.*'sum', 'prod'"):
        Combiner.of("mean")


def test_reduce_nodes_store_the_enum_and_accept_names():
    X = lt.placeholder((5, 7), name="X")
    k = lt.reduce_axis(7, name="k")
    r = Reduce("min", X[0, k], (k,), None)
    assert r.combiner is Combiner.MIN
    assert lt.sum(X[0, k], axis=k).combiner is Combiner.SUM
    assert lt.max(X[0, k], axis=k).combiner is Combiner.MAX
    assert str(lt.prod(X[0, k], axis=k)).startswith("prod(")
    assert reduce("min", X[0, k], k) == r
    with pytest.raises(lt.LangError, match=r"unknown reduction combiner 'avg'"):
        Reduce("avg", X[0, k], (k,), None)


def test_reduce_errors_name_the_combiner():
    X = lt.placeholder((5, 7), name="X")
    i = lt.var("i")
    with pytest.raises(lt.LangError, match=r"lt\.max: axis is empty"):
        reduce(Combiner.MAX, X[0, 0], [])
    with pytest.raises(lt.LangError, match=r"lt\.prod: axis .* is not a reduction axis"):
        reduce("prod", X[0, 0], i)


@pytest.mark.parametrize("c", list(Combiner), ids=str)
@pytest.mark.parametrize("dtype", ["float64", "int32", "uint8"])
def test_every_combiner_lowers_and_builds_against_numpy(c, dtype, rng):
    """Rows of a 13 x 29 matrix reduced by each combiner, with and without where=."""
    n, m = 13, 29
    X = lt.placeholder((n, m), dtype, name="X")
    k = lt.reduce_axis(m, name="k")
    Y = lt.compute((n,), lambda i: reduce(c, X[i, k], k), name="Y")
    W = lt.compute((n,), lambda i: reduce(c, X[i, k], k, where=lt.not_equal(k % 3, 1)), name="W")
    lo, hi = (0, 3) if c is Combiner.PROD else (-50, 50)
    x = rand(rng, (n, m), dtype, lo=lo, hi=hi)
    keep = np.arange(m) % 3 != 1
    ident = np.full((n, m), c.identity(dtype).value, dtype)
    want_w = c.reduce_np(np.where(keep, x, ident), axis=1)
    s = lt.create_schedule([Y, W])
    run_check(s, [X, Y, W], {"X": x}, {"Y": c.reduce_np(x, axis=1), "W": want_w},
              rtol=1e-12, atol=0)
