"""Broadcast operators: the binary arithmetic (integer Div truncates), comparisons and
logic, Where, Clip, PRelu, Pow and the variadic Max/Min/Sum/Mean; reference against numpy,
compiled kernels against the reference, patterns, every error path (unary ops:
test_ops_unary.py)."""
from __future__ import annotations

import numpy as np
import pytest
from graph_util import check_op, one_node, rand

from looptune.graph import Graph, GraphError, OpPattern, get_op
from looptune.graph.registry import call_of

@pytest.mark.parametrize("op, fn", [("Add", np.add), ("Sub", np.subtract),
                                    ("Mul", np.multiply), ("Div", np.divide)])
@pytest.mark.parametrize("sa, sb", [
    ((3, 5), (3, 5)), ((2, 3, 5), (5,)),
    pytest.param((3, 1), (1, 4), marks=pytest.mark.slow),
    pytest.param((), (2, 3), marks=pytest.mark.slow)])
def test_binary_broadcast(rng, op, fn, sa, sb):
    a, b = rand(rng, sa), rand(rng, sb, lo=0.5, hi=2)
    check_op(op, [a, b], expect=[fn(a, b)])


def test_scalar_constant_operand_is_inlined(rng):
    from graph_util import build_node
    x = rand(rng, (3, 4))
    check_op("Mul", [x, np.array(3.0, "float32")], consts=(1,), expect=[x * 3])
    g, _ = one_node("Add", [x, np.array([2.5], "float32")], consts=(1,))
    _, _, (out,) = build_node(g)
    assert [t.name for t in out.op.inputs] == ["in0"]       # the constant is not read


@pytest.mark.parametrize("dtype", ["int32", "int64", pytest.param("int8", marks=pytest.mark.slow),
                                   "uint8"])
def test_integer_division_truncates(rng, dtype):
    a = rand(rng, (4, 7), dtype, -20, 20)
    b = rand(rng, (7,), dtype, -6, 6)
    b[0] = 0
    safe = np.where(b == 0, 1, b)
    if dtype.startswith("u"):
        want = a // safe
    else:
        want = np.trunc(a.astype(np.float64) / safe).astype(dtype)
    check_op("Div", [a, b], expect=[np.where(b == 0, 0, want)])


@pytest.mark.parametrize("op, fn", [("Equal", np.equal), ("Less", np.less),
                                    ("Greater", np.greater), ("LessOrEqual", np.less_equal),
                                    ("GreaterOrEqual", np.greater_equal)])
def test_comparisons(rng, op, fn):
    a, b = rand(rng, (3, 5), "int32", -2, 2), rand(rng, (5,), "int32", -2, 2)
    check_op(op, [a, b], expect=[fn(a, b)])
    assert get_op(op).pattern_of(call_of(*_graph_node(op, a, b))) is OpPattern.BROADCAST


def _graph_node(op, *arrays):
    g, _ = one_node(op, list(arrays))
    return g, g.nodes[-1]


def test_logic_and_where(rng):
    b1, b2 = rand(rng, (3, 1), "bool"), rand(rng, (4,), "bool")
    check_op("And", [b1, b2], expect=[b1 & b2])
    check_op("Or", [b1, b2], expect=[b1 | b2])
    check_op("Xor", [b1, b2], expect=[b1 ^ b2])
    check_op("Not", [b2], expect=[~b2])
    x, y = rand(rng, (3, 5)), rand(rng, (5,))
    check_op("Where", [b1, x, y], expect=[np.where(b1, x, y)])
    check_op("Where", [b1, x, np.array(2.0, "float32")], consts=(2,),
             expect=[np.where(b1, x, 2.0)])


@pytest.mark.parametrize("ins, consts, lo, hi", [
    (["x", "lo", "hi"], (), -0.5, 1.2), (["x", "lo", "hi"], (1, 2), -0.5, 1.2),
    (["x", None, "hi"], (2,), None, 1.2), (["x", "lo"], (), -0.5, None)])
def test_clip_inputs(rng, ins, consts, lo, hi):
    x = rand(rng, (3, 5), lo=-2, hi=2)
    vals = {"x": x, "lo": np.array(-0.5, "float32"), "hi": np.array(1.2, "float32"), None: None}
    check_op("Clip", [vals[k] for k in ins], consts=consts, expect=[np.clip(x, lo, hi)])


