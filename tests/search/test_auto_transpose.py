"""A transpose's 2-D tile in the auto sketch pairs the output's innermost loop with the axis
its load reads along: NCHW16c -> NCHW reads ``in[c // 16, y, x, c % 16]``, so the tile is
channels x columns (each 16 x 16 block read once) rather than rows x columns; exact at odd
sizes for the first choice and sampled configs."""
from __future__ import annotations

import looptune as lt
import numpy as np
from looptune.report import make_arrays
from looptune.search import auto_task
from looptune.search.auto_rules import row_axis, transposed_axis


def _run(s, tensors, want):
    inputs, outs, args = make_arrays(tensors, 1)
    for o in outs:
        o.fill(np.nan)
    lt.build(s, tensors)(*args)
    np.testing.assert_array_equal(outs[0], want(*inputs))


def _configs(task, n):
    sp = task.config_space
    return [0] + [c.index for c in sp.sample(min(n, sp.size), 0)]


def test_nchwc_to_nchw_tiles_channels_by_columns():
    X = lt.placeholder((2, 3, 5, 7, 16), "float32", name="X")
    Y = lt.compute((2, 48, 5, 7), lambda n, c, y, x: X[n, c // 16, y, x, c % 16], name="Y")
    assert transposed_axis(Y.op) == 1 and row_axis(Y.op) == 1
    task = auto_task([X, Y])
    assert task.config_space.knobs["Y.rows"].values[0] > 1
    s, _ = task.instantiate(0)
    text = str(lt.lower(s, [X, Y]))
    assert "c.inner" in text and "y.inner" not in text

    def want(x):
        return x.transpose(0, 1, 4, 2, 3).reshape(2, 48, 5, 7)
    for i in _configs(task, 6):
        _run(task.instantiate(i)[0], [X, Y], want)


def test_a_plain_transpose_and_an_elementwise_stage_keep_the_second_innermost_axis():
    X = lt.placeholder((5, 67, 45), "float32", name="X")
    T = lt.compute((5, 45, 67), lambda b, i, j: X[b, j, i], name="T")
    assert transposed_axis(T.op) == 1
    E = lt.compute((5, 67, 45), lambda b, i, j: X[b, i, j] + 1.0, name="E")
    assert transposed_axis(E.op) is None and row_axis(E.op) == 1
    task = auto_task([X, T])
    for i in _configs(task, 4):
        _run(task.instantiate(i)[0], [X, T], lambda x: x.transpose(0, 2, 1))
