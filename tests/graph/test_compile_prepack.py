"""Constant weights read transposed (Gemm transB=1 / transA=1) are stored transposed once at
compile time, so the kernel reads them along its vectorized axis; results are unchanged."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.graph import Graph
from looptune.graph.fusion.prepack import prepack_weights


def linear_terms(rng, shared=False, trans_a=False):
    g = Graph("linear")
    x = g.input("x", (5, 13))
    w = g.const(rng.standard_normal((11, 13)).astype("float32"), name="w")
    b = g.const(rng.standard_normal(11).astype("float32"), name="b")
    y = g.op("Relu", g.op("Gemm", x, w, b, transB=1, name="fc"), name="r")
    outs = [y]
    if shared:                                   # w also read as it is
        outs.append(g.op("MatMul", g.input("z", (3, 11)), w, name="mm"))
    if trans_a:
        a = g.const(rng.standard_normal((13, 7)).astype("float32"), name="a")
        outs.append(g.op("Gemm", a, g.op("Transpose", x), transA=1, name="fa"))  # [7, 5]
    g.output(*outs)
    return g


def _agree(model, g, rng):
    xs = [rng.standard_normal(g.types[n].shape).astype("float32") for n in g.inputs]
    for got, want in zip(model(*xs), g.run_reference(xs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gemm_with_a_constant_b_read_transposed_gets_it_transposed(rng):
    g = linear_terms(rng)
    p = prepack_weights(g)
    fc = next(n for n in p.nodes if n.op_type == "Gemm")
    assert fc.attr("transB") == 0 and fc.inputs[1] == "w_t"
    np.testing.assert_array_equal(p.consts["w_t"], g.consts["w"].T)
    assert p.consts["w_t"].flags.c_contiguous and "w" not in p.consts
    model = lt.graph.compile(g)
    assert "w_t" in model.weights and "w" not in model.weights
    _agree(model, g, rng)


@pytest.mark.slow
def test_a_weight_read_elsewhere_is_kept_and_trans_a_is_packed_too(rng):
    g = linear_terms(rng, shared=True, trans_a=True)
    p = prepack_weights(g)
    assert {"w", "w_t", "a_t"} <= set(p.consts) and "a" not in p.consts
    fa = next(n for n in p.nodes if n.name == "fa")
    assert fa.attr("transA") == 0 and fa.inputs[0] == "a_t"
    _agree(lt.graph.compile(g), g, rng)


def test_nothing_to_pack_leaves_the_graph_and_optimize_false_skips_it(rng):
    g = Graph("plain")
    x = g.input("x", (4, 6))
    y = g.input("y", (5, 6))
    g.output(g.op("Gemm", x, y, transB=1))           # B computed at run time: as it is
    assert prepack_weights(g) is g
    g2 = linear_terms(rng)
    model = lt.graph.compile(g2, optimize=False)
    assert model.graph is g2 and "w" in model.weights
    _agree(model, g2, rng)


@pytest.mark.slow
def test_a_wide_linear_layer_is_not_a_strided_gather(rng):
    """torch.nn.Linear(1024, 1024) as exported (transB=1), batch 64: packed, the untuned
    kernel takes milliseconds (about 2 ms on 2 cores; reading B 4 KiB apart per vector lane
    it took 0.3 s)."""
    import time
    g = Graph("wide")
    x = g.input("x", (64, 1024))
    w = g.const((rng.standard_normal((1024, 1024)) * 0.03).astype("float32"), name="w")
    g.output(g.op("Gemm", x, w, transB=1))
    model = lt.graph.compile(g)
    xin = rng.standard_normal((64, 1024)).astype("float32")
    model(xin)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        (y,) = model(xin)
        best = min(best, time.perf_counter() - t0)
    assert best < 0.05
    np.testing.assert_allclose(y, xin @ g.consts["w"].T, rtol=1e-4, atol=1e-4)
