"""schedule/verify.py: every rule caught with a message naming it, real lowerings verify, and
lowering verifies after each pass under LOOPTUNE_VERIFY_IR=1 (tests/conftest.py sets it)."""
from __future__ import annotations

import sys

import pytest
import util

import looptune as lt
from looptune.lang.expr import Const, Var
from looptune.schedule.stmt import (Allocate, Barrier, Buffer, For, ForKind, IfThenElse,
                                    LetStmt, Store, seq)
from looptune.schedule.verify import IRVerifyError, verify, verify_enabled

I32 = "int32"
OUT = Buffer("O", (8,), "float32")
ONE = Const(1.0, "float32")


def _c(v: int) -> Const:
    return Const(v, I32)


def _loop(v: Var, body, kind=ForKind.SERIAL, tag=None, ext=8) -> For:
    return For(v, _c(0), _c(ext), kind, body, tag)


def test_conftest_turns_verification_on():
    assert verify_enabled()


def _tiled_matmul_with_cache():
    w = util.matmul(13, 21, 7)
    s = w.schedule()
    C = w["C"]
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    _, jo, _, _ = s[C].tile(i, j, 4, 8)
    s[CC].compute_at(s[C], jo)
    (k,) = s[CC].op.reduce_axis
    _, ki = s[CC].split(k, factor=4)
    s[CC].unroll(ki)
    return s, w


def test_lowered_functions_verify():
    s, w = _tiled_matmul_with_cache()
    f = lt.lower(s, w.args)
    verify(f.body, f.size_vars, f.buffers)
    n = lt.var("n")
    A = lt.placeholder((n,), name="A")
    B = lt.compute((n,), lambda i: A[i] * 2, name="B")
    sb = lt.create_schedule(B)
    sb[B].split(B.op.axis[0], factor=4)
    g = lt.lower(sb, [A, B])
    verify(g.body, g.size_vars, g.buffers)
    with pytest.raises(IRVerifyError, match="variable 'n' is used in the shape of argument 'A'"):
        verify(g.body, (), g.buffers)                 # n is a parameter: without it, unbound


def test_unbound_variable():
    i, j = Var("i", I32), Var("j", I32)
    with pytest.raises(IRVerifyError, match=r"variable 'j' is used in a store to 'O' but no "
                                            r"enclosing for or let binds it.*\(inside i\)"):
        verify(_loop(i, Store(OUT, (j,), ONE)), buffers=[OUT])


def test_variable_bound_twice_on_one_path():
    i, x = Var("i", I32), Var("x", I32)
    with pytest.raises(IRVerifyError, match="variable 'i' is bound by loop 'i' inside the "
                                            "scope of loop 'i'"):
        verify(_loop(i, _loop(i, Store(OUT, (i,), ONE))), buffers=[OUT])
    twice = LetStmt(x, _c(1), LetStmt(x, _c(2), Store(OUT, (x,), ONE)))
    with pytest.raises(IRVerifyError, match="bound by let 'x' inside the scope of let 'x'"):
        verify(twice, buffers=[OUT])


def test_sibling_bindings_are_fine():
    """The two halves of a partitioned loop bind the same let, each in its own scope."""
    i, x = Var("i", I32), Var("x", I32)
    half = LetStmt(x, i // 2, Store(OUT, (x,), ONE))
    verify(_loop(i, IfThenElse(i < 4, half, half)), buffers=[OUT])
    verify(_loop(i, seq(half, half)), buffers=[OUT])


def test_store_and_load_need_declared_buffers():
    i = Var("i", I32)
    tmp = Buffer("T", (8,), "float32", "local")
    with pytest.raises(IRVerifyError, match="a store to 'T': buffer 'T' is neither an argument "
                                            "nor allocated around it"):
        verify(_loop(i, Store(tmp, (i,), ONE)), buffers=[OUT])
    from looptune.lang.expr import BufferLoad
    with pytest.raises(IRVerifyError, match="a load of 'T': buffer 'T' is neither"):
        verify(_loop(i, Store(OUT, (i,), BufferLoad(tmp, (i,)))), buffers=[OUT])
    verify(Allocate(tmp, _loop(i, Store(OUT, (i,), BufferLoad(tmp, (i,))))), buffers=[OUT])


def test_negative_allocation():
    bad = Buffer("T", (4, -2), "float32", "local")
    with pytest.raises(IRVerifyError, match="the allocation of 'T' has the negative extent -2 "
                                            "in dimension 1"):
        verify(Allocate(bad, Store(OUT, (_c(0),), ONE)), buffers=[OUT])


def test_barrier_placement():
    t, b = Var("t", I32), Var("b", I32)
    local = Buffer("L", (8,), "float32", "shared")
    fill = _loop(t, Store(local, (t,), ONE), ForKind.THREAD, "threadIdx.x")
    ok = _loop(b, Allocate(local, seq(fill, Barrier(), fill)), ForKind.THREAD, "blockIdx.x")
    verify(ok)
    inside = _loop(b, Allocate(local, _loop(t, seq(Store(local, (t,), ONE), Barrier()),
                                            ForKind.THREAD, "threadIdx.x")),
                   ForKind.THREAD, "blockIdx.x")
    with pytest.raises(IRVerifyError, match=r"a barrier inside a threadIdx loop.*\(inside b > t\)"):
        verify(inside)
    branch = _loop(b, Allocate(local, seq(fill, IfThenElse(b < 2, Barrier()))),
                   ForKind.THREAD, "blockIdx.x")
    with pytest.raises(IRVerifyError, match="a barrier inside an if"):
        verify(branch)
    with pytest.raises(IRVerifyError, match="a barrier outside any work-group region"):
        verify(_loop(b, seq(Store(OUT, (b,), ONE), Barrier())), buffers=[OUT])


def test_unlowered_tensor_load():
    A = lt.placeholder((8,), name="A")
    i = Var("i", I32)
    with pytest.raises(IRVerifyError, match="the unlowered load of tensor 'A' in a store to 'O'"):
        verify(_loop(i, Store(OUT, (i,), A[i])), buffers=[OUT])


def _drop_outer_loop(stmt):
    """A broken pass: the outermost loop's body without its loop (its variable left free)."""
    while isinstance(stmt, Allocate):
        stmt = stmt.body
    return stmt.body if isinstance(stmt, For) else stmt


def test_lowering_verifies_after_each_pass(monkeypatch):
    s, w = _tiled_matmul_with_cache()
    monkeypatch.setattr(sys.modules["looptune.schedule.lower"], "unroll_loops", _drop_outer_loop)
    with pytest.raises(IRVerifyError, match=r"verify\(after unroll_loops\): variable 'i.outer' "
                                            "is used in"):
        lt.lower(s, w.args)
    monkeypatch.setenv("LOOPTUNE_VERIFY_IR", "0")
    lt.lower(s, w.args)                  # not verified: the broken IR goes through


def test_verified_lowering_still_computes(rng):
    """The verified pipeline's result against numpy (odd sizes)."""
    s, w = _tiled_matmul_with_cache()
    f = lt.build(s, w.args)
    data = w.make_data(rng)
    util.run_check(None, w.args, data, w.reference(data), f=f, **w.tol)
