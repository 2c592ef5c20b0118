"""The graph IR: building, inference errors, printing, rebuilding, the reference run."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.graph import Graph, GraphError, Node


def _tiny():
    g = Graph("tiny")
    x = g.input("x", (2, 5))
    b = g.const(np.arange(5, dtype="float32"), name="b")
    y = g.op("Relu", g.op("Add", x, b), name="act")
    g.output(g.op("Mul", y, 2.0))
    return g


def test_build_infers_types_and_reference_matches_numpy():
    g = _tiny()
    assert g.types["act"].shape == (2, 5) and g.types["act"].dtype == "float32"
    x = np.random.default_rng(0).standard_normal((2, 5)).astype("float32")
    (out,) = g.run_reference([x])
    np.testing.assert_allclose(out, np.maximum(x + np.arange(5), 0) * 2, rtol=1e-6)
    (out2,) = g.run_reference(x=x)
    np.testing.assert_array_equal(out, out2)


def test_print_lists_every_node_with_types():
    text = str(_tiny())
    assert "%act: float32[2, 5] = Relu(%add_1)" in text
    assert text.count("\n") == len(_tiny().nodes) + 4     # header, 2 consts, nodes, return, }


def test_dot_quotes_names():
    g = Graph('we"ird')
    x = g.input('in"put', (3,))
    g.output(g.op("Relu", x))
    dot = g.to_dot()
    assert 'digraph "we\\"ird"' in dot and '"v:in\\"put"' in dot


def test_nodes_are_frozen_and_hashable():
    n = Node.make("Add", ["a", "b"], ["c"], {"axes": [1, 2]})
    assert n.attr("axes") == (1, 2)
    assert hash(n) == hash(Node.make("Add", ("a", "b"), ("c",), {"axes": (1, 2)}))
    with pytest.raises(AttributeError):
        n.op_type = "Sub"


def test_from_parts_rebuilds_and_checks_order():
    g = _tiny()
    g2 = g.replace(nodes=g.nodes)
    assert [n for n in g2.nodes] == g.nodes and g2.outputs == g.outputs
    with pytest.raises(GraphError, match=r"node 'mul_3' \(Mul\): input 'act' is not defined before"):
        g.replace(nodes=list(reversed(g.nodes)))


@pytest.mark.parametrize("build, match", [
    (lambda g, x: g.op("Add", x, g.const(np.zeros(4, "float32"))),
     r"\(Add\): input shapes \[2, 5\], \[4\] do not broadcast"),
    (lambda g, x: g.op("Nope", x), r"unknown operator 'Nope'; supported: .*Relu"),
    (lambda g, x: g.op("Relu", x, alpha=0.1), r"\(Relu\): unknown attribute 'alpha'"),
    (lambda g, x: g.op("Relu", x, x), r"\(Relu\): takes 1 inputs; got 2"),
    (lambda g, x: g.op("Add", x, g.const(np.zeros(5, "int32"))),
     r"\(Add\): inputs have different dtypes \['float32', 'int32'\]; .*insert a Cast"),
    (lambda g, x: g.input("x", (1,)), r"already has a value named 'x'"),
    (lambda g, x: g.input("y", (0, 2)), r"input 'y': shape must be a tuple of positive ints"),
    (lambda g, x: g.op("Relu", "nothere"), r"input 0 names 'nothere', which is not a value"),
    (lambda g, x: g.op("Relu", Graph("other").input("z", (1,))), r"belongs to another graph"),
    (lambda g, x: g.output("zz"), r"'zz' is not a value of graph 'e'"),
])
def test_builder_errors_name_the_node(build, match):
    g = Graph("e")
    x = g.input("x", (2, 5))
    with pytest.raises(GraphError, match=match):
        build(g, x)


@pytest.mark.parametrize("call, match", [
    (lambda g: g.run_reference([]), r"missing input\(s\) x"),
    (lambda g: g.run_reference([np.zeros((2, 5), "float64")]), r"'x' has dtype float64"),
    (lambda g: g.run_reference([np.zeros((5, 2), "float32")]), r"'x' has shape \(5, 2\)"),
    (lambda g: g.run_reference(q=np.zeros((2, 5), "float32")), r"has no input named 'q'"),
])
def test_reference_checks_inputs(call, match):
    with pytest.raises(GraphError, match=match):
        call(_tiny())


def test_graph_error_is_a_looptune_error():
    assert issubclass(GraphError, lt.LooptuneError) and lt.GraphError is GraphError


def test_shorthands_build_the_onnx_nodes_and_compute_the_same():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    fc = rng.standard_normal((5, 4)).astype("float32")
    g = Graph("short")
    x = g.input("x", (2, 3, 9, 9))
    y = g.max_pool2d(g.relu(g.conv2d(x, g.const(w), g.const(b), stride=2, pad=1)), 2)
    g.output(g.softmax(g.dense(g.flatten(g.global_avg_pool(y)), g.const(fc))))
    h = Graph("long")
    x2 = h.input("x", (2, 3, 9, 9))
    y2 = h.op("Conv", x2, h.const(w), h.const(b), strides=[2, 2], pads=[1, 1, 1, 1])
    y2 = h.op("MaxPool", h.op("Relu", y2), kernel_shape=[2, 2], strides=[2, 2],
              pads=[0, 0, 0, 0])
    y2 = h.op("Gemm", h.op("Flatten", h.op("GlobalAveragePool", y2), axis=1), h.const(fc),
              transB=1)
    h.output(h.op("Softmax", y2, axis=-1))
    assert [n.op_type for n in g.nodes] == [n.op_type for n in h.nodes]
    assert g.nodes[0].attr("strides") == (2, 2) and g.nodes[0].attr("pads") == (1, 1, 1, 1)
    xin = rng.standard_normal((2, 3, 9, 9)).astype("float32")
    np.testing.assert_array_equal(g.run_reference([xin])[0], h.run_reference([xin])[0])


def test_shorthand_errors_name_the_argument():
    g = Graph("e")
    x = g.input("x", (1, 3, 8, 8))
    with pytest.raises(GraphError, match=r"g.conv2d: stride must be an int or a pair of ints; "
                                         r"got \(1, 2, 3\)"):
        g.conv2d(x, g.const(np.zeros((2, 3, 3, 3), "float32")), stride=(1, 2, 3))
    with pytest.raises(GraphError, match=r"\(Conv\): .*"):
        g.conv2d(x, g.const(np.zeros((2, 5, 3, 3), "float32")))
