"""Schedule sizes and names: numpy integer factors work like ints (and record plain ints in the
steps), factors and fused extents beyond 32 bits are ScheduleErrors, extents near 2**31 lower
without overflowing, and ``s['C']`` finds a stage by its tensor's name unless two share it."""
from __future__ import annotations

import numpy as np
import pytest
from util import run_check

import looptune as lt
from looptune.schedule import steps


def _scale(n=13, m=29, name="B"):
    A = lt.placeholder((n, m), "float32", name="A")
    return A, lt.compute((n, m), lambda i, j: A[i, j] * 2.0, name=name)


def test_numpy_integer_factors_behave_like_ints():
    A, B = _scale()
    s = lt.create_schedule(B)
    i, j = s[B].op.axis
    io, jo, ii, ji = s[B].tile(i, j, np.int64(4), np.int32(8))
    jio, jii = s[B].split(ji, nparts=np.uint8(3))
    s[B].unroll(jii)
    A2, B2 = _scale()
    s2 = lt.create_schedule(B2)
    i2, j2 = s2[B2].op.axis
    s2[B2].tile(i2, j2, 4, 8)
    s2[B2].split(s2[B2].loop("j.inner"), nparts=3)
    s2[B2].unroll(s2[B2].loop("j.inner.inner"))
    assert str(lt.lower(s, [A, B])) == str(lt.lower(s2, [A2, B2]))
    assert steps.dumps(s.steps) == steps.dumps(s2.steps)       # plain ints, JSON-able
    a = np.random.default_rng(0).random((13, 29), dtype=np.float32)
    run_check(s, [A, B], {"A": a}, {"B": a * 2})


@pytest.mark.parametrize("kw", [{"factor": 2**31}, {"nparts": np.int64(2**33)}])
def test_factor_beyond_32_bits(kw):
    A, B = _scale()
    s = lt.create_schedule(B)
    what = next(iter(kw))
    with pytest.raises(lt.ScheduleError, match=rf"stage 'B': split\(i\): {what} \d+ does not "
                                               r"fit a 32-bit loop extent.*2147483647"):
        s[B].split(s[B].op.axis[0], **kw)
    assert s.steps == []


def test_numpy_bool_factor_is_refused():
    A, B = _scale()
    s = lt.create_schedule(B)
    with pytest.raises(lt.ScheduleError, match=r"factor must be a positive int; got "
                                               r"np.True_"):
        s[B].split(s[B].op.axis[0], factor=np.bool_(True))


def test_split_of_an_extent_near_2_to_the_31_lowers():
    # was: OverflowError (numpy folding (2**31 - 1) + 3 in int32)
    n = 2**31 - 1
    A = lt.placeholder((n,), "float32", name="A")
    B = lt.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = lt.create_schedule(B)
    s[B].split(s[B].op.axis[0], factor=np.int64(4))
    text = str(lt.lower(s, [A, B]))
    assert "for i.outer in [0, 536870912):" in text, text
    assert "(2147483647 - (i.outer * 4))" in text, text


def test_fuse_beyond_32_bits():
    A = lt.placeholder((2**20, 2**12), "float32", name="A")
    B = lt.compute((2**20, 2**12), lambda i, j: A[i, j] * 2.0, name="B")
    s = lt.create_schedule(B)
    with pytest.raises(lt.ScheduleError, match=r"stage 'B': fuse\(i, j\): the fused loop would "
                                               r"run 4294967296 iterations.*split them first"):
        s[B].fuse(*s[B].op.axis)
    io, ii = s[B].split(s[B].op.axis[0], factor=2**10)
    s[B].fuse(ii, s[B].op.axis[1])           # 2**22 iterations: fine


def _two_named_c():
    A = lt.placeholder((5, 7), "float32", name="A")
    C1 = lt.compute((5, 7), lambda i, j: A[i, j] + 1.0, name="C")
    C2 = lt.compute((5, 7), lambda i, j: C1[i, j] * 2.0, name="C")
    return A, C1, C2


def test_stage_by_an_ambiguous_tensor_name():
    A, C1, C2 = _two_named_c()
    s = lt.create_schedule(C2)
    with pytest.raises(lt.ScheduleError, match=r"s\['C'\]: the name is ambiguous: 2 stages "
                                               r"compute a tensor called 'C' \('C', 'C_1'\); "
                                               r"index by the tensor instead"):
        s["C"]
    assert s[C1].name == "C" and s[C2].name == "C_1"


def test_stage_by_tensor_or_stage_name():
    A, C1, C2 = _two_named_c()
    s = lt.create_schedule(C2)
    assert s["C_1"] is s[C2]
    A, B = _scale()
    s = lt.create_schedule(B)
    assert s["B"] is s[B]
    cache = s.cache_write(B, "local")
    assert s["B.local"] is s[cache] and s["B"] is s[B]
    with pytest.raises(lt.ScheduleError, match=r"s\['D'\]: no stage computes a tensor called "
                                               r"'D'; stages are \['B.local', 'B'\]"):
        s["D"]
