"""Data-movement operators (Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Concat, Split,
Expand, Slice, Pad, Gather): reference against numpy, compiled kernels against the
reference, ONNX Runtime agreement for Slice and Pad, and every error path."""
from __future__ import annotations

import numpy as np
import pytest
from graph_util import HAVE_ORT, assert_close, check_op, one_node, onnx_run, rand

from looptune.graph import Graph, GraphError, OpPattern, get_op

I64 = "int64"


@pytest.mark.parametrize("perm", [None, [1, 3, 0, 2], [0, 1, 3, 2]])
def test_transpose(rng, perm):
    x = rand(rng, (3, 4, 5, 2))
    check_op("Transpose", [x], expect=[np.transpose(x, perm)], perm=perm)


@pytest.mark.parametrize("shape, want", [
    ([12, 10], (12, 10)), ([0, -1, 2], (3, 20, 2)), ([3, 2, 2, 5, 2, 1], (3, 2, 2, 5, 2, 1)),
    ([-1], (120,)), ([1, 120], (1, 120)), ([4, 30], (4, 30)), ([6, 20, 1], (6, 20, 1))])
@pytest.mark.slow
def test_reshape(rng, shape, want):
    x = rand(rng, (3, 4, 5, 2))
    check_op("Reshape", [x, np.array(shape, I64)], consts=(1,), expect=[x.reshape(want)])


def test_reshape_attribute_form_and_allowzero(rng):
    x = rand(rng, (2, 3))
    check_op("Reshape", [x], shape=[3, 2], expect=[x.reshape(3, 2)], build=False)
    with pytest.raises(GraphError, match=r"cannot reshape \[2, 3\] \(6 elements\) to \[0, 6\]"):
        one_node("Reshape", [x, np.array([0, 6])], consts=(1,), allowzero=1)


@pytest.mark.parametrize("axis", [0, 1, 3, -1, 4])
def test_flatten(rng, axis):
    x = rand(rng, (3, 4, 5, 2))
    a = axis + 4 if axis < 0 else axis
    check_op("Flatten", [x], axis=axis, expect=[x.reshape(int(np.prod(x.shape[:a])), -1)])


def test_squeeze_unsqueeze(rng):
    y = rand(rng, (1, 3, 1, 2))
    check_op("Squeeze", [y], expect=[y.reshape(3, 2)])
    check_op("Squeeze", [y, np.array([-2])], consts=(1,), expect=[y.reshape(1, 3, 2)])
    check_op("Squeeze", [y], axes=[0], expect=[y.reshape(3, 1, 2)], build=False)
    check_op("Unsqueeze", [y, np.array([0, -1])], consts=(1,),
             expect=[y.reshape(1, 1, 3, 1, 2, 1)])
    s = rand(rng, ())
    check_op("Unsqueeze", [s], axes=[0], expect=[s.reshape(1)])


def test_concat(rng):
    a, b, c = rand(rng, (2, 3, 4)), rand(rng, (2, 1, 4)), rand(rng, (2, 5, 4))
    check_op("Concat", [a, b, c], axis=1, expect=[np.concatenate([a, b, c], 1)])
    check_op("Concat", [a, a], axis=-1, expect=[np.concatenate([a, a], -1)])
    check_op("Concat", [a], axis=0, expect=[a])


def test_split(rng):
    c = rand(rng, (2, 5, 4))
    check_op("Split", [c, np.array([1, 3, 1])], consts=(1,), axis=1, outputs=3,
             expect=np.split(c, [1, 4], axis=1))
    x = rand(rng, (7, 2))
    check_op("Split", [x], num_outputs=3, expect=np.split(x, [3, 6]))
    check_op("Split", [rand(rng, (6, 2))], outputs=2, axis=-2, build=False)
    check_op("Split", [x], split=[2, 5], expect=np.split(x, [2]), build=False)


