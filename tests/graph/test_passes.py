"""Constant folding, CSE, DCE, the pipeline and its statistics: before/after on small graphs,
outputs equal to the reference run of the original graph."""
from __future__ import annotations

import numpy as np
import pytest
from passes_util import check_pass, needs, op_types, rand

import looptune as lt
from looptune.graph import Graph, GraphError
from looptune.graph.passes import (PassStats, cse, dce, default_pipeline, fold_constants,
                                   optimize, simplify)

# ---- constant folding --------------------------------------------------------------------------


@needs("Transpose")
def test_fold_constants_folds_a_weight_only_subgraph():
    rng = np.random.default_rng(0)
    g = Graph("fold")
    x = g.input("x", (3, 5))
    w = g.const(rand(rng, 7, 5), name="w")
    wt = g.op("Transpose", g.op("Mul", w, 2.0), name="wt")      # weights only: folds
    y = g.op("Relu", g.op("MatMul", x, wt), name="y")
    g.output(y)
    opt, stats = check_pass(g, fold_constants)
    assert op_types(opt) == ["MatMul", "Relu"]
    assert opt.is_const("wt") and opt.types["wt"].shape == (5, 7)      # named as the output
    np.testing.assert_allclose(opt.consts["wt"], (g.consts["w"] * 2).T)
    assert stats.total("fold_constants", "nodes folded") == 2
    assert "w" not in opt.consts                                        # unread: dropped


def test_fold_constants_returns_the_same_graph_when_nothing_folds():
    g = Graph("none")
    g.output(g.op("Relu", g.input("x", (3,))))
    stats = PassStats()
    assert fold_constants(g, stats) is g
    assert stats.total() == 0


@needs("Expand")
def test_fold_constants_size_limit_keeps_a_huge_expand():
    g = Graph("big")
    x = g.input("x", (64, 64))
    big = g.op("Expand", np.float32(3), np.array([64, 64], np.int64), name="big")
    g.output(g.op("Add", x, big))
    opt, stats = check_pass(g, fold_constants, limit_bytes=1024)   # 16 KiB > 1 KiB: kept
    assert op_types(opt) == ["Expand", "Add"]
    assert stats.total("fold_constants", "too large to fold") == 1
    opt2, _ = check_pass(g, fold_constants)                         # default 1 MiB: folds
    assert op_types(opt2) == ["Add"] and opt2.is_const("big")


def test_fold_constants_a_constant_graph_output_keeps_its_name():
    g = Graph("k")
    x = g.input("x", (2,))
    c = g.op("Neg", np.arange(2, dtype="float32"), name="c")
    g.output(g.op("Add", x, c, name="y"), c)
    opt, _ = check_pass(g, fold_constants)
    assert opt.outputs == ["y", "c"] and opt.is_const("c") and op_types(opt) == ["Add"]

# ---- CSE and DCE -------------------------------------------------------------------------------


def test_cse_merges_equal_nodes_and_constants():
    g = Graph("cse")
    x = g.input("x", (3, 7))
    c1 = g.const(np.full(7, 0.5, "float32"), name="c1")
    c2 = g.const(np.full(7, 0.5, "float32"), name="c2")        # same bytes: merged
    a = g.op("Mul", g.op("Relu", x), c1)
    b = g.op("Mul", g.op("Relu", x), c2)                         # same as a once c2 -> c1
    g.output(g.op("Add", a, b, name="y"))
    opt, stats = check_pass(g, cse)
    assert op_types(opt) == ["Relu", "Mul", "Add"]
    assert opt.nodes[-1].inputs[0] == opt.nodes[-1].inputs[1]
    assert stats.total("cse", "nodes merged") == 2 and stats.total("cse", "constants merged") == 1
    assert list(opt.consts) == ["c1"]


def test_cse_keeps_two_graph_outputs_apart():
    g = Graph("outs")
    x = g.input("x", (4,))
    g.output(g.op("Exp", x, name="e1"), g.op("Exp", x, name="e2"))
    opt, _ = check_pass(g, cse)
    assert opt.outputs == ["e1", "e2"] and len(opt.nodes) == 2


