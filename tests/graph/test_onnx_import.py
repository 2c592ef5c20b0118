"""from_onnx: what is imported (constants, attributes, names, dtypes, shapes) and every refusal."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import looptune as lt
from looptune.graph import GraphError
from looptune.graph.onnx_import import attr_value
from onnx import TensorProto as T
from onnx import helper, numpy_helper


def _model(nodes, inputs, outputs, inits=(), opset=17, domains=()):
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    ops = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)]
    return helper.make_model(g, opset_imports=ops)


def _vi(name, shape, t=T.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _relu_add(shape=(3, 5)):
    """y = Relu(x + b), b an initializer, with a Constant feeding a Mul."""
    b = numpy_helper.from_array(np.arange(5, dtype="float32"), "b")
    nodes = [helper.make_node("Add", ["x", "b"], ["s"], name="/l1/Add"),
             helper.make_node("Constant", [], ["two"], name="c2", value_float=2.0),
             helper.make_node("Mul", ["s", "two"], ["m"], name="/l1/Mul"),
             helper.make_node("Relu", ["m"], ["y"], name="/l1/Relu")]
    return _model(nodes, [_vi("x", shape)], [_vi("y", shape)], [b])


def test_import_keeps_names_folds_constants_and_runs(rng):
    g = lt.graph.from_onnx(_relu_add())
    assert [n.op_type for n in g.nodes] == ["Add", "Mul", "Relu"]
    assert [n.name for n in g.nodes] == ["/l1/Add", "/l1/Mul", "/l1/Relu"]
    assert g.inputs == ["x"] and g.outputs == ["y"]
    assert set(g.consts) == {"b", "two"} and g.consts["two"].dtype == np.float32
    x = rng.standard_normal((3, 5)).astype("float32")
    (y,) = g.run_reference([x])
    np.testing.assert_allclose(y, np.maximum((x + np.arange(5)) * 2, 0), rtol=1e-6)


def test_import_from_a_path_and_graph_name(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(_relu_add(), str(p))
    g = lt.graph.from_onnx(p)
    assert g.name == "m" and len(g.nodes) == 3
    assert lt.graph.from_onnx(str(p), name="other").name == "other"


@pytest.mark.parametrize("make, expected", [
    (lambda: helper.make_attribute("i", 3), 3),
    (lambda: helper.make_attribute("f", 0.5), 0.5),
    (lambda: helper.make_attribute("s", "NOTSET"), "NOTSET"),
    (lambda: helper.make_attribute("is", [1, -2]), [1, -2]),
    (lambda: helper.make_attribute("fs", [0.5, 1.5]), [0.5, 1.5]),
    (lambda: helper.make_attribute("ss", ["a", "b"]), ["a", "b"]),
])
def test_attributes_become_python_values(make, expected):
    assert attr_value(onnx, make(), "node 'n' (Op)") == expected


def test_tensor_attributes_become_numpy():
    t = numpy_helper.from_array(np.array([[1, 2]], dtype="int32"))
    v = attr_value(onnx, helper.make_attribute("value", t), "node 'n' (Op)")
    assert isinstance(v, np.ndarray) and v.dtype == np.int32 and v.shape == (1, 2)
    vs = attr_value(onnx, helper.make_attribute("values", [t, t]), "node 'n' (Op)")
    assert len(vs) == 2 and all(isinstance(a, np.ndarray) for a in vs)


def test_graph_attribute_is_refused():
    body = helper.make_graph([], "body", [], [])
    with pytest.raises(GraphError, match=r"node 'n' \(Op\): attribute 'then_branch' is a graph"):
        attr_value(onnx, helper.make_attribute("then_branch", body), "node 'n' (Op)")


@pytest.mark.parametrize("attr, dtype, value", [
    ({"value_float": 1.5}, np.float32, 1.5),
    ({"value_floats": [1.0, 2.0]}, np.float32, [1.0, 2.0]),
    ({"value_int": 7}, np.int64, 7),
    ({"value_ints": [1, 2, 3]}, np.int64, [1, 2, 3]),
    ({"value": numpy_helper.from_array(np.ones((2, 2), "float16"))}, np.float16, np.ones((2, 2))),
])
def test_constant_node_forms(attr, dtype, value):
    n = helper.make_node("Constant", [], ["c"], name="c", **attr)
    g = lt.graph.from_onnx(_model([n], [], [helper.make_empty_tensor_value_info("c")]))
    assert not g.nodes and g.outputs == ["c"]
    (y,) = g.run_reference([])
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, value)


def test_string_constant_is_refused():
    n = helper.make_node("Constant", [], ["c"], name="cs", value_string="hi")
    m = _model([n], [], [_vi("c", None)])
    with pytest.raises(GraphError, match=r"node 'cs' \(Constant\): string constants"):
        lt.graph.from_onnx(m)


def test_symbolic_dimension_names_input_and_dim_and_shapes_fixes_it(rng):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 5])],
               [_vi("y", ["N", 5])])
    with pytest.raises(GraphError, match=r"input 'x' has a symbolic dimension 'N' \(dimension 0 "
                       r"of \['N', 5\]\); pass shapes=\{'x': \(...\)\}"):
        lt.graph.from_onnx(m)
    g = lt.graph.from_onnx(m, shapes={"x": (2, 5)})
    assert g.types["x"].shape == (2, 5) and g.types["y"].shape == (2, 5)


@pytest.mark.parametrize("shapes, match", [
    ({"x": (2, 5, 1)}, r"input 'x': shapes= gives rank 3 \(2, 5, 1\); the model declares rank 2"),
    ({"x": (2, 4)}, r"input 'x': shapes= gives 4 for dimension 1; the model fixes it to 5"),
    ({"x": (0, 5)}, r"input 'x': shapes= must give a tuple of positive ints; got \(0, 5\)"),
    ({"z": (2, 5)}, r"shapes= names z, which the model does not take; its inputs are x"),
])
def test_shapes_errors(shapes, match):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 5])], [_vi("y", None)])
    with pytest.raises(GraphError, match=match):
        lt.graph.from_onnx(m, shapes=shapes)


def test_input_without_shape_is_refused():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", None)], [_vi("y", None)])
    with pytest.raises(GraphError, match=r"input 'x': the model gives no shape; pass shapes="):
        lt.graph.from_onnx(m)


def test_unsupported_ops_are_listed_at_once_with_counts():
    nodes = [helper.make_node("NonZero", ["x"], ["a"]),
             helper.make_node("NonZero", ["x"], ["b"]),
             helper.make_node("TopK", ["x", "k"], ["c", "d"]),
             helper.make_node("Foo", ["x"], ["e"], domain="com.example"),
             helper.make_node("Relu", ["x"], ["y"])]
    m = _model(nodes, [_vi("x", [4]), _vi("k", [1], T.INT64)], [_vi("y", [4])],
               domains=["com.example"])
    with pytest.raises(GraphError, match=r"uses 3 operator type\(s\) looptune does not support: "
                       r"NonZero \(2\), TopK \(1\), com\.example::Foo \(1\); supported: "):
        lt.graph.from_onnx(m)


def test_old_opset_is_refused_with_the_conversion():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [4])], [_vi("y", [4])],
               opset=11)
    with pytest.raises(GraphError, match=r"opset 11; looptune reads opsets 13 and newer: "
                       r"convert it with onnx\.version_converter"):
        lt.graph.from_onnx(m)


@pytest.mark.parametrize("make, match", [
    (lambda: _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [4], T.BFLOAT16)],
                    [_vi("y", [4], T.BFLOAT16)]),
     r"input 'x': dtype BFLOAT16 is not supported by looptune \(supported: bool, int8"),
    (lambda: _model([helper.make_node("Relu", ["w"], ["y"])], [], [_vi("y", None)],
                    [helper.make_tensor("w", T.STRING, [1], [b"a"])]),
     r"initializer 'w': dtype STRING is not supported"),
    (lambda: _model([helper.make_node("Cast", ["x"], ["y"], name="c", to=T.FLOAT8E4M3FN)],
                    [_vi("x", [4])], [_vi("y", None)]),
     r"node 'c' \(Cast\): to: dtype FLOAT8E4M3FN is not supported"),
])
def test_unsupported_dtypes_are_refused(make, match):
    with pytest.raises(GraphError, match=match):
        lt.graph.from_onnx(make())


def test_float16_and_int_inputs_are_kept():
    m = _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["i"], ["z"])],
               [_vi("x", [3], T.FLOAT16), _vi("i", [2], T.INT32)],
               [_vi("y", [3], T.FLOAT16), _vi("z", [2], T.INT32)])
    g = lt.graph.from_onnx(m)
    assert str(g.types["x"]) == "float16[3]" and str(g.types["z"]) == "int32[2]"


def test_node_names_made_unique_and_sanitized():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Relu", ["a"], ["b:0"], name='my "relu"'),
             helper.make_node("Relu", ["b:0"], ["c"], name='my "relu"')]
    g = lt.graph.from_onnx(_model(nodes, [_vi("x", [2])], [_vi("c", [2])]))
    assert [n.name for n in g.nodes] == ["relu_0", "my__relu_", "my__relu__2"]
    assert g.nodes[1].outputs == ("b:0",)          # value names are kept as they are


def test_inference_error_names_the_onnx_node():
    m = _model([helper.make_node("Add", ["x", "z"], ["y"], name="/blk/Add")],
               [_vi("x", [2, 3]), _vi("z", [4])], [_vi("y", None)])
    with pytest.raises(GraphError, match=r"node '/blk/Add' \(Add\): input shapes \[2, 3\], \[4\] "
                       "do not broadcast"):
        lt.graph.from_onnx(m)


def test_declared_output_type_is_checked():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [3, 2])])
    with pytest.raises(GraphError, match=r"output 'y': the model declares shape \[3, 2\]; "
                       r"looptune infers float32\[2, 3\]"):
        lt.graph.from_onnx(m)
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2], T.INT32)])
    with pytest.raises(GraphError, match=r"output 'y': the model declares dtype int32"):
        lt.graph.from_onnx(m)


def test_nodes_out_of_order_are_sorted():
    nodes = [helper.make_node("Relu", ["a"], ["y"]), helper.make_node("Neg", ["x"], ["a"])]
    g = lt.graph.from_onnx(_model(nodes, [_vi("x", [2])], [_vi("y", [2])]))
    assert [n.op_type for n in g.nodes] == ["Neg", "Relu"]


def test_input_that_is_an_initializer_is_a_constant():
    w = numpy_helper.from_array(np.ones(2, "float32"), "w")
    m = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [2]), _vi("w", [2])],
               [_vi("y", [2])], [w])
    g = lt.graph.from_onnx(m)
    assert g.inputs == ["x"] and "w" in g.consts


def test_constants_binds_inputs():
    m = _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [2]), _vi("w", [2])],
               [_vi("y", [2])])
    g = lt.graph.from_onnx(m, constants={"w": np.array([1, 2], "float32")})
    assert g.inputs == ["x"]
    np.testing.assert_array_equal(g.run_reference([np.zeros(2, "float32")])[0], [1, 2])
    with pytest.raises(GraphError, match=r"constants= names 'v', which is not an input of the "
                       "model; its inputs are x, w"):
        lt.graph.from_onnx(m, constants={"v": np.zeros(2)})
    with pytest.raises(GraphError, match=r"input 'w': constants= gives dtype float64; the model "
                       "declares float32"):
        lt.graph.from_onnx(m, constants={"w": np.zeros(2)})


def test_bad_sources(tmp_path):
    with pytest.raises(GraphError, match=r"from_onnx: no such file: .*nope\.onnx"):
        lt.graph.from_onnx(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xffnot a protobuf")
    with pytest.raises(GraphError, match=r"bad\.onnx is not a readable ONNX model"):
        lt.graph.from_onnx(bad)
    with pytest.raises(GraphError, match=r"expected a path or an onnx\.ModelProto; got int"):
        lt.graph.from_onnx(3)


def test_onnx_stays_optional():
    """looptune imports without onnx; from_onnx then says what to install."""
    code = ("import sys; sys.modules['onnx'] = None\n"
            "import looptune as lt\n"
            "import looptune.graph.onnx_backend\n"
            "try:\n    lt.graph.from_onnx('m.onnx')\n"
            "except lt.GraphError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "the onnx package is not installed; install it with `pip install looptune[onnx]`" \
        in out.stdout


def test_shape_chains_feeding_a_reshape_are_computed_at_import(rng):
    """torch.onnx writes x.view(x.size(0), -1) as Shape -> Gather -> Unsqueeze -> Concat ->
    Reshape; the importer computes that shape (the operand Reshape needs at compile time) and
    keeps every other node."""
    i64 = lambda v: numpy_helper.from_array(np.array(v, dtype="int64"))
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Constant", [], ["zero"], value=i64(0)),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Constant", [], ["ax"], value=i64([0])),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             helper.make_node("Constant", [], ["minus1"], value=i64([-1])),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["r", "shape"], ["y"], name="flat")]
    g = lt.graph.from_onnx(_model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", None)]))
    assert [n.op_type for n in g.nodes] == ["Relu", "Reshape"]
    np.testing.assert_array_equal(g.consts["shape"], [2, -1])
    x = rng.standard_normal((2, 3, 4)).astype("float32")
    np.testing.assert_array_equal(g.run_reference([x])[0], np.maximum(x, 0).reshape(2, -1))


def test_an_undefined_input_is_named():
    m = _model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], [_vi("x", [2])],
               [_vi("y", None)])
    with pytest.raises(GraphError, match=r"node 'r' \(Relu\): input 'nowhere' is not produced "
                       "by any node, initializer or graph input"):
        lt.graph.from_onnx(m)


def test_zero_size_input_is_refused():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [0, 3])], [_vi("y", None)])
    with pytest.raises(GraphError, match=r"input 'x': dimension 0 has size 0; looptune graphs "
                       "take non-empty tensors"):
        lt.graph.from_onnx(m)


def test_sequence_input_is_refused():
    seq = helper.make_tensor_sequence_value_info("s", T.FLOAT, [2])
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2]), seq], [_vi("y", None)])
    with pytest.raises(GraphError, match=r"input 's' is of type sequence, not a tensor"):
        lt.graph.from_onnx(m)
