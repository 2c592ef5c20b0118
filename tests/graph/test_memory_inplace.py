"""In-place steps are legal C: the kernel of an elementwise step whose output is planned over
its dying input is built without ``restrict`` on that pair (``build(may_alias=...)``), the
model binds one buffer to both through the module's public ``bind``, and the result is exact."""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import looptune as lt
import looptune.graph.model as model_mod
from looptune.graph import Graph

import fusion_ops


@pytest.fixture(autouse=True)
def fx_ops():
    with fusion_ops.installed():
        yield


def _chain(n=45, width=37):
    """opaque -> (add bias, tanh) -> opaque -> (mul by a runtime input) -> opaque."""
    rng = np.random.default_rng(3)
    g = Graph("inplace")
    x = g.input("x", (n, width))
    s = g.input("s", (n, width))
    b = g.const(rng.standard_normal(width).astype("float32"), name="b")
    v = g.op("Tanh", g.op("Add", g.op("FxOpaque", x, name="o0"), b, name="a0"), name="t0")
    v = g.op("Mul", g.op("FxOpaque", v, name="o1"), s, name="m1")
    g.output(g.op("FxOpaque", v, name="out"))
    return g


def _signature(kernel) -> list[str]:
    src = kernel.module.source
    sig = re.search(rf"int {kernel.name}\(([^)]*)\)", src).group(1)
    return [p.strip() for p in sig.split(",")]


@pytest.mark.slow
def test_in_place_kernels_have_no_restrict_on_the_shared_pair(rng):
    g = _chain()
    model = lt.graph.compile(g, optimize=False)
    pairs = [(d["input"], d["output"]) for d in model.memory_report()["inplace"]]
    assert pairs == [("o0", "t0"), ("o1", "m1")]
    for step_k, inp, out in model.plan.inplace:
        st = model.steps[step_k]
        kern = model.kernels[st.kernel]
        params = dict(zip(st.args, _signature(kern)))
        assert "restrict" not in params[inp] and "restrict" not in params[out], params
        assert {t.name for v, t in zip(st.args, kern.module.args) if v in (inp, out)} <= \
            set(kern.module.may_alias)
        names = dict(zip(st.args, (t.name for t in kern.module.args)))
        assert all(("restrict" in p) == (names[v] not in kern.module.may_alias)
                   for v, p in params.items()), params
    assert "restrict" in dict(zip(model.steps[1].args, _signature(model.kernels[model.steps[1].kernel])))["b"]
    opaque = [k for k in model.kernels if k.name.startswith("fused_fxopaque")]
    assert opaque and all(k.module.may_alias == () for k in opaque)
    model.plan.verify()
    for _ in range(2):
        xs = [rng.standard_normal((45, 37)).astype("float32") for _ in range(2)]
        np.testing.assert_allclose(model(*xs)[0], g.run_reference(xs)[0], rtol=1e-5,
                                   atol=1e-6)


def test_a_kernel_built_without_may_alias_is_never_run_in_place(monkeypatch, rng):
    import sys
    monkeypatch.setattr(sys.modules["looptune.graph.compile"], "inplace_params", lambda dag: ())
    g = _chain()
    model = lt.graph.compile(g, optimize=False)
    assert model.plan.inplace == []
    xs = [rng.standard_normal((45, 37)).astype("float32") for _ in range(2)]
    np.testing.assert_allclose(model(*xs)[0], g.run_reference(xs)[0], rtol=1e-5, atol=1e-6)


def test_the_model_calls_kernels_through_public_api_only():
    src = inspect.getsource(model_mod)
    assert not re.search(r"\._(fn|ffi|ptr_types|lib|checker|pointers)\b", src)
