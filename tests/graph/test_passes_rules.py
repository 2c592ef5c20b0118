"""Each algebraic rule (simplify) and each BN-folding rule: a before/after test on a small graph
with odd shapes, op types and counts after, outputs equal to the original graph's reference."""
from __future__ import annotations

import numpy as np
import pytest
from passes_util import check_pass, needs, op_types, rand

from looptune.graph import Graph
from looptune.graph.passes import fold_batchnorm, simplify

RNG = np.random.default_rng(17)


def _simplified(g: Graph, rule: str, times: int = 1, **kw):
    opt, stats = check_pass(g, simplify, **kw)
    assert stats.total("simplify", rule) == times, str(stats)
    return opt

# ---- removals ----------------------------------------------------------------------------------


@needs("Identity", "Dropout")
def test_identity_and_inference_dropout_are_removed_outputs_keep_their_names():
    g = Graph("rm")
    x = g.input("x", (3, 5))
    a = g.op("Identity", g.op("Relu", x, name="r"))
    d = g.op("Dropout", g.op("Exp", a), np.float32(0.3), name="y")    # graph output
    g.output(d)
    opt = _simplified(g, "identity")
    assert op_types(opt) == ["Relu", "Exp"] and opt.outputs == ["y"]
    assert opt.nodes[-1].outputs == ("y",)                  # Exp took the output's name


@needs("Dropout")
def test_dropout_with_a_constant_false_training_mode_is_removed():
    g = Graph("drop")
    x = g.input("x", (4,))
    g.output(g.op("Dropout", g.op("Relu", x), np.float32(0.5), np.array(False)))
    opt = _simplified(g, "dropout")
    assert op_types(opt) == ["Relu"]


@needs("Identity")
def test_identity_of_a_graph_input_as_output_stays():
    g = Graph("io")
    g.output(g.op("Identity", g.input("x", (2, 3)), name="y"))
    opt, _ = check_pass(g, simplify)
    assert op_types(opt) == ["Identity"] and opt.outputs == ["y"]


@needs("Pad")
def test_pad_of_zeros_is_removed_as_attribute_or_input():
    g = Graph("pad")
    x = g.input("x", (1, 3, 5, 7))
    a = g.op("Pad", g.op("Relu", x), np.zeros(8, np.int64))
    b = g.op("Pad", a, pads=[0, 0, 0, 0, 0, 0, 0, 0])
    c = g.op("Pad", b, np.array([0, 0, 1, 0, 0, 0, 1, 0], np.int64))    # real padding: stays
    g.output(c)
    opt = _simplified(g, "pad_zero", 2)
    assert op_types(opt) == ["Relu", "Pad"]


@needs("Sum", "Concat")
def test_single_input_sum_and_concat_are_removed():
    g = Graph("one")
    x = g.input("x", (2, 3, 5))
    y = g.op("Concat", g.op("Sum", g.op("Tanh", x)), axis=1)
    g.output(g.op("Sigmoid", y))
    opt = _simplified(g, "single_input", 2)
    assert op_types(opt) == ["Tanh", "Sigmoid"]


@needs("Reshape", "Flatten")
def test_reshapes_to_the_same_shape_vanish_and_chains_collapse():
    g = Graph("rs")
    x = g.input("x", (2, 3, 5))
    a = g.op("Reshape", g.op("Relu", x), np.array([2, 3, 5], np.int64))     # same type
    b = g.op("Reshape", g.op("Flatten", a, axis=1), np.array([6, 5], np.int64))
    g.output(g.op("Exp", b))
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Relu", "Reshape", "Exp"]
    assert stats.total("simplify", "type_noop") == 1
    assert stats.total("simplify", "reshape_reshape") == 1

# ---- transposes --------------------------------------------------------------------------------


@needs("Transpose")
def test_transpose_pair_cancels_and_a_pair_merges():
    g = Graph("tt")
    x = g.input("x", (2, 3, 5))
    a = g.op("Transpose", g.op("Transpose", x, perm=[0, 2, 1]), perm=[0, 2, 1])
    b = g.op("Transpose", g.op("Transpose", a, perm=[1, 2, 0]), perm=[1, 0, 2])
    g.output(g.op("Transpose", b, perm=[0, 1, 2]))                       # identity perm
    opt = _simplified(g, "transpose_transpose", 2)
    assert op_types(opt) == ["Transpose"]
    assert opt.nodes[0].attr("perm") == (2, 1, 0) and opt.nodes[0].inputs == ("x",)


