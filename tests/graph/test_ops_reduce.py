"""Reductions: ReduceSum/Mean/Max/Min/Prod and SumSquare/L1/L2/LogSum over axes given as an
attribute or a constant input, keepdims, noop_with_empty_axes; reference against numpy,
compiled kernels against the reference, ONNX Runtime agreement, every error path."""
from __future__ import annotations

import numpy as np
import pytest
from graph_util import assert_close, check_op, one_node, onnx_run, rand

from looptune.graph import Graph, GraphError, OpPattern, get_op
from looptune.graph.registry import call_of

REDUCERS = {
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "ReduceMean": lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    "ReduceMax": lambda x, a, k: np.max(x, axis=a, keepdims=k),
    "ReduceMin": lambda x, a, k: np.min(x, axis=a, keepdims=k),
    "ReduceProd": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "ReduceSumSquare": lambda x, a, k: np.sum(x * x, axis=a, keepdims=k),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(x * x, axis=a, keepdims=k)),
    "ReduceLogSum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
}
AXES = [([1, -1], 1), ([0, 2], 0), (None, 0)]


@pytest.mark.parametrize("op", sorted(REDUCERS))
@pytest.mark.parametrize("axes, keep", AXES)
@pytest.mark.slow
def test_reduce(rng, op, axes, keep):
    x = rand(rng, (3, 4, 5, 2), lo=0.2, hi=1.3)
    want = REDUCERS[op](x.astype(np.float64), None if axes is None else tuple(axes), bool(keep))
    ins = [x] if axes is None else [x, np.array(axes, "int64")]
    check_op(op, ins, consts=(1,), keepdims=keep, expect=[want], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceL2"])
def test_reduce_axes_attribute_agrees_with_onnxruntime(rng, op):
    pytest.importorskip("onnxruntime")
    x = rand(rng, (3, 4, 5))
    ref = check_op(op, [x], axes=[0, -1], keepdims=0, build=False)
    (ort,) = onnx_run(op, [x], opset=13, axes=[0, -1], keepdims=0)
    assert_close(ref[0], ort, 1e-5, 1e-6, "onnxruntime")


def test_reduce_integers_and_noop(rng):
    xi = rand(rng, (3, 5), "int32", -5, 5)
    check_op("ReduceSum", [xi, np.array([1])], consts=(1,), expect=[xi.sum(1, keepdims=True)])
    check_op("ReduceMax", [xi], axes=[0], keepdims=0, expect=[xi.max(0)])
    x = rand(rng, (2, 3))
    check_op("ReduceSum", [x, np.array([], "int64")], consts=(1,), noop_with_empty_axes=1,
             expect=[x])
    check_op("ReduceSum", [x], noop_with_empty_axes=0, keepdims=1,
             expect=[x.sum(keepdims=True)], build=False)


def test_reduce_patterns():
    g = Graph("r")
    x = g.input("x", (2, 3))
    red = g.op("ReduceSum", x, np.array([1]))
    noop = g.op("ReduceSum", x, np.array([], "int64"), noop_with_empty_axes=1)
    op = get_op("ReduceSum")
    assert op.pattern_of(call_of(g, g.producer(red.name))) is OpPattern.COMM_REDUCE
    assert op.pattern_of(call_of(g, g.producer(noop.name))) is OpPattern.ELEMWISE


X = np.zeros((2, 3, 4), "float32")
ERRORS = [
    ("ReduceSum", [X, np.array([1, -2])], (1,), {}, r"axes=\[1, -2\] names an axis twice"),
    ("ReduceMax", [X], (), {"axes": [3]}, r"axes entry=3 is out of range for a rank-3 input"),
    ("ReduceMean", [X, np.array([1])], (1,), {"axes": [1]},
     r"axes is given both as attribute 'axes' and as input 1; give one of them"),
    ("ReduceSum", [X, np.array([1.0])], (1,), {}, r"input 1 \(axes\) must hold integers"),
    ("ReduceSum", [X, np.array([1])], (), {}, r"input 1 \(.*\) must be a constant"),
    ("ReduceMean", [X.astype("int32")], (), {}, r"dtype int32 is not supported"),
    ("ReduceProd", [X.astype("bool")], (), {}, r"dtype bool is not supported"),
    ("ReduceL2", [X], (), {"axes": [0.5]}, r"attribute axes=\(0.5,\) must be a list of ints"),
]


@pytest.mark.parametrize("op, inputs, consts, attrs, match", ERRORS)
def test_reduce_errors(op, inputs, consts, attrs, match):
    with pytest.raises(GraphError, match=rf"node 'node' \({op}\): " + match):
        one_node(op, inputs, consts=consts, **attrs)
