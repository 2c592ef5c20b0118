"""Scoped range facts (schedule/ranges.py): a let's or a loop's range holds only inside its
body. Partitioning copies a loop body, lets included, into both branches of an ``if``, so two
sibling LetStmts bind one Var; the fact of the first must not survive into the second, where
it would fold away a guard (simplify) or pick C's truncating ``/`` for a floor division of a
negative number (the C code generator)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import looptune as lt
from looptune.lang.expr import BinKind, BinOp, Const, Var
from looptune.schedule.passes import simplify_stmt
from looptune.schedule.ranges import RangeContext
from looptune.schedule.stmt import IfThenElse, LetStmt, Store


def _template():
    """A lowered function O[i] = A[i] over a symbolic size n, whose body the tests replace:
    (function, output buffer, n)."""
    n = lt.var("n")
    A = lt.placeholder((n,), dtype="int64", name="A")
    O = lt.compute((n,), lambda i: A[i], name="O")
    f = lt.lower(lt.create_schedule(O), [A, O])
    return f, f.buffers[1], f.size_vars[0]


def _i64(v: int) -> Const:
    return Const(v, "int64")


def _sibling_lets(out, n: Var) -> tuple:
    """``if n < 8: let x = 3; O[0] = x  else: let x = n // 2; O[0] = x < 4 ? 1 : 2`` with
    the second branch's guard as an if (what simplify may fold) -- and x the same Var."""
    x = Var("x", "int64")
    nn = lt.cast(n, "int64")
    first = LetStmt(x, _i64(3), Store(out, (_i64(0),), x))
    guard = IfThenElse(BinOp(BinKind.LT, x, _i64(4)), Store(out, (_i64(0),), _i64(1)),
                       Store(out, (_i64(0),), _i64(2)))
    second = LetStmt(x, BinOp(BinKind.FLOORDIV, nn, _i64(2)), guard)
    return IfThenElse(BinOp(BinKind.LT, nn, _i64(8)), first, second), x


def _run(f, n: int) -> np.ndarray:
    mod = lt.build(f, [])
    a = np.zeros(n, "int64")
    o = np.full(n, -99, "int64")
    mod(a, o)
    return o


def test_sibling_let_keeps_its_guard_through_simplify():
    _, out, n = _template()
    stmt, _ = _sibling_lets(out, n)
    text = str(simplify_stmt(stmt))
    assert "if (x < 4)" in text, text      # x is n // 2 there, not the other branch's 3


@pytest.mark.parametrize("size", [5, 7, 9, 20])
def test_sibling_let_differential(size):
    """The simplified function against the same computation in numpy, on both branches."""
    f, out, n = _template()
    stmt, _ = _sibling_lets(out, n)
    g = dataclasses.replace(f, body=simplify_stmt(stmt))
    want = 3 if size < 8 else (1 if size // 2 < 4 else 2)
    assert _run(g, size)[0] == want


@pytest.mark.parametrize("size", [3, 7])
def test_sibling_let_floor_division_in_c(size):
    """``let x = 3; O[0] = x // 2`` beside ``let x = n - 20; O[0] = x // 2``: the C generator
    must floor the second (x < 0), not divide with C's truncating ``/``."""
    f, out, n = _template()
    x = Var("x", "int64")
    nn = lt.cast(n, "int64")
    half = BinOp(BinKind.FLOORDIV, x, _i64(2))
    body = IfThenElse(BinOp(BinKind.LT, nn, _i64(5)),
                      LetStmt(x, _i64(3), Store(out, (_i64(0),), half)),
                      LetStmt(x, nn - _i64(20), Store(out, (_i64(0),), half)))
    got = _run(dataclasses.replace(f, body=body), size)[0]
    assert got == (3 // 2 if size < 5 else (size - 20) // 2)


def test_context_push_pop_restores_and_hides():
    v = Var("v", "int32")
    ctx = RangeContext()
    ctx.push(v, 0, 3)
    ctx.push(v, None, None)             # an unknown inner binding hides the outer fact
    assert v not in ctx.facts
    ctx.pop()
    assert ctx.facts[v] == (0, 3)
    with ctx.scope(v, 5, 6):
        assert ctx.facts[v] == (5, 6)
    assert ctx.facts[v] == (0, 3)
    ctx.pop()
    assert v not in ctx.facts and ctx.depth == 0


def test_context_loop_and_let_ranges():
    i, n = Var("i", "int32"), Var("n", "int32")
    ctx = RangeContext()
    with ctx.loop(i, Const(2, "int32"), Const(5, "int32")):
        assert ctx.facts[i] == (2, 6)
        x = Var("x", "int32")
        with ctx.let(x, i * 2 + 1):
            assert ctx.facts[x] == (5, 13)
        assert x not in ctx.facts
    with ctx.loop(i, Const(0, "int32"), n):
        assert i not in ctx.facts       # no bound on n: no fact
    assert ctx.depth == 0 and not ctx.facts


def test_partitioned_lets_differential(rng):
    """A stage computed at a tiled consumer's loop with symbolic sizes: partitioning copies
    its region lets into both branches; the result against numpy at odd sizes."""
    n, m = lt.var("n"), lt.var("m")
    A = lt.placeholder((n, m), name="A")
    B = lt.compute((n, m), lambda i, j: lt.if_then_else(i >= 4, A[i, j], A[i, j] * 2.0), name="B")
    C = lt.compute((n, m), lambda i, j: B[i, j] + B[i, j // 2], name="C")
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    io, _, _, _ = s[C].tile(i, j, 4, 4)
    s[B].compute_at(s[C], io)
    mod = lt.build(s, [A, C])
    for rows, cols in [(9, 7), (5, 13), (3, 3)]:
        a = rng.standard_normal((rows, cols)).astype("float32")
        c = np.full_like(a, np.nan)
        mod(a, c)
        b = np.where(np.arange(rows)[:, None] >= 4, a, a * 2)
        np.testing.assert_allclose(c, b + b[:, np.arange(cols) // 2], rtol=1e-6)

