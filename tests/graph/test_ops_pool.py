"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool: reference against a loop-by-window
numpy formula, compiled kernels against the reference, ONNX Runtime agreement on the window
options (ceil_mode, count_include_pad, auto_pad, dilations), and every error path."""
from __future__ import annotations

import numpy as np
import pytest
from graph_util import assert_close, check_op, one_node, onnx_run, rand

from looptune.graph import GraphError, OpPattern, get_op


def pool_np(x, kernel, strides, pads, kind, count_include_pad=0):
    """Pooling by looping over output positions of a floor-mode window (no ceil_mode, no
    dilation): the maximum ignores padding, the average divides by the counted taps."""
    nd = x.ndim - 2
    xf = x.astype(np.float64)
    out = [(x.shape[2 + d] + pads[d] + pads[nd + d] - kernel[d]) // strides[d] + 1
           for d in range(nd)]
    y = np.zeros(x.shape[:2] + tuple(out))
    for o in np.ndindex(*out):
        lo = [o[d] * strides[d] - pads[d] for d in range(nd)]
        hi = [lo[d] + kernel[d] for d in range(nd)]
        sl = tuple(slice(max(lo[d], 0), min(hi[d], x.shape[2 + d])) for d in range(nd))
        win = xf[(slice(None), slice(None), *sl)].reshape(x.shape[0], x.shape[1], -1)
        if kind == "max":
            y[(slice(None), slice(None), *o)] = win.max(-1)
        else:
            n = win.shape[-1] if not count_include_pad else np.prod(kernel)
            y[(slice(None), slice(None), *o)] = win.sum(-1) / n
    return y


@pytest.mark.parametrize("xs, kernel, strides, pads", [
    ((2, 3, 8, 7), [3, 3], [1, 1], [0, 0, 0, 0]),
    ((1, 2, 9, 6), [3, 2], [2, 2], [1, 0, 1, 1]),
    ((1, 2, 11), [4], [3], [2, 1]),
    ((1, 2, 5, 6), [1, 1], [2, 3], [0, 0, 0, 0]),                   # no reduction left
])
@pytest.mark.parametrize("op, cip", [("MaxPool", 0), ("AveragePool", 0), ("AveragePool", 1)])
@pytest.mark.slow
def test_pool(rng, xs, kernel, strides, pads, op, cip):
    x = rand(rng, xs)
    kind = "max" if op == "MaxPool" else "avg"
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads}
    if op == "AveragePool":
        attrs["count_include_pad"] = cip
    want = pool_np(x, kernel, strides, pads, kind, cip)
    check_op(op, [x], expect=[want], **attrs)


WINDOWS = [
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "strides": [2, 3], "pads": [1, 1, 0, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 1], "auto_pad": "VALID"},
]


@pytest.mark.parametrize("attrs", WINDOWS)
@pytest.mark.slow
def test_pool_windows_agree_with_onnxruntime(rng, attrs):
    """ceil_mode (windows reaching past the end pad), auto_pad and dilations: the compiled
    kernels against the reference, and the reference against ONNX Runtime."""
    pytest.importorskip("onnxruntime")
    x = rand(rng, (2, 3, 8, 7))
    for op, extra in [("MaxPool", {}), ("AveragePool", {"count_include_pad": 0}),
                      ("AveragePool", {"count_include_pad": 1})]:
        ref = check_op(op, [x], **attrs, **extra)
        (ort,) = onnx_run(op, [x], opset=19, **attrs, **extra)
        assert_close(ref[0], ort, 1e-5, 1e-6, f"{op} {attrs} {extra} vs onnxruntime")


def test_maxpool_int8_pads_with_the_lowest_value(rng):
    x = rand(rng, (1, 2, 5, 5), "int8", -100, 100)
    want = pool_np(x, [2, 2], [1, 1], [1, 1, 0, 0], "max").astype("int8")
    check_op("MaxPool", [x], expect=[want], kernel_shape=[2, 2], pads=[1, 1, 0, 0])


@pytest.mark.parametrize("xs", [(2, 3, 5, 4), (1, 4, 7)])
def test_global_pools(rng, xs):
    x = rand(rng, xs)
    axes = tuple(range(2, len(xs)))
    check_op("GlobalAveragePool", [x], expect=[x.mean(axis=axes, keepdims=True)])
    check_op("GlobalMaxPool", [x], expect=[x.max(axis=axes, keepdims=True)])


def test_pool_patterns():
    assert get_op("MaxPool").pattern is OpPattern.OUT_ELEMWISE_FUSABLE
    assert get_op("AveragePool").pattern is OpPattern.OUT_ELEMWISE_FUSABLE
    assert get_op("GlobalAveragePool").pattern is OpPattern.COMM_REDUCE
    assert get_op("GlobalMaxPool").pattern is OpPattern.COMM_REDUCE


X = np.zeros((1, 2, 5, 5), "float32")
POOL_ERRORS = [
    ("MaxPool", [X], {}, None, r"missing required attribute\(s\) kernel_shape"),
    ("MaxPool", [X], {"kernel_shape": [2]}, None,
     r"kernel_shape=\[2\] must have 2 positive entries"),
    ("MaxPool", [X], {"kernel_shape": [2, 2]}, 2,
     r"output 1 \(Indices, 'node_\d+'\) is not supported: looptune computes the maximum only"),
    ("MaxPool", [X], {"kernel_shape": [2, 2], "storage_order": 2}, None,
     r"storage_order=2 must be 0 or 1"),
    ("MaxPool", [X], {"kernel_shape": [6, 2]}, None,
     r"the window \(kernel \[6, 2\].*\) does not fit spatial axis 0 of size 5"),
    ("MaxPool", [X.astype("int32")], {"kernel_shape": [2, 2]}, None,
     r"dtype int32 is not supported"),
    ("AveragePool", [X], {"kernel_shape": [2, 2], "strides": [0, 1]}, None,
     r"strides=\[0, 1\] must be >= 1"),
    ("AveragePool", [X], {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER",
                          "pads": [1, 1, 1, 1]}, None,
     r"pads=\[1, 1, 1, 1\] and auto_pad=SAME_UPPER are both given"),
    ("AveragePool", [X.astype("int8")], {"kernel_shape": [2, 2]}, None,
     r"dtype int8 is not supported"),
    ("AveragePool", [np.zeros((2, 5), "float32")], {"kernel_shape": [2]}, None,
     r"input 0 \(X: N x C x spatial...\) must have rank at least 3"),
    ("GlobalAveragePool", [np.zeros((2, 5), "float32")], {}, None,
     r"input 0 \(X: N x C x spatial...\) must have rank at least 3"),
    ("GlobalMaxPool", [X.astype("int64")], {}, None, r"dtype int64 is not supported"),
]


@pytest.mark.parametrize("op, inputs, attrs, outputs, match", POOL_ERRORS)
def test_pool_errors(op, inputs, attrs, outputs, match):
    with pytest.raises(GraphError, match=rf"node 'node' \({op}\): " + match):
        one_node(op, inputs, outputs=outputs, **attrs)