@needs("Transpose", "Clip")
def test_transpose_sinks_below_unary_ops_and_cancels():
    g = Graph("sink")
    x = g.input("x", (3, 4, 5))
    t = g.op("Transpose", x, perm=[2, 0, 1])
    u = g.op("Clip", g.op("Sigmoid", g.op("Relu", t)), np.float32(0.1), np.float32(0.7))
    g.output(g.op("Transpose", u, perm=[1, 2, 0], name="y"))
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Relu", "Sigmoid", "Clip"] and opt.nodes[0].inputs == ("x",)
    assert stats.total("simplify", "sink_transpose_unary") == 3


@needs("Transpose")
def test_transpose_sinks_below_a_binary_op_with_a_constant():
    g = Graph("bin")
    x = g.input("x", (3, 4, 5))
    t = g.op("Transpose", x, perm=[1, 2, 0])                            # (4, 5, 3)
    a = g.op("Add", t, rand(RNG, 5, 3))                                 # broadcast constant
    m = g.op("Pow", np.float32(1.5), a)                                 # constant first
    g.output(g.op("Transpose", m, perm=[2, 0, 1]))
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Add", "Pow"]
    assert opt.types[opt.nodes[0].inputs[1]].shape == (3, 1, 5)      # (1, 5, 3) moved back
    assert opt.nodes[1].inputs[1] == opt.nodes[0].outputs[0]
    assert stats.total("simplify", "sink_transpose_binary_const") == 2


@needs("Transpose")
def test_transpose_sinks_below_a_binary_op_of_two_equal_transposes():
    g = Graph("pair")
    x, y = g.input("x", (2, 3, 5)), g.input("y", (2, 3, 5))
    s = g.op("Sub", g.op("Transpose", x, perm=[2, 0, 1]), g.op("Transpose", y, perm=[2, 0, 1]))
    g.output(g.op("Exp", s))
    opt = _simplified(g, "sink_transpose_binary_pair")
    assert op_types(opt) == ["Sub", "Exp", "Transpose"]         # and on below Exp


@needs("Transpose")
def test_a_transpose_read_twice_does_not_sink():
    g = Graph("two")
    x = g.input("x", (3, 5))
    t = g.op("Transpose", x)
    g.output(g.op("Relu", t), g.op("Exp", t))
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Transpose", "Relu", "Exp"] and stats.total() == 0

# ---- GEMM, MatMul, ReduceMean ------------------------------------------------------------------


@needs("Gemm", "Transpose")
@pytest.mark.parametrize("with_c", [False, True])
def test_gemm_of_transposed_operands_becomes_transpose_of_gemm(with_c):
    g = Graph("gemm")
    a, b = g.input("a", (7, 3)), g.input("b", (5, 7))                  # A^T: 3x7, B^T: 7x5
    c = [g.const(rand(RNG, 3, 5))] if with_c else []
    g.output(g.op("Gemm", a, b, *c, transA=1, transB=1, alpha=0.5, beta=0.0, name="y"))
    opt = _simplified(g, "gemm_transposed")
    assert op_types(opt) == ["Gemm", "Transpose"] and opt.outputs == ["y"]
    assert opt.nodes[0].inputs == ("b", "a") and opt.nodes[0].attr("alpha") == 0.5


@needs("Gemm")
def test_gemm_with_a_bias_keeps_its_transposes():
    g = Graph("gemmc")
    a, b = g.input("a", (7, 3)), g.input("b", (5, 7))
    g.output(g.op("Gemm", a, b, rand(RNG, 5), transA=1, transB=1))
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Gemm"] and stats.total() == 0


@needs("Gemm", "Transpose")
def test_gemm_absorbs_a_transposed_operand():
    g = Graph("absorb")
    a = g.input("a", (3, 7))
    w = g.input("w", (5, 7))
    g.output(g.op("Gemm", a, g.op("Transpose", w), rand(RNG, 5)))
    opt = _simplified(g, "gemm_absorb_transpose")
    assert op_types(opt) == ["Gemm"] and opt.nodes[0].attr("transB") == 1


@needs("MatMul", "Transpose")
def test_matmul_of_transposes_becomes_transpose_of_matmul():
    g = Graph("mm")
    a, b = g.input("a", (2, 5, 3)), g.input("b", (4, 5))              # batched x broadcast
    y = g.op("MatMul", g.op("Transpose", a, perm=[0, 2, 1]), g.op("Transpose", b))
    g.output(g.op("Relu", y))
    opt = _simplified(g, "matmul_transposed")
    assert op_types(opt) == ["MatMul", "Relu", "Transpose"]     # and on below Relu
    assert opt.nodes[0].inputs == ("b", "a") and opt.nodes[2].attr("perm") == (0, 2, 1)