def test_split_patterns():
    g = Graph("s")
    x = g.input("x", (4, 2))
    one = g.op("Split", x, num_outputs=1)
    two = g.op("Split", x, num_outputs=2)
    op = get_op("Split")
    from looptune.graph.registry import call_of
    assert op.pattern_of(call_of(g, g.producer(one.name))) is OpPattern.INJECTIVE
    assert op.pattern_of(call_of(g, g.producer(two[0].name))) is OpPattern.TUPLE


def test_expand(rng):
    x = rand(rng, (3, 1))
    check_op("Expand", [x, np.array([2, 1, 4])], consts=(1,),
             expect=[np.broadcast_to(x, (2, 3, 4))])


SLICES = [([1], [3], [1], [1]), ([0, -1], [10 ** 18, -10 ** 18], [0, 2], [2, -2]),
          ([-3, 5], [-1, -10], [3, 1], [1, -1]), ([-100], [100], [2], [3])]


@pytest.mark.parametrize("starts, ends, axes, steps", SLICES)
def test_slice(rng, starts, ends, axes, steps):
    x = rand(rng, (3, 4, 5, 2))
    sl = [slice(None)] * 4
    for s, e, a, st in zip(starts, ends, axes, steps):
        sl[a] = slice(s, e, st)
    ins = [x, np.array(starts), np.array(ends), np.array(axes), np.array(steps)]
    ref = check_op("Slice", ins, consts=(1, 2, 3, 4), expect=[x[tuple(sl)]])
    if HAVE_ORT:
        assert_close(ref[0], onnx_run("Slice", ins)[0], what="onnxruntime")


def test_slice_attribute_form_and_empty_result(rng):
    x = rand(rng, (4, 3))
    check_op("Slice", [x], starts=[1], ends=[3], expect=[x[1:3]], build=False)
    check_op("Slice", [x, np.array([3]), np.array([1])], consts=(1, 2), expect=[x[3:1]],
             build=False)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(rng, mode):
    z = rand(rng, (3, 4, 5))
    pads = [1, 0, 2, 2, 3, 1]
    width = [(1, 2), (0, 3), (2, 1)]
    cv = np.array(1.5, "float32") if mode == "constant" else None
    want = np.pad(z, width, mode=mode, **({"constant_values": 1.5} if cv is not None else {}))
    ins = [z, np.array(pads), cv]
    ref = check_op("Pad", ins, consts=(1,), mode=mode, expect=[want])
    if HAVE_ORT:
        assert_close(ref[0], onnx_run("Pad", ins, opset=19, mode=mode)[0], what="onnxruntime")


def test_pad_crops_with_negative_pads_and_axes(rng):
    z = rand(rng, (3, 4, 5))
    ins = [z, np.array([-1, 2, 1, -2]), np.array(0.5, "float32"), np.array([0, 2])]
    want = np.pad(z[1:, :, :-2], [(0, 1), (0, 0), (2, 0)], constant_values=0.5)
    check_op("Pad", ins, consts=(1, 2, 3), expect=[want])
    check_op("Pad", [z], pads=[0, 1, 0, 0, 0, 1], value=2.0,
             expect=[np.pad(z, [(0, 0), (1, 0), (0, 1)], constant_values=2.0)], build=False)


@pytest.mark.parametrize("axis, idx, const", [
    (1, np.array([[0, -1], [2, 1]]), True), (-2, np.array([3, 0, -1], "int32"), False),
    (0, np.array(2, "int32"), True)])
def test_gather(rng, axis, idx, const):
    x = rand(rng, (3, 4, 5))
    check_op("Gather", [x, idx], consts=(1,) if const else (), axis=axis,
             expect=[np.take(x, idx, axis=axis)])