def test_clip_attributes_and_pattern(rng):
    x = rand(rng, (3, 5), lo=-2, hi=2)
    check_op("Clip", [x], min=-1.0, max=0.5, expect=[np.clip(x, -1, 0.5)])
    g, node = _graph_node("Clip", x, np.array(0.0, "float32"))
    assert get_op("Clip").pattern_of(call_of(g, node)) is OpPattern.BROADCAST
    g2, _ = one_node("Clip", [x, np.array(0.0, "float32")], consts=(1,))
    assert get_op("Clip").pattern_of(call_of(g2, g2.nodes[-1])) is OpPattern.ELEMWISE


@pytest.mark.slow
def test_prelu_pow_and_variadic(rng):
    x, y, z = rand(rng, (3, 5)), rand(rng, (5,)), rand(rng, (1, 5))
    check_op("PRelu", [x, y], expect=[np.where(x < 0, x * y, x)])
    xp = rand(rng, (3, 5), lo=0.1, hi=3)
    e = np.array([2, 3, 1, 0, 2], "int64")
    check_op("Pow", [xp, e], expect=[xp ** e])
    check_op("Pow", [xp, np.array(0.5, "float32")], consts=(1,), expect=[np.sqrt(xp)])
    for op, fn in [("Max", np.maximum), ("Min", np.minimum), ("Sum", np.add)]:
        check_op(op, [x, y, z], expect=[fn(fn(x, y), z)])
    check_op("Mean", [x, y, z], expect=[(x + y + z) / 3])
    check_op("Max", [x], expect=[x], build=False)


def test_broadcast_pattern_is_elemwise_for_equal_shapes():
    g = Graph("p")
    x = g.input("x", (2, 3))
    same = g.op("Add", x, x)
    bcast = g.op("Add", x, g.input("b", (3,)))
    op = get_op("Add")
    assert op.pattern_of(call_of(g, g.producer(same.name))) is OpPattern.ELEMWISE
    assert op.pattern_of(call_of(g, g.producer(bcast.name))) is OpPattern.BROADCAST


F = np.zeros((2, 3), "float32")
ERRORS = [
    ("Gelu", [F], {"approximate": "erf"}, r"approximate='erf' must be 'none' or 'tanh'"),
    ("Clip", [F, np.zeros((), "float32")], {"min": 0.0},
     r"min is given both as attribute and as input 1"),
    ("Clip", [F, np.zeros(2, "float32")], {}, r"input 1 \(min\) must be a scalar; got shape"),
    ("Where", [F, F, F], {}, r"the condition \(input 0\) must be bool; got float32"),
    ("Where", [F > 0, F, F.astype("int32")], {},
     r"inputs 1 and 2 have dtypes float32 and int32; ONNX does not promote"),
    ("PRelu", [F, np.zeros((2, 3, 1), "float32")], {},
     r"slope \(input 1\) of shape \[2, 3, 1\] must broadcast to X's shape \[2, 3\]"),
    ("Pow", [F.astype("int32"), F], {}, r"the base \(input 0\) has dtype int32"),
    ("Pow", [F, F > 0], {}, r"the exponent \(input 1\) has dtype bool"),
    ("Less", [F, F.astype("float64")], {}, r"inputs have different dtypes"),
    ("And", [F, F], {}, r"dtype float32 is not supported \(supported: bool\)"),
    ("Max", [F, np.zeros(4, "float32")], {}, r"input shapes \[2, 3\], \[4\] do not broadcast"),
    ("Mean", [F.astype("int32")], {}, r"dtype int32 is not supported"),
    ("LeakyRelu", [F.astype("int32")], {}, r"dtype int32 is not supported"),
    ("Sqrt", [F.astype("int64")], {}, r"dtype int64 is not supported"),
]


@pytest.mark.parametrize("op, inputs, attrs, match", ERRORS)
def test_elementwise_errors(op, inputs, attrs, match):
    with pytest.raises(GraphError, match=rf"node 'node' \({op}\): " + match):
        one_node(op, inputs, **attrs)