@needs("MatMul", "Transpose")
def test_matmul_of_other_transposes_stays():
    g = Graph("mm2")
    a, b = g.input("a", (5, 2, 3)), g.input("b", (2, 3, 4))
    g.output(g.op("MatMul", g.op("Transpose", a, perm=[1, 0, 2]), b))
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Transpose", "MatMul"] and stats.total() == 0


@needs("ReduceMean", "GlobalAveragePool", "Flatten")
def test_reducemean_over_hw_becomes_global_average_pool():
    g = Graph("gap")
    x = g.input("x", (2, 3, 5, 7))
    a = g.op("ReduceMean", x, axes=[2, 3], keepdims=1)
    b = g.op("ReduceMean", x, np.array([-1, -2], np.int64), keepdims=0)    # axes as an input
    c = g.op("ReduceMean", x, axes=[1, 2], keepdims=1)                      # not H, W: stays
    g.output(a, b, c)
    opt = _simplified(g, "reducemean_global_pool", 2)
    assert op_types(opt) == ["GlobalAveragePool", "GlobalAveragePool", "Flatten",
                             "ReduceMean"]


@needs("ReduceMean")
def test_reducemean_of_a_3d_tensor_stays():
    g = Graph("ln")
    x = g.input("x", (2, 3, 5))
    g.output(g.op("ReduceMean", x, axes=[2], keepdims=1))
    assert op_types(check_pass(g, simplify)[0]) == ["ReduceMean"]

# ---- Mul / Add by constants --------------------------------------------------------------------


def test_a_chain_of_mul_add_sub_div_by_constants_folds_to_one_mul_and_one_add():
    g = Graph("chain")
    x = g.input("x", (3, 5))
    y = g.op("Mul", g.op("Add", x, rand(RNG, 5)), np.float32(2.0))     # (x+a)*2
    y = g.op("Sub", y, rand(RNG, 3, 1))                                  # - b
    y = g.op("Div", y, np.float32(4.0))                                  # / 4
    y = g.op("Mul", rand(RNG, 5, lo=0.5), y)                             # c * (...)
    y = g.op("Add", g.op("Add", y, np.float32(1.0)), rand(RNG, 1, 5))
    g.output(g.op("Relu", y))
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Mul", "Add", "Relu"], str(opt)
    for rule in ("add_mul", "sub_const", "div_const", "mul_mul", "add_add"):
        assert stats.total("simplify", rule) >= 1, rule


def test_mul_then_add_stays_as_it_is():
    g = Graph("ma")
    x = g.input("x", (4,))
    g.output(g.op("Add", g.op("Mul", x, rand(RNG, 4)), rand(RNG, 4)))
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Mul", "Add"] and stats.total() == 0


def test_an_inner_op_read_twice_is_not_merged():
    g = Graph("shared")
    x = g.input("x", (4,))
    a = g.op("Mul", x, np.float32(3.0))
    g.output(g.op("Mul", a, np.float32(2.0)), g.op("Relu", a))
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Mul", "Mul", "Relu"] and stats.total() == 0


def test_multiply_by_one_and_add_zero_vanish_unless_they_broadcast():
    g = Graph("unit")
    x = g.input("x", (2, 3))
    a = g.op("Add", g.op("Mul", g.op("Exp", x), np.ones(3, "float32")), np.float32(0))
    b = g.op("Mul", x, np.ones((4, 2, 3), "float32"))                    # broadcasts: stays
    g.output(a, b)
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Exp", "Mul"]
    assert stats.total("simplify", "mul_one") == 1 and stats.total("simplify", "add_zero") == 1


def test_integer_chains_fold_exactly():
    g = Graph("ints")
    x = g.input("x", (3, 4), dtype="int32")
    y = g.op("Sub", g.op("Mul", g.op("Add", x, np.int32(3)), np.int32(5)), np.int32(7))
    g.output(g.op("Mul", y, np.int32(-2)))
    opt, _ = check_pass(g, simplify, rtol=0, atol=0)
    assert op_types(opt) == ["Mul", "Add"]

# ---- layout transforms -------------------------------------------------------------------------