def test_cse_an_equal_node_feeding_an_output_takes_the_output_name():
    g = Graph("rename")
    x = g.input("x", (4,))
    a = g.op("Exp", x, name="a")
    g.output(g.op("Add", a, g.op("Exp", x, name="b"), name="s"), "b")
    opt, _ = check_pass(g, cse)
    assert op_types(opt) == ["Exp", "Add"] and opt.outputs == ["s", "b"]
    assert opt.nodes[0].outputs == ("b",) and opt.nodes[1].inputs == ("b", "b")


def test_dce_drops_dead_nodes_and_their_constants():
    g = Graph("dce")
    x = g.input("x", (5,))
    g.op("Mul", g.op("Exp", x), g.const(np.ones(5, "float32"), name="dead_c"))
    g.output(g.op("Relu", x, name="y"))
    opt, stats = check_pass(g, dce)
    assert op_types(opt) == ["Relu"] and not opt.consts
    assert stats.total("dce", "nodes removed") == 2
    assert dce(opt) is opt

# ---- the pipeline ------------------------------------------------------------------------------


def test_default_pipeline_prints_the_passes_in_order():
    text = str(default_pipeline("c -march=x86-64"))
    names = [line.split(".", 1)[1].split()[0] for line in text.splitlines()]
    assert names == ["fold_constants", "cse", "simplify", "fold_batchnorm", "simplify", "cse",
                     "dce", "layout_nchwc(target='c"]
    assert all("#" in line for line in text.splitlines())          # each with its reason
    assert lt.graph.default_pipeline().names[-1] == "layout_nchwc"


def test_optimize_by_names_verbose_and_stats(capsys):
    g = Graph("v")
    x = g.input("x", (2, 3))
    y = g.op("Relu", g.op("Mul", g.op("Mul", x, 2.0), 3.0), name="y")
    g.op("Exp", x)
    g.output(y)
    stats = PassStats()
    opt = optimize(g, passes=["simplify", "dce"], stats=stats, verbose=True)
    out = capsys.readouterr().out
    assert " 1. simplify" in out and " 2. dce" in out and "mul_mul 1" in out
    assert [r.name for r in stats.records] == ["simplify", "dce"]
    assert stats.records[0].nodes_before == 4 and stats.records[0].nodes_after == 2
    assert stats.as_dict()[0]["counts"]["mul_mul"] == 1
    np.testing.assert_allclose(opt.consts[opt.nodes[0].inputs[1]], 6.0)
    assert "simplify" in str(stats) and "->" in str(stats)


def test_optimize_with_no_passes_and_with_a_function():
    g = Graph("f")
    g.output(g.op("Relu", g.input("x", (3,))))
    assert optimize(g, passes=[]) is g
    assert optimize(g, passes=simplify) is g
    assert str(lt.graph.passes.Pipeline(())) == "(no passes)"


@pytest.mark.parametrize("passes, match", [
    (["simplify", "nope"], r"optimize\(passes=\[\.\.\., 'nope', \.\.\.\]\): no pass named "
                           r"'nope'; the passes are fold_constants, cse"),
    ([3], r"a pass is a name \(fold_constants, .*\) or a function Graph -> Graph"),
])
def test_optimize_errors_name_the_pass(passes, match):
    g = Graph("e")
    g.output(g.op("Relu", g.input("x", (3,))))
    with pytest.raises(GraphError, match=match):
        optimize(g, passes=passes)


def test_optimize_refuses_what_is_not_a_graph():
    with pytest.raises(GraphError, match=r"optimize\(\): expected a looptune.graph.Graph; "
                                         r"got str \(import ONNX models with from_onnx\)"):
        optimize("model.onnx")


def test_passes_never_change_their_input():
    g = Graph("pure")
    x = g.input("x", (2, 3))
    g.output(g.op("Add", g.op("Add", x, 1.0), 2.0, name="y"))
    before = str(g)
    opt = optimize(g)
    assert str(g) == before and op_types(opt) == ["Add"] and len(g.nodes) == 2
