"""Threads per kernel in a compiled model: the auto scheduler's fallback runs a kernel too
small to pay for an OpenMP parallel region on one thread (a small CNN: no kernel wakes the
threads), a large one on the machine's threads; the outputs match the reference either way."""
from __future__ import annotations

import pytest

import looptune as lt
import numpy as np
from looptune.graph import Graph


def _check(model, g, rng):
    xs = [rng.standard_normal(g.types[n].shape).astype("float32") for n in g.inputs]
    for got, want in zip(model(*xs), g.run_reference(xs)):
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


def _threads(model) -> list[bool]:
    return [k.module.code.uses_parallel for k in model.kernels]


@pytest.mark.slow
def test_a_small_cnn_runs_every_kernel_on_one_thread(rng):
    g = Graph("small")
    x = g.input("x", (1, 3, 17, 17))
    w = g.const(rng.standard_normal((8, 3, 3, 3)).astype("float32"), name="w")
    y = g.op("Relu", g.op("Conv", x, w, pads=[1, 1, 1, 1]))
    g.output(g.op("MaxPool", y, kernel_shape=[2, 2], strides=[2, 2]))
    model = lt.graph.compile(g, target="c -threads=2")
    assert len(model.kernels) >= 2
    assert not any(_threads(model))
    _check(model, g, rng)


@pytest.mark.slow
def test_a_large_matmul_runs_on_threads(rng):
    g = Graph("large")
    x = g.input("x", (129, 257))
    w = g.const(rng.standard_normal((257, 263)).astype("float32"), name="w")
    g.output(g.op("Relu", g.op("MatMul", x, w)))
    model = lt.graph.compile(g, target="c -threads=2")
    assert _threads(model) == [True]
    assert model.kernels[0].task.config_space.knobs["parallel"].values[0] is True
    _check(model, g, rng)
