"""Regression tests for bugs the fuzzer and the differential suites found, one each."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.schedule import steps


def test_reader_attached_to_a_loop_split_after_compute_at_is_a_schedule_error():
    # was: ValueError from list.index inside lowering (fuzz seeds 20241091, 20241220, ...)
    A = lt.placeholder((13, 29), "float32", name="A")
    P = lt.compute((13, 29), lambda i, j: A[i, j] + 1.0, name="P")
    Q = lt.compute((13, 29), lambda i, j: P[i, j] * 2.0, name="Q")
    R = lt.compute((13, 29), lambda i, j: P[i, j] + Q[i, j], name="R")
    s = lt.create_schedule(R)
    i, j = s[R].op.axis
    s[Q].compute_at(s[R], i)
    s[P].compute_at(s[R], j)
    s[R].split(i, factor=2)
    with pytest.raises(lt.ScheduleError, match=r"loop 'i' of 'R' was split or fused after "
                                               r"compute_at"):
        lt.lower(s, [A, R])


def _scale():
    A = lt.placeholder((13, 29), "float32", name="A")
    return A, lt.compute((13, 29), lambda i, j: A[i, j] * 2.0, name="B")


def test_replay_of_cache_read_after_two_cache_writes_finds_the_right_tensor():
    # was: both cache tensors were called 'B.local'; replay cached the wrong one (seed 20241011)
    A, B = _scale()
    s = lt.create_schedule(B)
    s.cache_write(B, "local")
    c2 = s.cache_write(B, "local")
    s.cache_read(c2, "local", [B])
    A2, B2 = _scale()
    s2 = lt.replay(lt.create_schedule(B2), steps.loads(steps.dumps(s.steps)))
    assert str(lt.lower(s, [A, B])) == str(lt.lower(s2, [A2, B2]))
    a = np.random.default_rng(0).random((13, 29), dtype=np.float32)
    out = np.empty_like(a)
    lt.build(s2, [A2, B2])(a, out)
    np.testing.assert_array_equal(out, a * 2)


def test_refused_tile_leaves_the_stage_unchanged():
    A = lt.placeholder((13, 29), "float32", name="A")
    T = lt.compute((29, 13), lambda i, j: A[j, i], name="T")
    s = lt.create_schedule(T)
    i, j = s[T].op.axis
    s[T].vectorize(j)
    with pytest.raises(lt.ScheduleError, match="already annotated vectorize"):
        s[T].tile(i, j, 4, 5)
    assert [v.name for v in s[T].leaf_iter_vars] == ["i", "j"]
    assert [str(x) for x in s.steps] == ["s[T].vectorize(s[T].loop('j'))"]


def test_python_bool_condition_is_refused():
    # `k % 3 != 0` compares expression trees and is a Python bool: it must not become "True"
    A = lt.placeholder((7, 9), "float32", name="A")
    k = lt.reduce_axis(9, name="k")
    with pytest.raises(lt.LangError, match=r"lt.not_equal"):
        lt.compute((7,), lambda i: lt.sum(A[i, k], axis=k, where=(k % 3 != 0)), name="S")


def test_big_stack_buffer_does_not_displace_a_register_tile():
    # a 64 KB packed panel on the stack made gcc keep the 8x32 accumulator tile in memory
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import matmul
    s, tensors = matmul.hand_schedule(256, 256, 256)
    src = lt.build(s, tensors).source
    assert "float B_local[" not in src and "lt_alloc" in src
