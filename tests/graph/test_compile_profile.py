"""model.profile(*inputs): per-step times on the call's real data, whole calls, the overhead
between them, and a table naming each step's kernel and schedule (or numpy reference)."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.graph import Graph, GraphError

import fusion_ops
from test_compile import _cnn


@pytest.mark.slow
def test_profile_times_every_step_and_whole_calls(rng):
    g = _cnn(hw=9)
    model = lt.graph.compile(g, optimize=False)
    x = rng.standard_normal((1, 3, 9, 9)).astype("float32")
    want = model(x)[0].copy()
    prof = model.profile(x, repeat=3)
    assert [s.index for s in prof.steps] == list(range(len(model.steps)))
    assert [s.kernel.name for s in prof.steps] == ["fused_conv_add_relu", "fused_maxpool"]
    assert all(s.seconds > 0 for s in prof.steps) and prof.call_seconds > 0
    assert prof.step_seconds == pytest.approx(sum(s.seconds for s in prof.steps))
    assert prof.overhead_seconds >= 0 and prof.repeat == 3
    assert set(prof.by_schedule()) == {"fallback"}
    text = str(prof)
    assert text.startswith("profile of model cnn (target c, medians of 3): call ")
    assert "fused_conv_add_relu [fallback, c]  (fused_conv_add_relu)" in text
    d = prof.as_dict()
    assert d["steps"][1] == {"step": 1, "group": "fused_maxpool", "seconds":
                             prof.steps[1].seconds, "kernel": "fused_maxpool",
                             "schedule": "fallback", "target": "c"}
    np.testing.assert_array_equal(model(x)[0], want)        # profiling left the model as it was
    assert "1 more steps" in prof.table(top=1)


def test_profile_of_host_steps_and_named_inputs(rng):
    with fusion_ops.installed():
        g = Graph("host")
        x = g.input("x", (3, 8))
        g.output(g.op("Neg", g.op("FxSort", g.op("Exp", x, name="e"), name="s"), name="n"))
        model = lt.graph.compile(g, optimize=False)
        prof = model.profile(x=rng.standard_normal((3, 8)).astype("float32"), repeat=2,
                             warmup=0)
    assert [s.how for s in prof.steps][1] == "numpy reference"
    assert prof.steps[1].as_dict()["schedule"] == "host"


def test_profile_checks_its_arguments(rng):
    model = lt.graph.compile(_cnn(hw=5), optimize=False)
    x = rng.standard_normal((1, 3, 5, 5)).astype("float32")
    with pytest.raises(GraphError, match=r"model 'cnn'.profile\(repeat=0, warmup=1\): repeat "
                       r"must be at least 1"):
        model.profile(x, repeat=0)
    with pytest.raises(GraphError, match=r"model 'cnn': input 'x' has dtype float64"):
        model.profile(x.astype("float64"))
