"""Compiling a graph for OpenCL (PoCL's CPU device in CI): groups the OpenCL sketch takes run
there, the others fall back to C with a one-line note. Skipped without pyopencl or a device."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import looptune as lt

from test_compile import _check, _cnn

pytestmark = pytest.mark.opencl


def test_cnn_runs_on_opencl(opencl, rng):
    g = _cnn(hw=6)
    model = lt.graph.compile(g, target=opencl, optimize=False)
    assert [k.target for k in model.kernels] == ["opencl", "opencl"]
    assert "__kernel" in model.kernels[0].source
    assert model.memory_report()["inplace"] == []       # OpenCL kernels never run in place
    _check(model, g, rng)


def test_group_the_opencl_backend_refuses_falls_back_to_c(opencl, rng, monkeypatch, caplog):
    import looptune.backends.opencl as ocl
    real = ocl.build_opencl

    def picky(func, tgt):
        if "maxpool" in func.name:
            raise lt.BuildError("no OpenCL for pools today")
        return real(func, tgt)
    monkeypatch.setattr(ocl, "build_opencl", picky)
    g = _cnn(hw=6)
    with caplog.at_level(logging.WARNING, logger="looptune.graph.compile"):
        model = lt.graph.compile(g, target=opencl, optimize=False)
    assert [k.target for k in model.kernels] == ["opencl", "c"]
    notes = [r.getMessage() for r in caplog.records]
    assert notes == ["group 1 (fused_maxpool) runs in C: the OpenCL sketch or code generator "
                     "does not take it (no OpenCL for pools today)"]
    assert "fused_maxpool [fallback, c]" in str(model)
    _check(model, g, rng)
    x = np.ones((1, 3, 6, 6), "float32")
    np.testing.assert_allclose(model(x)[0], g.run_reference([x])[0], rtol=1e-5)


def test_opencl_compile_keeps_nchw(opencl, rng):
    from test_compile_target import _agrees, _convs
    g = _convs(hw=5)
    model = lt.graph.compile(g, target=opencl)
    assert {n.op_type for n in model.graph.nodes} == {"Conv", "Relu"}     # no NCHWc blocks
    _agrees(model, g, rng)