def test_gather_kernel_clamps_a_bad_runtime_index(rng):
    """A run-time index out of range: the reference refuses it, the kernel reads a clamped
    element instead of memory outside the tensor."""
    from graph_util import run_node
    x = rand(rng, (4, 3))
    g, feed = one_node("Gather", [x, np.array([0, 9, -9])])
    with pytest.raises(GraphError, match=r"node 'node' \(Gather\): index 9 is out of range for "
                                         r"axis 0 of size 4 \(allowed -4..3\); 2 such"):
        g.run_reference(feed)
    (got,) = run_node(g, feed)
    assert_close(got, x[[0, 3, 0]])


def test_shape_op_patterns():
    for op in ("Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Slice",
               "Pad", "Gather"):
        assert get_op(op).pattern is OpPattern.INJECTIVE, op
    assert get_op("Expand").pattern is OpPattern.BROADCAST


X = np.zeros((2, 3, 4), "float32")
SHAPE_ERRORS = [
    ("Transpose", [X], (), {"perm": [0, 0, 1]}, r"perm=\[0, 0, 1\] is not a permutation"),
    ("Reshape", [X], (), {}, r"the target shape is missing: give it as input 1"),
    ("Reshape", [X, np.array([2, 12])], (1,), {"shape": [24]},
     r"shape is given both as attribute 'shape' and as input 1"),
    ("Reshape", [X, np.array([2.0, 12.0])], (1,), {}, r"input 1 \(shape\) must hold integers"),
    ("Reshape", [X, np.array([2, 12])], (), {}, r"input 1 \(shape, value '\w+'\) must be a "
                                                r"constant"),
    ("Reshape", [X, np.array([0, 0, 0, 0])], (1,), {}, r"entry 3 is 0 \(copy the input's "
                                                       r"dimension\) but the input"),
    ("Reshape", [X, np.array([-2, 12])], (1,), {}, r"entry 0 is -2; entries are >= -1"),
    ("Reshape", [X, np.array([-1, -1])], (1,), {}, r"has more than one -1"),
    ("Reshape", [X, np.array([5, -1])], (1,), {}, r"24 is not a multiple of 5"),
    ("Reshape", [X, np.array([5, 5])], (1,), {}, r"\(24 elements\) to \[5, 5\] \(25 elements\)"),
    ("Flatten", [X], (), {"axis": 4}, r"axis=4 is out of range for a rank-3 input"),
    ("Squeeze", [X], (), {"axes": [1]}, r"cannot squeeze axes \[1\] of shape \[2, 3, 4\]"),
    ("Squeeze", [X], (), {"axes": [3]}, r"axes entry=3 is out of range"),
    ("Unsqueeze", [X], (), {}, r"axes are missing"),
    ("Unsqueeze", [X], (), {"axes": [0, -5]}, r"axes=\[0, -5\] names an axis twice"),
    ("Concat", [X, np.zeros((2, 3, 5), "float32")], (), {"axis": 1},
     r"input 1 has shape \[2, 3, 5\]; every input must match input 0"),
    ("Concat", [np.zeros((), "float32")], (), {"axis": 0}, r"cannot concatenate scalars"),
    ("Concat", [X], (), {}, r"missing required attribute\(s\) axis"),
    ("Expand", [X, np.array([3, 1, 1])], (1,), {}, r"input shapes .* do not broadcast"),
    ("Expand", [X, np.array([0, 1])], (1,), {}, r"shape \[0, 1\] must hold positive sizes"),
]


@pytest.mark.parametrize("op, inputs, consts, attrs, match", SHAPE_ERRORS)
def test_shape_errors(op, inputs, consts, attrs, match):
    with pytest.raises(GraphError, match=rf"node 'node' \({op}\): (.* )?" + match):
        one_node(op, inputs, consts=consts, **attrs)


SPLIT_ERRORS = [
    ([X, np.array([1, 1])], 2, {"num_outputs": 2}, r"both split and num_outputs are given"),
    ([X, np.array([1, 2])], 2, {}, r"split=\[1, 2\] must have one size >= 0 per output \(2\) "
                                   r"summing to the size of axis 0 \(2\)"),
    ([X], 3, {"num_outputs": 2}, r"num_outputs=2 but the node has 3 outputs"),
    ([X], 2, {"axis": 1}, r"axis 1 of size 3 does not split into 2 equal parts"),
    ([X], 3, {"axis": 2, "num_outputs": 3}, r"axis 2 of size 4 does not split into 3 parts"),
]


