"""The NCHW[x]c layout: the LayoutTransform and ConvNCHWc operators (numpy reference against
independent formulas, compiled compute against the reference) and the layout pass (blocks,
boundaries, cancellation, fallbacks), always against the reference run of the original graph."""
from __future__ import annotations

import numpy as np
import pytest
from graph_util import check_op
from passes_util import check_pass, needs, op_types, rand

import looptune as lt
from looptune.errors import BuildError
from looptune.graph import Graph, GraphError
from looptune.graph.ops.layout import block_nchw, block_weight, conv2d_nchw_np, unblock_nchw
from looptune.graph.passes import PassStats, layout_nchwc
from looptune.graph.passes.layout import channel_block

RNG = np.random.default_rng(5)

# ---- the operators -----------------------------------------------------------------------------


@pytest.mark.parametrize("src, dst, shape", [
    ("NCHW", "NCHW4c", (2, 12, 3, 5)),
    ("NCHW8c", "NCHW", (1, 3, 5, 3, 8)),
    ("NCHW8c", "NCHW6c", (1, 3, 5, 3, 8)),
])
def test_layout_transform_reference_and_compiled(src, dst, shape):
    x = rand(RNG, *shape)
    nchw = x if src == "NCHW" else x.transpose(0, 1, 4, 2, 3).reshape(
        shape[0], shape[1] * shape[4], shape[2], shape[3])
    if dst == "NCHW":
        want = nchw
    else:
        b = int(dst[4:-1])
        n, c, h, w = nchw.shape
        want = np.stack([nchw[:, k * b:(k + 1) * b] for k in range(c // b)], 1)   # N,C/b,b,H,W
        want = want.transpose(0, 1, 3, 4, 2)
    check_op("LayoutTransform", [x], expect=[want], src_layout=src, dst_layout=dst)


def test_block_helpers_round_trip():
    x = rand(RNG, 2, 12, 3, 5)
    assert np.array_equal(unblock_nchw(block_nchw(x, 4)), x)
    assert block_nchw(x, 4)[1, 2, 1, 3, 1] == x[1, 9, 1, 3]
    w = rand(RNG, 8, 6, 3, 1)
    assert block_weight(w, 3, 4)[1, 0, 2, 0, 2, 3] == w[7, 2, 2, 0]


@pytest.mark.parametrize("shape, attrs, match", [
    ((1, 12, 3, 5), dict(src_layout="NCHW", dst_layout="NHWC"),
     r"\(LayoutTransform\): layout 'NHWC' is not supported; use 'NCHW' or 'NCHW<b>c'"),
    ((1, 12, 3, 5), dict(src_layout="NCHW", dst_layout="NCHW5c"),
     r"12 channels do not split into blocks of 5; choose a block that divides 12"),
    ((1, 12, 3, 5), dict(src_layout="NCHW4c", dst_layout="NCHW"),
     r"src_layout NCHW4c needs a 5-D input whose last axis is 4; got shape \[1, 12, 3, 5\]"),
    ((1, 12, 3), dict(src_layout="NCHW", dst_layout="NCHW4c"),
     r"src_layout NCHW needs a 4-D input; got shape \[1, 12, 3\]"),
])
def test_layout_transform_errors_name_the_node(shape, attrs, match):
    g = Graph("e")
    with pytest.raises(GraphError, match=match):
        g.op("LayoutTransform", g.input("x", shape), **attrs)


def _conv_case(n=1, c=6, k=8, h=7, w=5, kh=3, kw=2, bc=3, bk=4):
    x, wt, bias = rand(RNG, n, c, h, w), rand(RNG, k, c, kh, kw), rand(RNG, k)
    return x, wt, bias, block_nchw(x, bc), block_weight(wt, bc, bk), bias.reshape(k // bk, bk)


@pytest.mark.parametrize("attrs", [
    dict(pads=[1, 0, 2, 1]),
    dict(strides=[2, 1], dilations=[1, 2], pads=[0, 1, 0, 1]),
])
def test_conv_nchwc_matches_a_plain_conv_and_compiles(attrs):
    x, w, bias, xb, wb, bb = _conv_case()
    want = conv2d_nchw_np(x, w, bias, attrs.get("strides", [1, 1]), attrs["pads"],
                          attrs.get("dilations", [1, 1]))
    check_op("ConvNCHWc", [xb, wb, bb], consts=(1, 2), expect=[block_nchw(want, 4)],
             rtol=1e-4, atol=1e-5, **attrs)


def test_conv2d_nchw_np_agrees_with_a_direct_sum():
    rng = np.random.default_rng(83)      # its own draws: the result must not hang on order
    x, w = rand(rng, 1, 2, 4, 5), rand(rng, 3, 2, 2, 3)
    out = conv2d_nchw_np(x, w, None, [1, 2], [0, 1, 0, 1], [1, 1])
    xp = np.pad(x, ((0, 0), (0, 0), (0, 0), (1, 1)))
    want = np.zeros_like(out)
    for k in range(3):
        for y in range(out.shape[2]):
            for z in range(out.shape[3]):
                want[0, k, y, z] = np.sum(xp[0, :, y:y + 2, 2 * z:2 * z + 3] * w[k])
    # float32 sums of 12 products in another order: a few ulps apart, relative to the terms
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shapes, match", [
    (((1, 2, 5, 5, 3), (2, 1, 3, 3, 3, 4)),
     r"input \[1, 2, 5, 5, 3\] and weight \[2, 1, 3, 3, 3, 4\] are not NCHW\{bc\}c data"),
    (((1, 2, 2, 2, 3), (2, 2, 3, 3, 3, 4)), r"the 3x3 kernel does not fit the 2x2 input"),
])
def test_conv_nchwc_errors_name_the_node(shapes, match):
    g = Graph("e")
    x = g.input("x", shapes[0])
    with pytest.raises(GraphError, match=match):
        g.op("ConvNCHWc", x, g.const(np.zeros(shapes[1], "float32")))

# ---- the pass ----------------------------------------------------------------------------------


def _conv(g, x, k, c, pads=(1, 1, 1, 1), **attrs):
    """A 3x3 Conv with random weights scaled by 1/sqrt(fan-in), so that chains of them keep
    their values small (an Exp of a stacked pair overflowed to inf with unscaled draws)."""
    w = rand(RNG, k, c, 3, 3) / np.float32(np.sqrt(c * 9))
    return g.op("Conv", x, g.const(w), g.const(rand(RNG, k)), pads=list(pads), **attrs)


@needs("Conv")
def test_a_conv_chain_is_blocked_with_transforms_only_at_the_boundaries():
    g = Graph("chain")
    x = g.input("x", (2, 3, 9, 7))
    y = g.op("Relu", _conv(g, x, 8, 3))
    y = g.op("Add", _conv(g, y, 8, 8, strides=[2, 1]), rand(RNG, 8, 1, 1))   # BN-folded bias
    y = g.op("Sigmoid", g.op("Mul", y, np.float32(0.5)), name="y")
    g.output(y)
    opt, stats = check_pass(g, layout_nchwc, block=4)
    assert op_types(opt) == ["LayoutTransform", "ConvNCHWc", "Relu", "ConvNCHWc", "Add", "Mul",
                             "Sigmoid", "LayoutTransform"]
    assert opt.nodes[0].attr("dst_layout") == "NCHW3c"                     # 3 input channels
    assert opt.nodes[-1].outputs == ("y",) and opt.nodes[-1].attr("src_layout") == "NCHW4c"
    assert opt.types[opt.nodes[4].inputs[1]].shape == (1, 2, 1, 1, 4)      # bias blocked
    assert stats.total("layout_nchwc", "convs blocked") == 2
    assert stats.total("layout_nchwc", "transforms inserted") == 2
    assert stats.total("layout_nchwc", "transform pairs cancelled") == 5


@needs("Conv", "Softmax")
def test_a_residual_block_stays_blocked_and_nchw_readers_get_one_transform():
    g = Graph("res")
    x = g.input("x", (1, 12, 5, 6))
    a = g.op("Relu", _conv(g, x, 12, 12), name="a")
    b = _conv(g, a, 12, 12)
    s = g.op("Relu", g.op("Add", b, a))                                      # both blocked
    p = g.op("Softmax", s, axis=1)                                           # NCHW reader
    g.output(p, g.op("Exp", s, name="e"), "a")
    opt, stats = check_pass(g, layout_nchwc, block=8)
    assert stats.total("layout_nchwc", "convs blocked") == 2
    lts = [n for n in opt.nodes if n.op_type == "LayoutTransform"]
    assert [n.attr("dst_layout") for n in lts] == ["NCHW6c", "NCHW", "NCHW", "NCHW"]
    assert {n.outputs[0] for n in lts[1:]} == {"a", s.name, "e"}            # names kept
    assert opt.outputs == g.outputs


@needs("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean",
       "ReduceMax")
def test_pools_of_blocked_values_stay_blocked():
    g = Graph("pools")
    x = g.input("x", (2, 4, 9, 8))
    y = g.op("MaxPool", g.op("Relu", _conv(g, x, 8, 4)), kernel_shape=[3, 2], strides=[2, 2],
             pads=[1, 0, 1, 1], ceil_mode=1)
    y = g.op("AveragePool", _conv(g, y, 8, 8), kernel_shape=[2, 3], pads=[0, 1, 1, 1],
             count_include_pad=0, dilations=[1, 2])
    g.output(g.op("GlobalAveragePool", y, name="avg"), g.op("GlobalMaxPool", y, name="max"))
    opt, stats = check_pass(g, layout_nchwc, block=4)
    assert op_types(opt) == ["LayoutTransform", "ConvNCHWc", "Relu", "MaxPool", "ConvNCHWc",
                             "AveragePool", "ReduceMean", "LayoutTransform", "ReduceMax",
                             "LayoutTransform"]
    assert opt.nodes[3].attr("kernel_shape") == (3, 2, 1)
    assert opt.nodes[3].attr("pads") == (1, 0, 0, 1, 1, 0)
    assert stats.total("layout_nchwc", "pools blocked") == 4
    assert stats.total("layout_nchwc", "transforms inserted") == 3


@needs("Conv")
def test_channel_counts_without_a_divisor_stay_nchw():
    assert [channel_block(c, 16) for c in (16, 24, 3, 17, 64, 1)] == [16, 12, 3, 1, 16, 1]
    g = Graph("odd")
    x = g.input("x", (1, 3, 5, 5))
    y = g.op("Relu", _conv(g, x, 17, 3))                                   # 17: prime, stays
    g.output(_conv(g, y, 10, 17))                                          # 17 -> 10: blocked
    opt, stats = check_pass(g, layout_nchwc, block=8)
    assert op_types(opt) == ["Conv", "Relu", "LayoutTransform", "ConvNCHWc", "LayoutTransform"]
    assert opt.nodes[2].attr("dst_layout") == "NCHW1c" and stats.total(what="convs blocked") == 1


@needs("Conv")
def test_grouped_and_same_padded_convs_stay_nchw():
    g = Graph("skip")
    x = g.input("x", (1, 4, 6, 6))
    w = g.const(rand(RNG, 8, 2, 3, 3))
    y = g.op("Conv", x, w, group=2, pads=[1, 1, 1, 1])
    g.output(g.op("Conv", y, g.const(rand(RNG, 8, 8, 3, 3)), auto_pad="SAME_UPPER"))
    stats = PassStats()
    assert layout_nchwc(g, stats, block=4) is g and stats.total() == 0


@needs("Conv")
def test_the_block_comes_from_the_target_lanes():
    g = Graph("lanes")
    x = g.input("x", (1, 16, 4, 4))
    g.output(_conv(g, x, 16, 16))
    sse = layout_nchwc(g, target="c -march=x86-64")                        # SSE2: 4 lanes
    assert sse.nodes[0].attr("dst_layout") == "NCHW4c"
    stats = PassStats()
    assert layout_nchwc(g, stats, target="opencl") is g                  # no lanes: as it is
    assert stats.total("layout_nchwc", "skipped (no vector lanes)") == 1


@pytest.mark.parametrize("block", [0, 2.5, "8"])
def test_a_bad_block_is_refused(block):
    g = Graph("b")
    g.output(g.op("Relu", g.input("x", (1, 4, 2, 2))))
    with pytest.raises(BuildError, match=r"layout_nchwc\(block=.*\): the block must be a "
                                         r"positive int"):
        layout_nchwc(g, block=block)


@needs("Conv")
@pytest.mark.slow
def test_a_blocked_graph_compiles_and_matches_the_reference():
    g = Graph("compiled")
    x = g.input("x", (1, 5, 7, 6))
    y = g.op("Relu", g.op("Add", _conv(g, x, 8, 5), rand(RNG, 8, 1, 1)))
    g.output(_conv(g, y, 4, 8, pads=(0, 1, 0, 1)))
    opt = layout_nchwc(g, block=4)
    assert "ConvNCHWc" in op_types(opt)
    model = lt.graph.compile(opt, optimize=False)
    xin = rand(RNG, 1, 5, 7, 6)
    np.testing.assert_allclose(model(xin)[0], g.run_reference([xin])[0], rtol=1e-4, atol=1e-5)
