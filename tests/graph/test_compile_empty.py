"""Empty values (a size-0 dimension) in compiled models: no kernel computes one (each is a
constant), Split and Concat drop them, consumers with constant inputs fold, anything else
that still reads one runs on numpy; results equal the reference run."""
from __future__ import annotations

import logging
import re

import numpy as np
import pytest

import looptune as lt
from looptune.graph import Graph
from looptune.graph.fusion.empty import drop_empty_values


def _same(model, g, xs):
    for got, want in zip(model(*xs), g.run_reference(xs)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_an_empty_slice_output_is_an_empty_array_and_no_kernel(rng):
    g = Graph("empty_out")
    x = g.input("x", (3, 5))
    e = g.op("Slice", x, starts=[7], ends=[9], axes=[1], name="nothing")   # [3, 0]
    g.output(e, g.op("Relu", x, name="r"))
    model = lt.graph.compile(g, optimize=False)
    assert [st.group.name for st in model.steps] == ["fused_relu"]
    assert model.graph.is_const("nothing")
    xin = rng.standard_normal((3, 5)).astype("float32")
    a, _ = model(xin)
    assert a.shape == (3, 0) and a.dtype == np.float32
    a2, _ = model(xin)
    assert a2 is not a                                     # a fresh array per call
    _same(model, g, [xin])


@pytest.mark.slow
def test_split_with_an_empty_piece_and_its_concat_compile_to_kernels(rng, caplog):
    g = Graph("rotary_like")
    x = g.input("x", (2, 3, 9))
    keep, none = g.op("Split", x, np.array([9, 0]), axis=-1, outputs=2, name="sp")
    part1, part2 = g.op("Split", g.op("Neg", keep, name="n"), np.array([4, 5]), axis=2,
                        outputs=2, name="sp2")
    y = g.op("Concat", g.op("Exp", part2, name="e"), part1, none, axis=-1, name="cat")
    g.output(g.op("Transpose", y, perm=[0, 2, 1], name="t"), none)
    with caplog.at_level(logging.INFO, logger="looptune.graph.compile"):
        model = lt.graph.compile(g, optimize=False)
    assert not any("runs on numpy" in r.getMessage() for r in caplog.records)
    assert all(st.kernel is not None for st in model.steps)
    ops = [n.op_type for n in model.graph.nodes]
    assert "Identity" in ops and ops.count("Split") == 1     # the empty piece's Split went
    cat = next(n for n in model.graph.nodes if n.op_type == "Concat")
    assert len(cat.inputs) == 2
    xin = rng.standard_normal((2, 3, 9)).astype("float32")
    _same(model, g, [xin])


@pytest.mark.parametrize("sizes", [(0, 4, 3), (4, 0, 3), (3, 4, 0)])
@pytest.mark.slow
def test_split_into_slices_keeps_each_non_empty_piece(sizes, rng):
    g = Graph("pieces")
    x = g.input("x", (5, 7))
    outs = g.op("Split", x, np.array(sizes), axis=1, outputs=3, name="sp")
    g.output(*[g.op("Sigmoid", o) if g.types[o.name].size else o for o in outs])
    model = lt.graph.compile(g, optimize=False)
    assert "Split" not in [n.op_type for n in model.graph.nodes]
    _same(model, g, [rng.standard_normal((5, 7)).astype("float32")])


def test_a_reduction_of_an_empty_value_folds_to_a_constant(rng):
    g = Graph("fold")
    x = g.input("x", (4, 6))
    e = g.op("Slice", x, starts=[6], ends=[6], axes=[1])                      # [4, 0]
    s = g.op("ReduceSum", e, np.array([1]), keepdims=0, name="s")             # zeros [4]
    mx = g.op("MatMul", g.op("Transpose", e), e, name="mm")                   # zeros [0, 0]
    g.output(g.op("Add", x, g.op("Unsqueeze", s, np.array([1])), name="y"), mx)
    model = lt.graph.compile(g, optimize=False)
    assert model.graph.is_const("s")
    assert not any(n.op_type in ("ReduceSum", "MatMul") for n in model.graph.nodes)
    _same(model, g, [rng.standard_normal((4, 6)).astype("float32")])


def test_a_node_still_reading_an_empty_value_runs_on_numpy(rng, caplog):
    g = Graph("host")
    x = g.input("x", (3, 4))
    b = g.input("b", (2,))
    a = g.op("Slice", x, starts=[0], ends=[0], axes=[1], name="a")            # [3, 0]
    w = g.op("Slice", g.op("Relu", x), starts=[4], ends=[4], axes=[0])        # [0, 4]
    w = g.op("Reshape", w, np.array([0, 2]), allowzero=1, name="w")           # [0, 2]
    y = g.op("Gemm", a, w, b, name="gemm")                                    # b broadcast
    g.output(g.op("Neg", y, name="n"))
    with caplog.at_level(logging.INFO, logger="looptune.graph.compile"):
        model = lt.graph.compile(g, optimize=False)
    notes = [r.getMessage() for r in caplog.records if "runs on numpy" in r.getMessage()]
    assert len(notes) == 1 and re.search(r"reads or computes an empty tensor", notes[0])
    xs = [rng.standard_normal((3, 4)).astype("float32"), rng.standard_normal(2)
          .astype("float32")]
    _same(model, g, xs)


def test_a_graph_without_empty_values_is_left_as_it_is():
    g = Graph("plain")
    g.output(g.op("Relu", g.input("x", (2, 2))))
    assert drop_empty_values(g) is g
    assert lt.graph.compile(g, optimize=False).graph is g


@pytest.mark.slow
def test_the_onnx_cases_with_size_0_intermediates_compile():
    pytest.importorskip("onnx")
    from looptune.graph import onnx_conformance as conf
    names = ["test_slice_start_out_of_bounds", "test_rotary_embedding_expanded",
             "test_rotary_embedding_3d_input_expanded",
             "test_rotary_embedding_interleaved_expanded",
             "test_rotary_embedding_no_position_ids_expanded",
             "test_rotary_embedding_no_position_ids_interleaved_expanded"]
    cases = {c.name: c for c in conf.claimed_cases()}
    for name in names:
        assert conf.exclusion(name, "compile") is None
        conf.run_case(cases[name], "compile")
