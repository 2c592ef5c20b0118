"""Cast, CastLike, Identity, Dropout, Constant, Shape, Size; and the library as a whole: every
operator the issue lists is registered with a compute, a pattern and a doc line."""
from __future__ import annotations

import numpy as np
import pytest
from graph_util import check_op, one_node, rand, run_node

from looptune.graph import Graph, GraphError, OpPattern, get_op, supported_ops
from looptune.graph.registry import call_of


@pytest.mark.parametrize("to, dtype", [(6, "int32"), (7, "int64"), (11, "float64"),
                                       (9, "bool"), ("float16", "float16"), (3, "int8")])
def test_cast_from_float(rng, to, dtype):
    x = rand(rng, (3, 5), lo=-3, hi=3)
    check_op("Cast", [x], to=to, expect=[x.astype(dtype)])


def test_cast_from_int_castlike_identity(rng):
    xi = rand(rng, (4,), "int64", -100, 100)
    check_op("Cast", [xi], to=1, expect=[xi.astype("float32")])
    check_op("CastLike", [xi, np.zeros(1, "float64")], consts=(1,),
             expect=[xi.astype("float64")])
    x = rand(rng, (2, 3))
    check_op("Identity", [x], expect=[x])


def test_cast_uses_onnx_names_when_installed():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from looptune.graph.ops.misc import ONNX_DTYPES
    for code, name in ONNX_DTYPES.items():
        assert helper.tensor_dtype_to_np_dtype(code).name == name
    with pytest.raises(GraphError, match=r"to=16 \(BFLOAT16\) is not supported"):
        one_node("Cast", [np.zeros(2, "float32")], to=TensorProto.BFLOAT16)


def test_dropout_is_a_copy_with_an_all_true_mask(rng):
    x = rand(rng, (3, 4))
    check_op("Dropout", [x], outputs=2, expect=[x, np.ones(x.shape, bool)])
    check_op("Dropout", [x, np.array(0.3, "float32"), np.array(False)], consts=(1, 2),
             expect=[x])


def _constant_graph(**attrs):
    g = Graph("c")
    g.output(g.op("Constant", name="node", **attrs))
    return g


@pytest.mark.parametrize("attrs, want", [
    ({"value": np.arange(6, dtype="float32").reshape(2, 3)},
     np.arange(6, dtype="float32").reshape(2, 3)),
    ({"value_ints": [3, 1, 4]}, np.array([3, 1, 4], "int64")),
    ({"value_float": 2.5}, np.array(2.5, "float32")),
    ({"value_floats": [1.0, -2.0]}, np.array([1.0, -2.0], "float32")),
    ({"value_int": 7}, np.array(7, "int64")),
    ({"value": np.array([True, False])}, np.array([True, False]))])
def test_constant(attrs, want):
    g = _constant_graph(**attrs)
    (ref,) = g.run_reference([])
    np.testing.assert_array_equal(ref, want)
    assert ref.dtype == want.dtype
    (got,) = run_node(g, {})
    np.testing.assert_array_equal(got, want)


def test_shape_and_size(rng):
    x = rand(rng, (2, 3, 4))
    check_op("Shape", [x], expect=[np.array([2, 3, 4])])
    check_op("Shape", [x], start=-2, expect=[np.array([3, 4])])
    check_op("Shape", [x], start=1, end=-1, expect=[np.array([3])], build=False)
    check_op("Size", [x], expect=[np.array(24)])


ERRORS = [
    ("Cast", [np.zeros(2, "float32")], (), {"to": 8}, r"to=8 \(.*\) is not supported; "
                                                      r"supported ONNX types: 1 \(float32\)"),
    ("Cast", [np.zeros(2, "float32")], (), {"to": "complex64"},
     r"to='complex64' is not a supported dtype"),
    ("Cast", [np.zeros(2, "float32")], (), {}, r"missing required attribute\(s\) to"),
    ("Dropout", [np.zeros(2, "float32"), np.array(0.5, "float32"), np.array(True)], (1, 2), {},
     r"training_mode=True is not supported \(inference only"),
    ("Dropout", [np.zeros(2, "float32"), np.array(0.5, "float32"), np.array(False)], (1,), {},
     r"input 2 \(.*\) must be a constant"),
    ("Dropout", [np.zeros(2, "float32"), np.zeros(2, "float32")], (), {},
     r"ratio \(input 1\) must be a scalar"),
    ("Dropout", [np.zeros(2, "float32"), np.array(0.5, "float32"), np.array([False, True])],
     (1, 2), {}, r"training_mode \(input 2\) must be a scalar"),
]


@pytest.mark.parametrize("op, inputs, consts, attrs, match", ERRORS)
def test_misc_errors(op, inputs, consts, attrs, match):
    with pytest.raises(GraphError, match=rf"node 'node' \({op}\): " + match):
        one_node(op, inputs, consts=consts, **attrs)


@pytest.mark.parametrize("attrs, match", [
    ({}, r"give exactly one of value, value_float, .*; got none"),
    ({"value": ("a", "b")}, r"value has dtype <U1, which is not supported"),
    ({"value_int": 1, "value_float": 1.0}, r"give exactly one of .*; got value_float, value_int"),
])
def test_constant_errors(attrs, match):
    with pytest.raises(GraphError, match=r"node 'node' \(Constant\): " + match):
        _constant_graph(**attrs)


def test_constant_kernel_is_refused_for_large_values():
    g = _constant_graph(value=np.zeros(100, "float32"))
    with pytest.raises(GraphError, match=r"node 'node' \(Constant\): a kernel for a "
                                         r"100-element constant is not generated"):
        run_node(g, {})


# ---- the library as a whole -------------------------------------------------------------------

ISSUE_OPS = [
    "Conv", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "Relu", "LeakyRelu", "Sigmoid",
    "Tanh", "Erf", "Gelu", "Clip", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs",
    "BatchNormalization", "LayerNormalization", "Softmax", "LogSoftmax", "MaxPool",
    "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum",
    "ReduceMax", "ReduceMin", "ReduceProd", "Transpose", "Reshape", "Flatten", "Squeeze",
    "Unsqueeze", "Concat", "Split", "Slice", "Pad", "Gather", "Cast", "Identity", "Dropout",
    "Constant", "Equal", "Less", "Greater", "Where", "Min", "Max", "Sum", "Mean"]


def test_every_listed_operator_is_defined_with_a_compute():
    have = set(supported_ops())
    assert not set(ISSUE_OPS) - have
    mine = [n for n in have if get_op(n).infer.__module__.split(".")[-1] != "layout"]
    for name in mine:
        op = get_op(name)
        assert op.compute is not None and op.doc, name


def test_misc_patterns():
    for op in ("Cast", "CastLike", "Identity", "Dropout"):
        assert get_op(op).pattern is OpPattern.ELEMWISE, op
    for op in ("Constant", "Shape", "Size"):
        assert get_op(op).pattern is OpPattern.INJECTIVE, op
    g, _ = one_node("Relu", [np.zeros(2, "float32")])
    assert get_op("Relu").pattern_of(call_of(g, g.nodes[-1])) is OpPattern.ELEMWISE
