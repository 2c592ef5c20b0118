"""Coefficient tables in the auto sketch (``auto_rules.table_axes``): a stage selecting among
constants along an axis (a Winograd transform's rows of coefficients) or along an axis modulo
m (its output transform's columns) gets those loops unrolled, so every select folds; exact
for the first choice and sampled configs, and the Winograd conv2d's whole auto schedule
keeps no select on a table."""
from __future__ import annotations

import sys
from pathlib import Path

import looptune as lt
import numpy as np
from looptune.operators import load_operators
from looptune.report import make_arrays
from looptune.search import auto_task
from looptune.search.auto_rules import TABLE_COPIES, table_axes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
COEF = (2.0, -3.0, 0.5, 1.0)


def _pick(i, n, value):
    e = value(n - 1)
    for a in reversed(range(n - 1)):
        e = lt.if_then_else(lt.equal(i, a), value(a), e)
    return e


def _run(task, index, tensors, want, atol=0.0):
    s, _ = task.instantiate(index)
    inputs, outs, args = make_arrays(tensors, 1)
    for o in outs:
        o.fill(np.nan)
    lt.build(s, tensors)(*args)
    np.testing.assert_allclose(outs[0], want(*inputs), rtol=1e-6, atol=atol)
    return str(lt.lower(s, tensors))


def _configs(task, n):
    sp = task.config_space
    return [0] + [c.index for c in sp.sample(min(n, sp.size), 3)]


def test_rows_of_coefficients_are_unrolled_and_fold():
    A = lt.placeholder((37, 45), "float32", name="A")
    Y = lt.compute((4, 37, 45), lambda t, i, j: _pick(t, 4, lambda a: A[i, j] * COEF[a]),
                   name="Y")
    assert [(ax.var.name, m) for ax, m in table_axes(Y.op)] == [("t", None)]
    task = auto_task([A, Y])

    def want(a):
        return np.stack([a * c for c in COEF])
    for k in _configs(task, 5):
        text = _run(task, k, [A, Y], want)
        assert "==" not in text, text                # every select folded


def test_a_modular_table_on_the_vector_axis_splits_it():
    """out[i, x] = coef[x % 4] * A[i, x // 4]: x split by 4, the outer part vectorized, the
    inner unrolled inside the vector loop."""
    A = lt.placeholder((9, 13), "float32", name="A")
    Y = lt.compute((9, 52), lambda i, x: _pick(x % 4, 4, lambda a: A[i, x // 4] * COEF[a]),
                   name="Y")
    assert [(ax.var.name, m) for ax, m in table_axes(Y.op)] == [("x", 4)]
    task = auto_task([A, Y])

    def want(a):
        return (a[:, :, None] * np.array(COEF, np.float32)).reshape(9, 52)
    for k in _configs(task, 5):
        text = _run(task, k, [A, Y], want)
        assert "==" not in text, text


def test_no_table_where_the_selects_guard_bounds_or_the_copies_are_too_many():
    A = lt.placeholder((8, 8), "float32", name="A")
    pad = lt.compute((10, 10), lambda y, x: lt.if_then_else(
        lt.all(y >= 1, y < 9, x >= 1, x < 9), A[y - 1, x - 1], 0.0), name="pad")
    assert table_axes(pad.op) == []
    n = 8
    big = lt.compute((n, n, n, 8), lambda a, b, c, j: _pick(a, n, lambda u: _pick(
        b, n, lambda v: _pick(c, n, lambda w: A[j, u] * float(v + w)))), name="big")
    assert n ** 3 > TABLE_COPIES and table_axes(big.op) == []


def test_winograd_conv2d_auto_schedule_folds_every_table():
    ops = load_operators(str(EXAMPLES / "conv2d.py"))
    op = next(o for o in ops if o.name == "conv2d_winograd")
    cv = sys.modules[op.hand_schedule.__module__]
    args = (1, 5, 9, 11, 6, 3, 3, 1, 1)
    tensors = op.algorithm(*args)
    stages = {t.name: t.op for t in _ops(tensors[-1])}
    assert [(ax.var.name, m) for ax, m in table_axes(stages["V"])] == [("b", None)]
    assert [(ax.var.name, m) for ax, m in table_axes(stages["out"])] == [("x", 4)]
    task = auto_task(tensors)
    text = _run(task, 0, tensors, lambda d, w: cv.reference(d, w, 1, 1), atol=1e-4)
    assert "==" not in text
    knobs = task.config_space.knobs        # the tables are never inlined (into the product's
    for name in ("W1", "T1", "V", "O1"):   # unrolled micro-kernel: 4 MB of C, 100 s of gcc)
        assert knobs[f"{name}.inline"].values == [False], name
    assert sorted(knobs["dp.inline"].values) == [False, True]


def _ops(t):
    seen, out, todo = set(), [], [t]
    while todo:
        x = todo.pop()
        if id(x) in seen or not hasattr(x.op, "body"):
            continue
        seen.add(id(x))
        out.append(x)
        todo.extend(x.op.inputs)
    return out


def test_only_dags_with_tables_get_the_new_sketchs_task_names():
    """Sketches 14 and 15 changed only the spaces of DAGs with a coefficient table: every
    other task keeps its sketch-13 name, so the logs tuned before still apply."""
    from looptune.search.auto import SKETCH_VERSION, _sketch_of
    A = lt.placeholder((8, 8), "float32", name="A")
    B = lt.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    T = lt.compute((4, 8), lambda t, j: _pick(t, 4, lambda a: A[a, j] * COEF[a]), name="T")
    assert _sketch_of([B]) == 13 and _sketch_of([T]) == SKETCH_VERSION == 15
    assert auto_task([A, B]).name != auto_task([A, T]).name
