"""Winograd convolutions at the graph level: the layout pass turns a 3x3 stride-1 Conv with
enough channels and pixels into ``WinogradNCHWc`` (weights transformed once, as constants);
its reference agrees with the direct convolution, the compiled kernels with the reference
(fused with bias and Relu), ``winograd=False`` keeps the direct form, and a CNN that uses it
agrees with ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.graph.ops.layout import block_nchw, block_weight, conv2d_nchw_np
from looptune.graph.ops.winograd import winograd_weights
from looptune.graph.passes.layout import by_winograd
from looptune.graph.registry import get_op


def _conv_graph(N, C, K, H, W, pad=1, stride=1, kernel=3, bias=True, seed=0):
    rng = np.random.default_rng(seed)
    g = lt.graph.Graph("conv")
    x = g.input("x", (N, C, H, W), "float32")
    w = g.const((rng.standard_normal((K, C, kernel, kernel)) / np.sqrt(C * 9))
                .astype(np.float32), "w")
    b = g.const(rng.standard_normal(K).astype(np.float32), "b") if bias else None
    g.output(g.relu(g.conv2d(x, w, b, pad=pad, stride=stride)))
    return g, rng.standard_normal((N, C, H, W)).astype(np.float32)


def _op_types(g) -> list[str]:
    return [n.op_type for n in g.nodes]


@pytest.mark.parametrize("shape", [(1, 32, 32, 8, 8, 1), (2, 48, 32, 11, 13, 1),
                                   (1, 32, 64, 12, 9, 0), (1, 64, 32, 10, 10, 2)])
def test_reference_is_the_direct_convolution(shape):
    N, C, K, H, W, pad = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((N, C, H, W))
    w = rng.standard_normal((K, C, 3, 3))
    bias = rng.standard_normal(K)
    want = conv2d_nchw_np(x, w, bias, (1, 1), (pad,) * 4, (1, 1))
    u = winograd_weights(block_weight(w, 16, 16), 4)
    op = get_op("WinogradNCHWc")
    g = lt.graph.Graph("w")
    xv = g.input("x", block_nchw(x, 16).shape, "float64")
    out = g.op("WinogradNCHWc", xv, g.const(u, "u"), g.const(bias.reshape(-1, 16), "b"),
               pads=[pad] * 4, m=4)
    g.output(out)
    got = g.run_reference([block_nchw(x, 16)])[0]
    np.testing.assert_allclose(got, block_nchw(want, 16), rtol=1e-9, atol=1e-9)
    assert op.pattern.name == "OUT_ELEMWISE_FUSABLE"


@pytest.mark.parametrize("shape", [(1, 32, 32, 8, 8, 1, True), (2, 32, 48, 11, 13, 1, True),
                                   (1, 64, 32, 11, 12, 0, False), (1, 32, 32, 10, 10, 2, True)])
def test_compiled_winograd_conv_matches_the_reference(shape):
    N, C, K, H, W, pad, bias = shape
    g, x = _conv_graph(N, C, K, H, W, pad=pad, bias=bias, seed=sum(shape[:5]))
    opt = lt.graph.optimize(g)
    assert "WinogradNCHWc" in _op_types(opt)
    want = g.run_reference([x])[0]
    got = lt.graph.compile(g)(x)[0]
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * scale)


def test_winograd_false_keeps_the_direct_convolution():
    g, x = _conv_graph(1, 32, 32, 12, 12)
    stats = lt.graph.PassStats()
    assert "WinogradNCHWc" in _op_types(lt.graph.optimize(g, stats=stats))
    assert "convs by Winograd" in str(stats)
    direct = lt.graph.optimize(g, winograd=False)
    assert "ConvNCHWc" in _op_types(direct) and "WinogradNCHWc" not in _op_types(direct)
    model = lt.graph.compile(g, winograd=False)
    assert "WinogradNCHWc" not in _op_types(model.graph)
    want = g.run_reference([x])[0]
    np.testing.assert_allclose(model(x)[0], want, rtol=1e-4,
                               atol=1e-6 * float(np.abs(want).max()))


@pytest.mark.parametrize("w_shape, x_shape, attrs, want", [
    ((64, 64, 3, 3), (1, 64, 56, 56), {"pads": [1, 1, 1, 1]}, True),
    ((32, 32, 3, 3), (1, 32, 8, 8), {"pads": [1, 1, 1, 1]}, True),
    ((64, 64, 3, 3), (1, 64, 56, 56), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, False),
    ((64, 64, 3, 3), (1, 64, 56, 56), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, False),
    ((64, 64, 1, 1), (1, 64, 56, 56), {}, False),
    ((16, 64, 3, 3), (1, 64, 56, 56), {"pads": [1, 1, 1, 1]}, False),   # few output channels
    ((64, 3, 3, 3), (1, 3, 56, 56), {"pads": [1, 1, 1, 1]}, False),     # an RGB input
    ((64, 64, 3, 3), (1, 64, 7, 7), {"pads": [1, 1, 1, 1]}, False),     # 7 x 7 outputs
])
def test_which_convolutions_run_by_winograd(w_shape, x_shape, attrs, want):
    assert by_winograd(w_shape, x_shape, attrs) is want


def test_a_cnn_with_winograd_layers_agrees_with_onnx_runtime():
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from looptune.graph import zoo
    m = zoo.cnn(batch=2, size=32, channels=(32, 64, 64))
    inputs = zoo.random_inputs(m, seed=3)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, inputs)
    g = lt.graph.from_onnx(m)
    stats = lt.graph.PassStats()
    lt.graph.optimize(g, stats=stats)
    assert "convs by Winograd" in str(stats)
    ours = lt.graph.compile(g)(**inputs)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * float(np.abs(b).max()))
