"""Sizes: numpy integers are accepted wherever Python ints are; a dimension or extent beyond
32 bits is a LangError that says so (not an OverflowError from numpy)."""
from __future__ import annotations

import numpy as np
import pytest
from util import run_check

import looptune as lt
from looptune import LangError


@pytest.mark.parametrize("n", [np.int64(7), np.int32(7), np.uint16(7), np.intp(7)])
def test_numpy_integer_shapes_and_reduce_extents(n):
    A = lt.placeholder((n, np.int64(5)), "float32", name="A")
    k = lt.reduce_axis(np.int64(5), name="k")
    S = lt.compute((n,), lambda i: lt.sum(A[i, k], axis=k), name="S")
    k2 = lt.reduce_axis((np.int64(1), np.int32(4)), name="k2")
    W = lt.compute(n, lambda i: lt.sum(A[i, k2], axis=k2), name="W")
    assert A.shape == (7, 5) and all(type(d) is int for d in A.shape)
    assert S.shape == (7,) and W.shape == (7,)
    assert k.extent.dtype == "int32" and k2.min.dtype == "int32"
    a = np.random.default_rng(0).random((7, 5), dtype=np.float32)
    run_check(lt.create_schedule([S, W]), [A, S, W], {"A": a},
              {"S": a.sum(axis=1), "W": a[:, 1:4].sum(axis=1)})


def test_numpy_bool_is_not_a_size():
    with pytest.raises(LangError, match=r"shape entry np.True_ is not an int"):
        lt.placeholder((np.bool_(True), 3), "float32", name="A")


def test_zero_numpy_size_is_refused():
    with pytest.raises(LangError, match=r"placeholder 'A': shape entry 0 must be positive"):
        lt.placeholder((np.int64(0),), "float32", name="A")


@pytest.mark.parametrize("n", [2**31, 2**40, np.int64(2**31)])
def test_dimension_beyond_32_bits(n):
    with pytest.raises(LangError, match=r"placeholder 'A': shape entry \d+ is too large: loop "
                                        r"variables and extents are 32-bit.*2147483647"):
        lt.placeholder((3, n), "float32", name="A")
    with pytest.raises(LangError, match=r"compute 'B': shape entry \d+ is too large"):
        lt.compute((n,), lambda i: i * 2, name="B")


def test_largest_32_bit_dimension_is_accepted():
    A = lt.placeholder((2**31 - 1,), "float32", name="A")
    assert A.shape == (2**31 - 1,)


def test_reduce_extent_beyond_32_bits():
    with pytest.raises(LangError, match=r"reduce_axis 'k': the extent 2147483648 is too large"):
        lt.reduce_axis(2**31, name="k")
    with pytest.raises(LangError, match=r"reduce_axis 'k': the extent 2147483648 is too large"):
        lt.reduce_axis((np.int64(0), np.int64(2**31)), name="k")
