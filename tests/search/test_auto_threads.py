"""The auto sketch's knob ``parallel``: a kernel too small to pay for an OpenMP region runs on
one thread in the fallback (config 0), a large one on the machine's threads; both choices are
exact on every rule (contractions with and without an epilogue, per-row stages, rfactored
reductions, plain vectorized stages); a tiny kernel or a one-thread machine has no knob."""
from __future__ import annotations

import looptune as lt
import numpy as np
import pytest
from looptune.search import auto_task
from looptune.search.auto_rules import PARALLEL_MIN_CYCLES, machine_of, parallel_choices
from util import check_outputs, pick_config

TWO = "c -threads=2"


def _parallel(s, tensors) -> bool:
    return "parallel" in str(lt.lower(s, tensors))


def _both(task, tensors, want) -> None:
    """Each choice of ``parallel`` gives parallel loops or none, and is exact."""
    for par in (True, False):
        s, _ = task.instantiate(pick_config(task.config_space, {"parallel": par}))
        assert _parallel(s, tensors) == par
        check_outputs(s, tensors, want)


def _matmul(N, M, K, relu=False):
    A = lt.placeholder((N, K), "float32", name="A")
    B = lt.placeholder((K, M), "float32", name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    if relu:
        C = lt.compute((N, M), lambda i, j: lt.max(C[i, j], 0.0), name="D")
    return A, B, C


def _mm(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def test_a_tiny_kernel_has_no_knob_and_no_threads():
    X = lt.placeholder((23, 37), "float32", name="X")
    Y = lt.compute((23, 37), lambda i, j: X[i, j] * 2.0 + 1.0, name="Y")
    task = auto_task([X, Y], target=TWO)
    assert "parallel" not in task.config_space.knobs
    s, _ = task.instantiate(0)
    assert not _parallel(s, [X, Y])
    check_outputs(s, [X, Y], lambda x: x.astype(np.float64) * 2 + 1)


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.slow
def test_a_small_contraction_runs_on_one_thread_first(relu):
    A, B, C = _matmul(70, 125, 45, relu)
    task = auto_task([A, B, C], target=TWO)
    assert task.config_space.knobs["parallel"].values == [False, True]
    assert not _parallel(task.instantiate(0)[0], [A, B, C])
    _both(task, [A, B, C], (lambda a, b: np.maximum(_mm(a, b), 0)) if relu else _mm)
    for values in ({"C.order": "kblock", "C.red0": 8, "parallel": False},
                   {"C.cache": False, "parallel": False} if not relu else
                   {"C.mid0": "all", "parallel": False}):
        s, _ = task.instantiate(pick_config(task.config_space, values))
        check_outputs(s, [A, B, C], (lambda a, b: np.maximum(_mm(a, b), 0)) if relu else _mm)


def test_a_large_kernel_runs_on_threads_first():
    X = lt.placeholder((301, 517), "float32", name="X")
    Y = lt.compute((301, 517), lambda i, j: lt.exp(X[i, j]), name="Y")
    task = auto_task([X, Y], target=TWO)
    assert task.config_space.knobs["parallel"].values == [True, False]
    assert _parallel(task.instantiate(0)[0], [X, Y])
    _both(task, [X, Y], lambda x: np.exp(x.astype(np.float64)))


def test_a_one_thread_machine_has_no_knob():
    X = lt.placeholder((301, 517), "float32", name="X")
    Y = lt.compute((301, 517), lambda i, j: lt.exp(X[i, j]), name="Y")
    task = auto_task([X, Y], target="c -threads=1")
    assert "parallel" not in task.config_space.knobs
    assert not _parallel(task.instantiate(0)[0], [X, Y])


def test_softmax_rows_on_one_thread_or_on_threads_are_exact():
    X = lt.placeholder((61, 301), "float32", name="X")
    k = lt.reduce_axis(301, name="k")
    mx = lt.compute((61,), lambda i: lt.max(X[i, k], axis=k), name="mx")
    e = lt.compute((61, 301), lambda i, j: lt.exp(X[i, j] - mx[i]), name="e")
    k2 = lt.reduce_axis(301, name="k2")
    sm = lt.compute((61,), lambda i: lt.sum(e[i, k2], axis=k2), name="sm")
    Y = lt.compute((61, 301), lambda i, j: e[i, j] / sm[i], name="Y")
    task = auto_task([X, Y], target=TWO)
    assert "parallel" in task.config_space.knobs

    def want(x):
        z = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
        return z / z.sum(1, keepdims=True)
    _both(task, [X, Y], want)


def test_rfactored_row_sums_on_one_thread_or_on_threads_are_exact():
    X = lt.placeholder((193, 2053), "float32", name="X")
    k = lt.reduce_axis(2053, name="k")
    rows = lt.compute((193,), lambda i: lt.sum(X[i, k] * X[i, k], axis=k), name="rows")
    task = auto_task([X, rows], target=TWO)
    assert task.config_space.knobs["rows.lanes"].values[0] > 1
    _both(task, [X, rows], lambda a: (a.astype(np.float64) ** 2).sum(1))


def test_the_estimate_grows_with_the_work():
    m = machine_of(TWO)
    small = _matmul(16, 16, 16)[2].op
    large = _matmul(512, 512, 512)[2].op
    assert parallel_choices([small.output.op], m) == []
    assert parallel_choices([large], m) == [True, False]
    assert parallel_choices([large], machine_of("c -threads=1")) == []
    assert PARALLEL_MIN_CYCLES > 0
