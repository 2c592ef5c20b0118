"""Every validation branch of the language raises LangError (or TypeError/ValueError for bad
arguments) with a message that says what is wrong."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune import LangError


@pytest.fixture
def A():
    return lt.placeholder((4, 5), "float32", name="A")


def test_errors_form_one_family():
    assert issubclass(LangError, lt.LooptuneError)
    assert issubclass(lt.ScheduleError, lt.LooptuneError)
    assert issubclass(lt.BuildError, lt.LooptuneError)


# ---- indexing ----------------------------------------------------------------------------

def test_too_few_indices_names_tensor_rank_and_count(A):
    with pytest.raises(LangError, match=r"'A' has rank 2.*indexed with 1 ind"):
        lt.compute((4,), lambda i: A[i], name="B")


def test_too_many_indices(A):
    with pytest.raises(LangError, match=r"'A' has rank 2.*indexed with 3 ind"):
        lt.compute((4, 5), lambda i, j: A[i, j, i], name="B")


def test_float_index_is_refused(A):
    with pytest.raises(LangError, match=r"'A': index 1 .*dtype float64; indices must be integers"):
        lt.compute((4, 5), lambda i, j: A[i, j * 0.5], name="B")


def test_float_tensor_value_as_index_is_refused(A):
    with pytest.raises(LangError, match=r"'A': index 0 .*dtype float32"):
        lt.compute((4, 5), lambda i, j: A[A[i, j], j], name="B")


def test_python_float_index_is_refused(A):
    with pytest.raises(LangError, match=r"index 0 .*float"):
        lt.compute((4, 5), lambda i, j: A[1.5, j], name="B")


def test_slice_index_is_refused(A):
    with pytest.raises(LangError, match=r"'A': index 1 is a slice"):
        lt.compute((4,), lambda i: A[i, 0:3], name="B")


def test_tensor_astype_points_to_elementwise_cast(A):
    with pytest.raises(LangError, match=r"'A'.astype"):
        A.astype("int32")


# ---- compute definitions ---------------------------------------------------------------

def test_fcompute_arity_must_match_rank(A):
    with pytest.raises(LangError, match=r"compute 'B': the shape has 2 dimensions but fcompute "
                                        r"takes 1"):
        lt.compute((4, 5), lambda i: A[i, 0], name="B")


def test_fcompute_returning_several_values(A):
    with pytest.raises(LangError, match=r"compute 'B': fcompute returned 2 values"):
        lt.compute((4, 5), lambda i, j: (A[i, j], A[i, j]), name="B")


def test_fcompute_returning_a_non_expression(A):
    with pytest.raises(LangError, match=r"compute 'B': cannot use 'x'"):
        lt.compute((4, 5), lambda i, j: "x", name="B")


@pytest.mark.parametrize("shape", [(0, 3), (3, -1)])
def test_non_positive_shape(shape):
    with pytest.raises(LangError, match=r"placeholder 'P': shape entry -?\d+ must be positive"):
        lt.placeholder(shape, name="P")


@pytest.mark.parametrize("shape", [(3.0, 2), (True, 2), ("4",)])
def test_non_integer_shape(shape):
    with pytest.raises(LangError, match=r"placeholder 'P': shape entry"):
        lt.placeholder(shape, name="P")


def test_var_must_be_integer():
    with pytest.raises(LangError, match=r"lt.var\('n'\): sizes are integers; got dtype float32"):
        lt.var("n", "float32")


@pytest.mark.parametrize("extent", [0, -3])
def test_reduce_axis_extent_must_be_positive(extent):
    with pytest.raises(LangError, match=r"reduce_axis 'k': the extent -?\d+ must be a positive "
                                        r"integer"):
        lt.reduce_axis(extent, name="k")


# ---- dtypes ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float31", "complex64", "str", "object"])
def test_unknown_dtype(dtype):
    with pytest.raises(LangError, match=r"unknown dtype .*use one of .*float32"):
        lt.placeholder((3,), dtype, name="P")


def test_unknown_dtype_in_cast(A):
    with pytest.raises(LangError, match=r"unknown dtype 'bogus'"):
        lt.compute((4, 5), lambda i, j: A[i, j].astype("bogus"), name="B")


def test_constant_that_does_not_fit_the_dtype():
    X = lt.placeholder((3,), "int8", name="X")
    with pytest.raises(LangError, match=r"constant 1000 does not fit the dtype int8"):
        lt.compute((3,), lambda i: X[i] + 1000, name="Y")


# ---- reductions --------------------------------------------------------------------------

def test_reduction_nested_in_arithmetic(A):
    k = lt.reduce_axis(5, name="k")
    with pytest.raises(LangError, match=r"compute 'B': a reduction .* may only be the whole body"):
        lt.compute((4,), lambda i: lt.sum(A[i, k], axis=k) * 2.0, name="B")


def test_reduction_inside_a_reduction(A):
    k = lt.reduce_axis(5, name="k")
    k2 = lt.reduce_axis(5, name="k2")
    with pytest.raises(LangError, match=r"compute 'B': a reduction"):
        lt.compute((4,), lambda i: lt.sum(A[i, k] + lt.max(A[i, k2], axis=k2), axis=k),
                   name="B")


def test_reduction_inside_if_then_else(A):
    k = lt.reduce_axis(5, name="k")
    with pytest.raises(LangError, match=r"compute 'B': a reduction"):
        lt.compute((4,), lambda i: lt.if_then_else(i > 1, lt.sum(A[i, k], axis=k), 0.0),
                   name="B")


def test_reduction_axis_not_listed(A):
    """The body uses k but reduces over another axis: k is unknown to the compute."""
    k = lt.reduce_axis(5, name="k")
    k2 = lt.reduce_axis(5, name="k2")
    with pytest.raises(LangError, match=r"compute 'B': the body uses k, which is neither"):
        lt.compute((4,), lambda i: lt.sum(A[i, k], axis=k2), name="B")


def test_reduction_axis_never_declared(A):
    k = lt.reduce_axis(5, name="k")
    with pytest.raises(LangError, match=r"the body uses k,"):
        lt.compute((4, 5), lambda i, j: A[i, k], name="B")


def test_reduction_over_a_spatial_axis(A):
    with pytest.raises(LangError, match=r"lt.sum: axis .* is not a reduction axis"):
        lt.compute((4, 5), lambda i, j: lt.sum(A[i, j], axis=j), name="B")


def test_reduction_over_a_non_axis(A):
    with pytest.raises(LangError, match=r"lt.prod: axis 3 is not a reduction axis"):
        lt.compute((4,), lambda i: lt.prod(A[i, 0], axis=3), name="B")


def test_reduction_with_empty_axis_list(A):
    with pytest.raises(LangError, match=r"lt.sum: axis is empty"):
        lt.compute((4,), lambda i: lt.sum(A[i, 0], axis=[]), name="B")


def test_reduction_where_must_be_bool(A):
    k = lt.reduce_axis(5, name="k")
    with pytest.raises(LangError, match=r"sum\(where=...\)' needs bool"):
        lt.compute((4,), lambda i: lt.sum(A[i, k], axis=k, where=A[i, k]), name="B")


def test_max_needs_two_expressions_or_an_axis(A):
    with pytest.raises(LangError, match=r"lt.max\(.*\) needs a second expression or axis="):
        lt.max(A[0, 0])


def test_min_with_both_second_expression_and_axis(A):
    k = lt.reduce_axis(5, name="k")
    with pytest.raises(LangError, match=r"lt.min: give either two expressions or"):
        lt.min(A[0, k], A[1, k], axis=k)


# ---- operators ---------------------------------------------------------------------------

def test_integer_true_division_suggests_floordiv():
    X = lt.placeholder((6,), "int32", name="X")
    with pytest.raises(LangError, match=r"'/' on integers .* use '//'"):
        lt.compute((6,), lambda i: X[i] / 2, name="Y")


def test_index_true_division_suggests_floordiv(A):
    with pytest.raises(LangError, match=r"'/' on integers"):
        lt.compute((4, 5), lambda i, j: A[i // 1, j / 2], name="B")


@pytest.mark.parametrize("form", ["and", "or", "not", "if"])
def test_python_truth_value_of_an_expression(A, form):
    def body(i, j):
        c1, c2 = A[i, j] > 0.0, A[i, j] < 1.0
        if form == "and":
            return c1 and c2
        if form == "or":
            return c1 or c2
        if form == "not":
            return not c1
        return A[i, j] if c1 else 0.0
    with pytest.raises(LangError, match=r"truth value .*use & \| ~ instead of and/or/not"):
        lt.compute((4, 5), body, name="B")


def test_chained_comparison_is_refused(A):
    with pytest.raises(LangError, match=r"truth value"):
        lt.compute((4, 5), lambda i, j: lt.if_then_else(0 < i < 3, A[i, j], 0.0), name="B")


def test_logical_ops_need_bool(A):
    with pytest.raises(LangError, match=r"'&&' needs bool expressions"):
        lt.compute((4, 5), lambda i, j: lt.if_then_else(A[i, j] & (i > 0), 1.0, 0.0), name="B")


def test_if_then_else_condition_must_be_bool(A):
    with pytest.raises(LangError, match=r"'if_then_else' needs bool"):
        lt.compute((4, 5), lambda i, j: lt.if_then_else(A[i, j], 1.0, 0.0), name="B")


def test_integer_power_needs_constant_exponent():
    X = lt.placeholder((6,), "int32", name="X")
    with pytest.raises(LangError, match=r"integer power .* constant exponent in \[0, 16\]"):
        lt.compute((6,), lambda i: X[i] ** X[i], name="Y")


def test_non_expression_operand(A):
    with pytest.raises(LangError, match=r"cannot use \[1\] \(a list\)"):
        lt.compute((4, 5), lambda i, j: A[i, j] + [1], name="B")


def test_equality_operator_is_structural_not_elementwise(A):
    """``==`` compares expression trees; elementwise equality is lt.equal."""
    e = lt.equal(A[0, 0], 1.0)
    assert e.dtype == "bool"
    assert (A[0, 0] + 1.0) == (A[0, 0] + 1.0)


def test_weak_scalar_and_promotion_rules():
    X8 = lt.placeholder((3,), "int8", name="X8")
    F = lt.placeholder((3,), "float32", name="F")
    D = lt.placeholder((3,), "float64", name="D")
    assert (X8[0] + 1).dtype == "int8"
    assert (F[0] * 2.0).dtype == "float32"
    assert (X8[0] + F[0]).dtype == "float32"
    assert (F[0] + D[0]).dtype == "float64"
    assert (X8[0] * 2.5).dtype == np.result_type(np.int8, 2.5).name
    assert lt.exp(X8[0]).dtype == "float32"
    assert (F[0] < 1.0).dtype == "bool"
