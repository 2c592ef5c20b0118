"""Static range checks of reads (lang/bounds.py): a provably out-of-range read is a LangError
at compute() time; guarded reads (padding), reads that stay inside, gathers and reads whose
range is not exact are accepted, and the accepted ones compute the right numbers."""
from __future__ import annotations

import numpy as np
import pytest
from util import run_check

import looptune as lt
from looptune import LangError


@pytest.fixture
def A():
    return lt.placeholder((13,), "float32", name="A")


@pytest.fixture
def M():
    return lt.placeholder((7, 11), "float32", name="M")


# ---- refused: the message names the compute, the read, the index and both ranges ------------

def test_read_past_the_end(A):
    with pytest.raises(LangError, match=r"compute 'B': A\[\(i \+ 1\)\] reads outside 'A': "
                                        r"index 0 is \(i \+ 1\), which takes the values "
                                        r"\[1, 13\], but dimension 0 of 'A' has extent 13 "
                                        r"\(indices 0 to 12\).*lt.if_then_else"):
        lt.compute((13,), lambda i: A[i + 1], name="B")


def test_read_before_the_start(A):
    with pytest.raises(LangError, match=r"index 0 is \(i - 1\), which takes the values "
                                        r"\[-1, 11\]"):
        lt.compute((13,), lambda i: A[i - 1], name="B")


def test_second_dimension_of_a_2d_read(M):
    with pytest.raises(LangError, match=r"M\[i, \(j \* 2\)\] reads outside 'M': index 1 is "
                                        r"\(j \* 2\), which takes the values \[0, 20\], but "
                                        r"dimension 1 of 'M' has extent 11"):
        lt.compute((7, 11), lambda i, j: M[i, j * 2], name="B")


def test_reduction_window_past_the_end(A):
    k = lt.reduce_axis(3, name="k")
    with pytest.raises(LangError, match=r"compute 'S': A\[\(i \+ k\)\].*\[0, 14\]"):
        lt.compute((13,), lambda i: lt.sum(A[i + k], axis=k), name="S")


def test_floor_division_index(A):
    with pytest.raises(LangError, match=r"index 0 is \(i // 2\), which takes the values "
                                        r"\[0, 13\]"):
        lt.compute((27,), lambda i: A[i // 2], name="B")


def test_symbolic_size_one_past_the_end():
    n = lt.var("n")
    X = lt.placeholder((n,), "float32", name="X")
    with pytest.raises(LangError, match=r"takes the values \[1, n\], but dimension 0 of 'X' "
                                        r"has extent n \(indices 0 to \(n - 1\)\)"):
        lt.compute((n,), lambda i: X[i + 1], name="B")


def test_the_index_of_a_gather_is_itself_checked(A):
    idx = lt.placeholder((13,), "int32", name="idx")
    with pytest.raises(LangError, match=r"idx\[\(i \+ 1\)\] reads outside 'idx'"):
        lt.compute((13,), lambda i: A[idx[i + 1]], name="G")


def test_guard_that_does_not_cover_the_read(A):
    with pytest.raises(LangError, match=r"reads outside 'A'"):
        lt.compute((13,), lambda i: lt.if_then_else(i <= 12, A[i + 1], 0.0), name="B")


def test_read_on_the_untaken_side_of_a_guard_is_still_checked(A):
    # the else side runs where i < 1 is false: i in [1, 12], so A[i + 1] reaches 13
    with pytest.raises(LangError, match=r"takes the values \[2, 13\]"):
        lt.compute((13,), lambda i: lt.if_then_else(i < 1, 0.0, A[i + 1]), name="B")


# ---- accepted --------------------------------------------------------------------------------

def _run(out, inputs, expected):
    s = lt.create_schedule(out)
    args = [t for t in inputs] + [out]
    run_check(s, args, {t.name: v for t, v in inputs.items()}, {out.name: expected})


def test_padding_guard_is_not_a_read_outside(A):
    a = np.random.default_rng(0).random(13, dtype=np.float32)
    B = lt.compute((14,), lambda i: lt.if_then_else(i >= 1, A[i - 1], 0.0) +
                   lt.if_then_else(i < 13, A[lt.min(i, 12)], 0.0), name="B")
    want = np.concatenate([[0], a]) + np.concatenate([a, [0]])
    _run(B, {A: a}, want)


def test_two_sided_padding_with_lt_all(M):
    m = np.random.default_rng(1).random((7, 11), dtype=np.float32)
    P = lt.compute((9, 13), lambda y, x: lt.if_then_else(
        lt.all(y >= 1, y < 8, x >= 1, x < 12), M[y - 1, x - 1], 0.0), name="P")
    _run(P, {M: m}, np.pad(m, 1))


def test_short_circuit_and_guards_its_right_side(A):
    a = np.random.default_rng(2).random(13, dtype=np.float32) - 0.5
    # C's && does not evaluate A[13]
    B2 = lt.compute((14,), lambda i: lt.if_then_else((i < 13) & (A[i] > 0), 1.0, 0.0),
                    name="B2")
    _run(B2, {A: a}, np.concatenate([(a > 0).astype(np.float32), [0]]))


def test_reduction_where_guards_its_source(A):
    a = np.random.default_rng(3).random(13, dtype=np.float32)
    k = lt.reduce_axis(3, name="k")
    S = lt.compute((13,), lambda i: lt.sum(A[i + k], axis=k, where=(i + k < 13)), name="S")
    want = np.array([a[i:i + 3].sum() for i in range(13)], dtype=np.float32)
    _run(S, {A: a}, want)


def test_reads_inside_at_the_edges_are_accepted(A, M):
    lt.compute((12,), lambda i: A[i + 1], name="B")
    lt.compute((7,), lambda i: A[2 * i - i + 6], name="C")
    lt.compute((6, 11), lambda i, j: M[i + 1, 10 - j], name="D")
    k = lt.reduce_axis((1, 13), name="k")
    lt.compute((1,), lambda i: lt.sum(A[k - 1 + i], axis=k), name="S")


def test_not_exact_ranges_are_not_refused(A):
    # i - k over k <= i is in range, but its interval over the box [0,12]^2 is not: a guard
    # that is not a per-axis bound leaves the read unchecked rather than wrongly refused
    k = lt.reduce_axis(13, name="k")
    lt.compute((13,), lambda i: lt.sum(A[i - k], axis=k, where=(k <= i)), name="S")
    # the same axis twice (i*i, i + i // 2): bounds not known to be attained
    lt.compute((4,), lambda i: A[i * i - i], name="B")
    lt.compute((9,), lambda i: A[i + i // 2], name="C")


def test_gathers_are_not_checked_statically(A):
    idx = lt.placeholder((13,), "int32", name="idx")
    lt.compute((13,), lambda i: A[idx[i] + 100], name="G")   # -bounds-check checks at run time


def test_the_docstring_documents_gathers():
    assert "gather" in lt.compute.__doc__ and "-bounds-check" in lt.compute.__doc__