def test_layout_transforms_cancel_and_merge():
    g = Graph("lt")
    x = g.input("x", (1, 24, 3, 5))
    a = g.op("LayoutTransform", x, src_layout="NCHW", dst_layout="NCHW8c")
    b = g.op("LayoutTransform", a, src_layout="NCHW8c", dst_layout="NCHW")    # cancels
    c = g.op("LayoutTransform", g.op("Relu", b), src_layout="NCHW", dst_layout="NCHW8c")
    d = g.op("LayoutTransform", c, src_layout="NCHW8c", dst_layout="NCHW4c")  # merges
    e = g.op("LayoutTransform", d, src_layout="NCHW4c", dst_layout="NCHW4c")  # no-op
    g.output(e)
    opt, stats = check_pass(g, simplify)
    assert op_types(opt) == ["Relu", "LayoutTransform"]
    assert opt.nodes[1].attr("dst_layout") == "NCHW4c" and opt.nodes[1].inputs == (
        opt.nodes[0].outputs[0],)
    assert stats.total("simplify", "layout_layout") == 2
    assert stats.total("simplify", "layout_noop") == 1

# ---- batch normalization -----------------------------------------------------------------------


def _bn_params(c: int):
    return [RNG.uniform(0.5, 1.5, c).astype("float32"), rand(RNG, c),
            rand(RNG, c), RNG.uniform(0.2, 2.0, c).astype("float32")]


def _conv(g, x, k, c, bias=True, group=1, **attrs):
    w = g.const(rand(RNG, k, c // group, 3, 3))
    b = [g.const(rand(RNG, k))] if bias else []
    return g.op("Conv", x, w, *b, pads=[1, 0, 1, 2], group=group, **attrs)


@needs("Conv", "BatchNormalization")
@pytest.mark.parametrize("bias, group", [(True, 1), (False, 1), (True, 5)])
def test_batchnorm_folds_into_the_conv_before_it(bias, group):
    g = Graph("convbn")
    x = g.input("x", (2, 5, 9, 7))
    y = g.op("BatchNormalization", _conv(g, x, 10, 5, bias, group, strides=[2, 1]),
             *_bn_params(10), epsilon=1e-3, name="y")
    g.output(g.op("Relu", y))
    opt, stats = check_pass(g, fold_batchnorm)
    assert op_types(opt) == ["Conv", "Relu"] and len(opt.nodes[0].inputs) == 3
    assert opt.nodes[0].attr("group") == group and opt.nodes[0].outputs == ("y",)
    assert stats.total("fold_batchnorm", "bn_into_conv") == 1


@needs("Conv", "BatchNormalization")
def test_batchnorm_after_a_shared_conv_becomes_mul_add():
    g = Graph("shared")
    x = g.input("x", (1, 3, 6, 5))
    c = _conv(g, x, 4, 3)
    g.output(g.op("BatchNormalization", c, *_bn_params(4)), g.op("Relu", c))
    opt, stats = check_pass(g, fold_batchnorm)
    assert op_types(opt) == ["Conv", "Mul", "Add", "Relu"]
    assert stats.total("fold_batchnorm", "bn_to_mul_add") == 1


@needs("BatchNormalization")
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (3, 6), (2, 4, 5)])
def test_a_lone_batchnorm_becomes_mul_and_add(shape):
    g = Graph("bn")
    x = g.input("x", shape)
    g.output(g.op("BatchNormalization", g.op("Exp", x), *_bn_params(shape[1])))
    opt, _ = check_pass(g, fold_batchnorm)
    assert op_types(opt) == ["Exp", "Mul", "Add"]
    assert opt.types[opt.nodes[1].inputs[1]].shape == (shape[1],) + (1,) * (len(shape) - 2)


@needs("Conv")
def test_per_channel_mul_and_add_fold_into_the_conv():
    g = Graph("scale")
    x = g.input("x", (1, 3, 6, 5))
    y = g.op("Mul", rand(RNG, 4, 1, 1), _conv(g, x, 4, 3, bias=False))
    y = g.op("Add", g.op("Mul", y, np.float32(0.5)), rand(RNG, 1, 4, 1, 1))
    z = g.op("Add", _conv(g, x, 4, 3), rand(RNG, 6, 1))               # not per channel: stays
    g.output(y, z)
    opt, stats = check_pass(g, fold_batchnorm)
    assert op_types(opt) == ["Conv", "Conv", "Add"]
    assert stats.total("fold_batchnorm", "mul_into_conv") == 2
    assert stats.total("fold_batchnorm", "add_into_conv") == 1
