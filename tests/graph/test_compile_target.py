"""compile runs the pass pipeline for the target it builds for: the NCHWc layout block is that
target's vector lanes (a C target's -march), and an OpenCL target keeps NCHW."""
from __future__ import annotations

import platform

import numpy as np
import pytest

import looptune as lt
from looptune.graph import Graph


def _convs(c_in=8, c_mid=16, hw=6, seed=0):
    rng = np.random.default_rng(seed)
    g = Graph("convs")
    x = g.input("x", (1, c_in, hw, hw))
    w1 = g.const(rng.standard_normal((c_mid, c_in, 3, 3)).astype("float32") * 0.2, name="w1")
    w2 = g.const(rng.standard_normal((c_in, c_mid, 1, 1)).astype("float32") * 0.2, name="w2")
    y = g.op("Relu", g.op("Conv", x, w1, pads=[1, 1, 1, 1], name="c1"), name="r1")
    g.output(g.op("Conv", y, w2, name="c2"))
    return g


def _layouts(model) -> set[str]:
    return {n.attr("dst_layout") for n in model.graph.nodes if n.op_type == "LayoutTransform"}


def _agrees(model, g, rng):
    x = rng.standard_normal(g.types["x"].shape).astype("float32")
    np.testing.assert_allclose(model(x)[0], g.run_reference([x])[0], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="-march=x86-64 names an x86 ISA")
@pytest.mark.slow
def test_the_layout_block_is_the_lanes_of_the_target_compiled_for(rng):
    g = _convs()
    sse = lt.graph.compile(g, target="c -march=x86-64")        # SSE2: 4 float lanes
    assert lt.Target.parse("c -march=x86-64").vector_lanes("float32") == 4
    assert _layouts(sse) == {"NCHW4c", "NCHW"}
    _agrees(sse, g, rng)
    native = lt.Target.parse("c").vector_lanes("float32")
    assert _layouts(lt.graph.compile(g)) == {f"NCHW{min(native, 8)}c", "NCHW"}


@pytest.mark.slow
def test_compile_passes_its_target_to_the_pipeline(monkeypatch, rng):
    import looptune.graph as pkg
    seen = []
    real = pkg.optimize

    def spy(graph, target="c", **kw):
        seen.append(target)
        return real(graph, target=target, **kw)
    monkeypatch.setattr(pkg, "optimize", spy)
    g = _convs(hw=4)
    lt.graph.compile(g, target="c -threads=1")
    assert seen == ["c -threads=1"]