@pytest.mark.parametrize("inputs, outputs, attrs, match", SPLIT_ERRORS)
def test_split_errors(inputs, outputs, attrs, match):
    with pytest.raises(GraphError, match=r"node 'node' \(Split\): (.* )?" + match):
        one_node("Split", inputs, consts=(1,), outputs=outputs, **attrs)


def test_split_builder_needs_the_output_count():
    g = Graph("s")
    x = g.input("x", (4,))
    with pytest.raises(GraphError, match=r"g.op\('Split'\): the number of outputs is not known"):
        g.op("Split", x, np.array([2, 2]))


INDEX_ERRORS = [
    ("Slice", [X], (), {"starts": [0]}, r"starts and ends are required"),
    ("Slice", [X, np.array([0]), np.array([1, 2])], (1, 2), {},
     r"starts \[0\], ends \[1, 2\], axes \[0\] and steps \[1\] must have the same length"),
    ("Slice", [X, np.array([0]), np.array([1]), np.array([0]), np.array([0])], (1, 2, 3, 4), {},
     r"steps \[0\]: a step is 0 \(axis 0\)"),
    ("Slice", [X, np.array([0, 0]), np.array([1, 1]), np.array([1, -2])], (1, 2, 3), {},
     r"axes=\[1, -2\] names an axis twice"),
    ("Pad", [X, np.array([1] * 6)], (1,), {"mode": "mirror"}, r"mode='mirror' is not one of"),
    ("Pad", [X], (), {}, r"pads are required"),
    ("Pad", [X, np.array([1, 1])], (1,), {}, r"pads=\[1, 1\] must have 2 entries per padded "
                                             r"axis \(6"),
    ("Pad", [X, np.array([0, -4, 0, 0, 0, 0])], (1,), {}, r"crop axis 1 \(size 3\) below zero"),
    ("Pad", [X, np.array([0, -1, 0, 0, 0, 0])], (1,), {"mode": "edge"},
     r"negative pads .* are only supported in mode 'constant'; got mode 'edge'"),
    ("Pad", [X, np.array([0, 3, 0, 0, 0, 0])], (1,), {"mode": "reflect"},
     r"mode 'reflect' pads axis 1 of size 3 by 3; at most 2"),
    ("Pad", [X, np.array([0] * 6), np.zeros(2, "float32")], (1,), {},
     r"input 2 \(constant_value\) must be a scalar"),
    ("Pad", [X, np.array([0] * 6), np.zeros((), "float64")], (1,), {},
     r"input 2 \(constant_value\) has dtype float64; input 0 has float32"),
    ("Pad", [np.zeros((0, 2), "float32"), np.array([1, 0, 0, 0])], (0, 1), {"mode": "edge"},
     r"mode 'edge' cannot pad the empty axis 0"),
    ("Gather", [X, np.array([0.0])], (), {}, r"indices \(input 1\) must be int32 or int64"),
    ("Gather", [np.zeros((), "float32"), np.array(0)], (), {}, r"cannot gather from a scalar"),
    ("Gather", [X, np.array([[1, -4]])], (1,), {"axis": 1},
     r"index -4 is out of range for axis 1 of size 3 \(allowed -3..2\); 1 such"),
    ("Gather", [X, np.array([1])], (1,), {"axis": 3}, r"axis=3 is out of range"),
]


@pytest.mark.parametrize("op, inputs, consts, attrs, match", INDEX_ERRORS)
def test_index_errors(op, inputs, consts, attrs, match):
    with pytest.raises(GraphError, match=rf"node 'node' \({op}\): (.* )?" + match):
        one_node(op, inputs, consts=consts, **attrs)
