"""cache_write, cache_read and rfactor (API section 2): differential against numpy on odd sizes,
their trace round-trip, and their validation errors."""
from __future__ import annotations

import pytest
from util import matmul, softmax

import looptune as lt
from looptune import ScheduleError
from looptune.schedule import steps as steps_mod


def _cw_tiled(s, w):
    C = w["C"]
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=4)
    s[CC].reorder(ko, ci, ki, cj)
    s[CC].vectorize(cj)
    s[CC].unroll(ki)
    s[C].parallel(io)


def _cr_rows(s, w):
    C, A = w["C"], w["A"]
    AA = s.cache_read(A, "local", [C])
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, ii = s[C].split(i, factor=4)
    s[C].reorder(io, ii, k, j)
    s[AA].compute_at(s[C], io)
    s[C].vectorize(j)


def _cr_and_cw(s, w):
    C, B = w["C"], w["B"]
    CC = s.cache_write(C, "local")
    BB = s.cache_read(B, "local", [CC])
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(jo, i, ji)
    s[CC].compute_at(s[C], i)
    s[BB].compute_at(s[C], jo)


def _rfactor_inner(s, w):
    C = w["C"]
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, factor=8)
    CF = s.rfactor(C, ki)
    f0, ci, cj = s[CF].op.axis
    (cko,) = s[CF].op.reduce_axis
    s[CF].reorder(ci, cj, cko, f0)
    s[CF].vectorize(f0)                  # the factored loop is spatial in CF
    s[CF].parallel(ci)


def _rfactor_outer_parallel(s, w):
    C = w["C"]
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, nparts=4)
    CF = s.rfactor(C, ko)
    s[CF].parallel(s[CF].op.axis[0])


MEMORY = {
    "cache_write_tiled": _cw_tiled,
    "cache_read_rows": _cr_rows,
    "cache_read_and_write": _cr_and_cw,
    "rfactor_inner": _rfactor_inner,
    "rfactor_outer_parallel": _rfactor_outer_parallel,
}


@pytest.mark.parametrize("name", MEMORY)
@pytest.mark.slow
def test_memory_primitives_on_matmul(name):
    w = matmul(37, 53, 101)
    s = w.schedule()
    MEMORY[name](s, w)
    w.check(s)


@pytest.mark.parametrize("name", MEMORY)
def test_memory_primitives_trace_round_trip(name):
    w = matmul(13, 19, 29)
    s = w.schedule()
    MEMORY[name](s, w)
    w2 = matmul(13, 19, 29)
    fresh = lt.replay(w2.schedule(), steps_mod.loads(steps_mod.dumps(s.steps)))
    assert str(lt.lower(fresh, w2.args)) == str(lt.lower(s, w.args))


def test_rfactor_of_softmax_row_sum():
    w = softmax(37, 53)
    s = w.schedule()
    sm = w["rowsum"]
    (k2,) = s[sm].op.reduce_axis
    ko, ki = s[sm].split(k2, factor=4)
    SF = s.rfactor(sm, ki)
    f0, si = s[SF].op.axis
    (sko,) = s[SF].op.reduce_axis
    s[SF].reorder(si, sko, f0)
    s[SF].vectorize(f0)
    w.check(s)


def test_cache_write_after_other_primitives_is_refused():
    w = matmul(7, 9, 11)
    s = w.schedule()
    C = w["C"]
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match=r"stage 'C': cache_write\(C, 'local'\): apply "
                                            r"cache_write before any other primitive"):
        s.cache_write(C, "local")


def test_cache_write_unknown_scope():
    w = matmul(7, 9, 11)
    s = w.schedule()
    with pytest.raises(ScheduleError, match=r"cache_write\(C, 'register'\): unknown scope"):
        s.cache_write(w["C"], "register")
