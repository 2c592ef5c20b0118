"""Conv, Gemm, MatMul, BatchNormalization, LayerNormalization, Softmax, LogSoftmax: each
node's reference against an independent numpy formula, its compute (default schedule, built
and run) against the reference, ONNX Runtime agreement, and every error path."""
from __future__ import annotations

import numpy as np
import pytest
from graph_util import assert_close, check_op, one_node, onnx_run, rand

from looptune.graph import GraphError, OpPattern, get_op


def conv_np(x, w, b=None, strides=None, pads=None, dilations=None, group=1):
    """Direct N-d convolution by loops over output positions (independent of the reference's
    per-tap slicing)."""
    nd = x.ndim - 2
    strides, dilations = strides or [1] * nd, dilations or [1] * nd
    pads = pads or [0] * 2 * nd
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[d], pads[nd + d])
                                                          for d in range(nd)])
    M, cig = w.shape[0], w.shape[1]
    span = [(k - 1) * dl + 1 for k, dl in zip(w.shape[2:], dilations)]
    out_sp = [(xp.shape[2 + d] - span[d]) // strides[d] + 1 for d in range(nd)]
    y = np.zeros((x.shape[0], M, *out_sp))
    for m in range(M):
        g = m // (M // group)
        wk = w[m].astype(np.float64)
        for o in np.ndindex(*out_sp):
            sl = tuple(slice(o[d] * strides[d], o[d] * strides[d] + span[d], dilations[d])
                       for d in range(nd))
            patch = xp[(slice(None), slice(g * cig, (g + 1) * cig), *sl)]
            y[(slice(None), m, *o)] = (patch * wk).reshape(x.shape[0], -1).sum(1)
    if b is not None:
        y += b.reshape((1, M) + (1,) * nd)
    return y


CONV_CASES = [
    ((1, 3, 7, 9), (4, 3, 3, 3), {}),
    ((2, 4, 8, 7), (6, 2, 3, 2), {"group": 2, "pads": [1, 0, 2, 1], "strides": [2, 1],
                                  "dilations": [1, 2]}),
    ((1, 5, 9, 6), (5, 1, 3, 3), {"group": 5, "pads": [1, 1, 1, 1]}),            # depthwise
    ((1, 3, 11), (2, 3, 4), {"strides": [3], "dilations": [2], "pads": [2, 1]}),  # 1-D
    ((1, 2, 5, 5), (3, 2, 1, 1), {}),                                            # 1x1
    ((1, 3, 4, 4), (3, 1, 1, 1), {"group": 3}),                                  # no reduction
    ((1, 2, 3, 4, 5), (2, 2, 2, 2, 2), {"pads": [1, 0, 1, 0, 1, 0]}),            # 3-D
]


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.slow
def test_conv(rng, xs, ws, attrs, bias):
    x, w = rand(rng, xs), rand(rng, ws)
    b = rand(rng, (ws[0],)) if bias else None
    want = conv_np(x, w, b, attrs.get("strides"), attrs.get("pads"), attrs.get("dilations"),
                   attrs.get("group", 1))
    check_op("Conv", [x, w, b], consts=(1,), expect=[want], rtol=1e-5, atol=1e-5, **attrs)


@pytest.mark.parametrize("auto_pad, strides", [("SAME_UPPER", [2, 2]), ("SAME_LOWER", [1, 3]),
                                               ("VALID", [2, 1])])
def test_conv_auto_pad_agrees_with_onnxruntime(rng, auto_pad, strides):
    pytest.importorskip("onnxruntime")
    x, w = rand(rng, (1, 2, 7, 8)), rand(rng, (3, 2, 3, 2))
    ref = check_op("Conv", [x, w], auto_pad=auto_pad, strides=strides)
    (ort,) = onnx_run("Conv", [x, w], auto_pad=auto_pad, strides=strides)
    assert_close(ref[0], ort, 1e-5, 1e-5, "onnxruntime")


def test_conv_float16_accumulates_in_float32(rng):
    x, w = rand(rng, (1, 3, 6, 5), "float16"), rand(rng, (4, 3, 3, 3), "float16")
    want = conv_np(x, w, pads=[1, 1, 1, 1])
    check_op("Conv", [x, w], expect=[want], rtol=2e-3, atol=2e-3, pads=[1, 1, 1, 1])


@pytest.mark.parametrize("ta, tb, c_shape, alpha, beta", [
    (0, 0, None, 1.5, 1.0), (1, 0, (4,), 1.0, 1.0), (0, 1, (3, 1), 0.5, 2.0),
    (1, 1, (3, 4), 1.0, 0.0), (0, 0, (), 2.0, -1.0)])
def test_gemm(rng, ta, tb, c_shape, alpha, beta):
    a = rand(rng, (5, 3) if ta else (3, 5))
    b = rand(rng, (4, 5) if tb else (5, 4))
    c = rand(rng, c_shape) if c_shape is not None else None
    want = alpha * ((a.T if ta else a) @ (b.T if tb else b)) + (beta * c if c is not None else 0)
    check_op("Gemm", [a, b, c], expect=[want], transA=ta, transB=tb, alpha=alpha, beta=beta)


@pytest.mark.parametrize("sa, sb, dtype", [
    ((3, 7), (7, 5), "float32"), ((2, 1, 3, 4), (5, 4, 6), "float32"),
    ((4,), (2, 4, 3), "float32"), ((2, 3, 4), (4,), "float64"), ((6,), (6,), "float32"),
    ((2, 3, 5), (2, 5, 2), "int32"), ((3, 33), (33, 4), "float16")])
@pytest.mark.slow
def test_matmul(rng, sa, sb, dtype):
    lo, hi = (-8, 8) if dtype == "int32" else (-1, 1)
    a, b = rand(rng, sa, dtype, lo, hi), rand(rng, sb, dtype, lo, hi)
    tol = 2e-3 if dtype == "float16" else 1e-5
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    check_op("MatMul", [a, b], expect=[want], rtol=tol, atol=tol)


def test_batchnorm(rng):
    x = rand(rng, (2, 3, 4, 5))
    scale, b, mean = rand(rng, (3,)), rand(rng, (3,)), rand(rng, (3,))
    var = rand(rng, (3,), lo=0.1, hi=2.0)
    sh = (1, 3, 1, 1)
    want = ((x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + 1e-3) * scale.reshape(sh)
            + b.reshape(sh))
    check_op("BatchNormalization", [x, scale, b, mean, var], consts=(1, 2, 3, 4),
             expect=[want], epsilon=1e-3)
    assert get_op("BatchNormalization").pattern is OpPattern.BROADCAST


@pytest.mark.parametrize("shape, axis, bias, outputs", [
    ((4, 7), -1, True, 1), ((2, 3, 5), 1, False, 3), ((3, 4), 0, True, 3)])
def test_layernorm(rng, shape, axis, bias, outputs):
    x = rand(rng, shape)
    a = axis % len(shape)
    scale = rand(rng, shape[a:])
    b = rand(rng, shape[-1:]) if bias else None
    axes = tuple(range(a, len(shape)))
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1 / np.sqrt(x.var(axis=axes, keepdims=True) + 1e-5)
    want = [(x - mean) * inv * scale + (b if bias else 0), mean, inv][:outputs]
    check_op("LayerNormalization", [x, scale, b], expect=want, axis=axis, outputs=outputs,
             rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape, axis", [((3, 7), -1), ((2, 3, 5), 1), ((4, 3), 0)])
@pytest.mark.slow
def test_softmax(rng, op, shape, axis):
    x = rand(rng, shape, lo=-4, hi=4)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    want = e / e.sum(axis=axis, keepdims=True)
    check_op(op, [x], expect=[want if op == "Softmax" else np.log(want)], axis=axis,
             rtol=1e-5, atol=1e-6)


def test_layernorm_with_an_omitted_middle_output(rng):
    """Outputs (Y, "", InvStdDev): the compute gives None for the omitted one."""
    from graph_util import run_node

    from looptune.graph import Graph, Node
    x, scale = rand(rng, (3, 4)), rand(rng, (4,))
    node = Node.make("LayerNormalization", ["x", "s"], ["y", "", "inv"], {}, "node")
    g = Graph.from_parts("ln", [("x", _tt(x))], {"s": scale}, [node], ["y", "inv"])
    ref = g.run_reference([x])
    got = run_node(g, {"x": x})
    assert got[1] is None
    assert_close(got[0], ref[0], 1e-5, 1e-6)
    assert_close(got[2], ref[1], 1e-5, 1e-6)
    assert_close(ref[1], 1 / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5), 1e-5, 1e-6)


def _tt(a):
    from looptune.graph import TensorType
    return TensorType(a.shape, a.dtype.name)


def test_patterns_of_nn_ops():
    for op in ("Conv", "Gemm", "MatMul"):
        assert get_op(op).pattern is OpPattern.OUT_ELEMWISE_FUSABLE
    for op in ("Softmax", "LogSoftmax", "LayerNormalization"):
        assert get_op(op).pattern is OpPattern.OPAQUE


def _x(rng=None):
    return np.zeros((1, 4, 5, 5), "float32")


CONV_ERRORS = [
    ([_x(), np.zeros((2, 4, 3), "float32")], {}, r"input 1 \(W: .*\) must have rank 4"),
    ([_x(), np.zeros((2, 2, 3, 3), "float32")], {}, r"the weight has 2 input channels per group; "
                                                    r"X has 4 channels in 1 group"),
    ([_x(), np.zeros((3, 2, 3, 3), "float32")], {"group": 2}, r"group=2 must be a positive int "
                                                              r"dividing .* output channels"),
    ([_x(), np.zeros((2, 4, 3, 3), "float32"), np.zeros(3, "float32")], {},
     r"the bias \(input 2\) must have shape \[2\] \(one per output channel\); got \[3\]"),
    ([_x(), np.zeros((2, 4, 3, 3), "float32")], {"kernel_shape": [2, 2]},
     r"kernel_shape=\[2, 2\] does not match the weight's spatial shape \[3, 3\]"),
    ([_x(), np.zeros((2, 4, 3, 3), "float32")], {"auto_pad": "SAME"},
     r"auto_pad='SAME' is not one of NOTSET"),
    ([_x(), np.zeros((2, 4, 3, 3), "float32")], {"strides": [1]},
     r"strides=\[1\] must have 2 entries"),
    ([_x(), np.zeros((2, 4, 3, 3), "float32")], {"pads": [1, 1, -1, 1]},
     r"pads=\[1, 1, -1, 1\] must be >= 0"),
    ([_x(), np.zeros((2, 4, 3, 3), "float32")], {"dilations": [0, 1]},
     r"dilations=\[0, 1\] must be >= 1"),
    ([_x(), np.zeros((2, 4, 3, 3), "float32")], {"auto_pad": "VALID", "pads": [1, 1, 1, 1]},
     r"pads=.* and auto_pad=VALID are both given"),
    ([_x(), np.zeros((2, 4, 7, 3), "float32")], {},
     r"the window \(kernel \[7, 3\], dilations \[1, 1\]\) does not fit spatial axis 0 of "
     r"size 5 with pads \(0, 0\)"),
    ([np.zeros((1, 4, 5, 5), "int32"), np.zeros((2, 4, 3, 3), "int32")], {},
     r"dtype int32 is not supported"),
    ([np.zeros((4, 5), "float32"), np.zeros((2, 4), "float32")], {},
     r"input 0 \(X: .*\) must have rank at least 3"),
]


@pytest.mark.parametrize("inputs, attrs, match", CONV_ERRORS)
def test_conv_errors(inputs, attrs, match):
    with pytest.raises(GraphError, match=r"node 'node' \(Conv\): " + match):
        one_node("Conv", inputs, consts=(1, 2), **attrs)


F = "float32"
DOT_ERRORS = [
    ("Gemm", [np.zeros((3, 4), F), np.zeros((5, 2), F)], {},
     r"A is 3x4 and B is 5x2: the inner sizes differ"),
    ("Gemm", [np.zeros((3, 4), F), np.zeros((2, 4), F)], {"transA": 1},
     r"A \(transposed\) is 4x3 .* inner sizes differ"),
    ("Gemm", [np.zeros((3, 4), F), np.zeros((4, 2), F), np.zeros((3, 3), F)], {},
     r"C \(input 2\) of shape \[3, 3\] does not broadcast to the output \[3, 2\]"),
    ("Gemm", [np.zeros((3,), F), np.zeros((3, 2), F)], {}, r"input 0 \(A\) must have rank 2"),
    ("MatMul", [np.zeros((3, 4), F), np.zeros((5, 2), F)], {},
     r"shapes \[3, 4\] and \[5, 2\] do not multiply: A has 4 columns, B has 5 rows"),
    ("MatMul", [np.zeros((2, 3, 4), F), np.zeros((3, 4, 2), F)], {},
     r"input shapes \[2\], \[3\] do not broadcast"),
    ("MatMul", [np.zeros((2, 3), "int8"), np.zeros((3, 2), "int8")], {},
     r"dtype int8 is not supported"),
    ("MatMul", [np.zeros((2, 3), F), np.zeros((3, 2), "float64")], {},
     r"inputs have different dtypes"),
]


@pytest.mark.parametrize("op, inputs, attrs, match", DOT_ERRORS)
def test_gemm_matmul_errors(op, inputs, attrs, match):
    with pytest.raises(GraphError, match=rf"node 'node' \({op}\): " + match):
        one_node(op, inputs, **attrs)


def _bn_inputs(c=3, n=3):
    return [np.zeros((2, c, 4), F)] + [np.ones(n, F)] * 4


NORM_ERRORS = [
    ("BatchNormalization", _bn_inputs(), {"training_mode": 1}, None,
     r"training_mode=1 is not supported"),
    ("BatchNormalization", _bn_inputs(), {}, 3,
     r"output 1 \(running_mean, 'node_\d+'\) is not supported: they only exist in training"),
    ("BatchNormalization", _bn_inputs(n=4), {}, None,
     r"input 1 \(scale\) must have shape \[3\]"),
    ("BatchNormalization", [np.zeros(3, F)] + _bn_inputs()[1:], {}, None,
     r"input 0 \(X: N x C x ...\) must have rank at least 2"),
    ("LayerNormalization", [np.zeros((2, 3), F), np.ones(3, F)], {"axis": 2}, None,
     r"axis=2 is out of range for a rank-2 input"),
    ("LayerNormalization", [np.zeros((2, 3), F), np.ones(2, F)], {}, None,
     r"input 1 \(Scale\) of shape \[2\] does not broadcast to the normalized shape \[3\]"),
    ("Softmax", [np.zeros((2, 3), F)], {"axis": -3}, None, r"axis=-3 is out of range"),
    ("LogSoftmax", [np.zeros((2, 3), "int32")], {}, None, r"dtype int32 is not supported"),
]


@pytest.mark.parametrize("op, inputs, attrs, outputs, match", NORM_ERRORS)
def test_normalization_errors(op, inputs, attrs, outputs, match):
    with pytest.raises(GraphError, match=rf"node 'node' \({op}\): " + match):
        one_node(op, inputs, consts=(1, 2, 3, 4), outputs=outputs, **attrs)
