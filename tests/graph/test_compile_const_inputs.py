"""Operators that need an input at compile time (pads, axes, shapes, split sizes): the error
for a run-time value names the input value, what it is for, and where it comes from."""
from __future__ import annotations

import numpy as np
import pytest
from looptune.graph import Graph, GraphError
from looptune.graph.ops._util import tt
from looptune.graph.registry import _OPS, OpDef, OpPattern, input_role, register


@pytest.mark.parametrize("op, k, role, extra", [
    ("Pad", 1, "pads", {}),
    ("Reshape", 1, "shape", {}),
    ("Expand", 1, "shape", {}),
    ("ReduceSum", 1, "axes", {}),
    ("Unsqueeze", 1, "axes", {}),
    ("Split", 1, "split", {"outputs": 2}),
])
def test_a_graph_input_where_a_constant_is_needed_is_named(op, k, role, extra):
    g = Graph("g")
    x = g.input("x", (2, 4))
    given = g.input("given_at_run_time", (2,), "int64")
    with pytest.raises(GraphError, match=(
            rf"node '\w+' \({op}\): input {k} \({role}, value 'given_at_run_time'\) must be a "
            r"constant known at compile time \(an initializer or a Constant node\); it is a "
            r"graph input, given at run time; make it a constant \(g.const, or an ONNX "
            r"initializer\)$")):
        g.op(op, x, given, **extra)


def test_a_computed_value_where_a_constant_is_needed_names_its_producer():
    g = Graph("g")
    x = g.input("x", (2, 3))
    pads = g.op("Abs", g.input("p", (4,), "int64"), name="pads_abs")
    with pytest.raises(GraphError, match=(
            r"node 'pad' \(Pad\): input 1 \(pads, value 'pads_abs'\) must be a constant "
            r".*; it is computed at run time by node 'pads_abs' \(Abs\); the compiler needs "
            r"it folded to a constant \(lt.graph.optimize folds")):
        g.op("Pad", x, pads, name="pad")


def test_a_slice_bound_read_at_compile_time_is_named():
    g = Graph("g")
    x = g.input("x", (5,))
    starts = g.const(np.array([1]))
    ends = g.input("ends", (1,), "int64")
    with pytest.raises(GraphError, match=r"input 2 \(ends, value 'ends'\) must be a constant"):
        g.op("Slice", x, starts, ends)


@pytest.fixture
def const_user():
    """An operator whose inference never reads its compile-time input 1."""
    opdef = OpDef("FxConstUser", OpPattern.ELEMWISE, lambda ctx: [ctx.in_types[0]],
                  lambda ctx, xs: [xs[0]], inputs=(2, 2), const_inputs=(1,))
    register(opdef)
    yield opdef
    del _OPS[opdef.name]


def test_an_unread_compile_time_input_is_refused_by_its_role(const_user):
    g = Graph("g")
    x = g.input("x", (3,))
    with pytest.raises(GraphError, match=r"node 'u' \(FxConstUser\): input 1 \(input 1 of "
                       r"FxConstUser, value 'x'\) must be a constant .* graph input"):
        g.op("FxConstUser", x, x, name="u")
    g.op("FxConstUser", x, g.const(np.zeros(3, "float32")))        # a constant is fine


def test_input_role_reads_the_onnx_schema_where_there_is_one():
    pytest.importorskip("onnx")
    assert input_role("Pad", 1) == "Pad's 'pads'"
    assert input_role("Slice", 4) == "Slice's 'steps'"
    assert input_role("NoSuchOp", 2) == "input 2 of NoSuchOp"


def test_a_missing_compile_time_value_breaking_inference_is_reported_as_such():
    def infer(ctx):                     # reads the value without ctx.const: crashes on None
        return [tt(tuple(int(s) for s in ctx.consts[1]), ctx.in_types[0].dtype)]
    register(OpDef("FxShapeFrom", OpPattern.INJECTIVE, infer, lambda ctx, xs: [xs[0]],
                   inputs=(2, 2), const_inputs=(1,)))
    try:
        g = Graph("g")
        x = g.input("x", (3,))
        with pytest.raises(GraphError, match=r"input 1 \(input 1 of FxShapeFrom, value 's'\) "
                           r"must be a constant .* graph input"):
            g.op("FxShapeFrom", x, g.input("s", (1,), "int64"))
    finally:
        del _OPS["FxShapeFrom"]
