"""Agreement with ONNX Runtime on the four test models (tests/graph/models.py).

Tolerance, for every output element: ``|ours - ort| <= 1e-4 * |ort| + 1e-6 * max|ort|``: 1e-4
relative, plus an absolute term a millionth of the output's largest magnitude for elements
that are the result of cancellation (near zero), where float32 sums in another order differ
by a few ulps of their operands, not of the result.

Each model runs with no pass (``optimize(g, passes=[])``), with the whole pipeline
(``optimize(g)``), and compiled (``lt.graph.compile``, target c: slow).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import looptune as lt
import models

RTOL = 1e-4
ATOL_OF_MAX = 1e-6


def assert_agrees(ours, theirs, what: str) -> None:
    assert len(ours) == len(theirs), what
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert a.shape == b.shape and a.dtype == b.dtype, (what, k, a.shape, b.shape)
        atol = ATOL_OF_MAX * float(np.abs(b).max())
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=atol, err_msg=f"{what}: output {k}")


@pytest.fixture(scope="module", params=sorted(models.MODELS))
def case(request):
    """(name, model, inputs, ONNX Runtime's outputs, the imported graph)."""
    m = models.MODELS[request.param]()
    inputs = models.random_inputs(m, seed=7)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    expected = sess.run(None, inputs)
    return request.param, m, inputs, expected, lt.graph.from_onnx(m)


def test_import_keeps_every_node(case):
    name, m, _, _, g = case
    onnx_ops = [n.op_type for n in m.graph.node if n.op_type != "Constant"]
    assert [n.op_type for n in g.nodes] == onnx_ops, name
    assert g.outputs == [o.name for o in m.graph.output]


def test_reference_agrees_without_passes(case):
    name, _, inputs, expected, g = case
    g0 = lt.graph.optimize(g, passes=[])
    assert len(g0.nodes) == len(g.nodes)
    assert_agrees(g0.run_reference(inputs), expected, f"{name}, no passes")


def test_reference_agrees_after_the_pipeline(case):
    name, _, inputs, expected, g = case
    opt = lt.graph.optimize(g)
    assert [n.op_type for n in opt.nodes] != [n.op_type for n in g.nodes], \
        f"{name}: the pipeline changed nothing"
    assert_agrees(opt.run_reference(inputs), expected, f"{name}, optimized")


@pytest.mark.slow
def test_compiled_model_agrees(case):
    name, _, inputs, expected, g = case
    model = lt.graph.compile(g, target="c")
    outs = model(*[inputs[n] for n in g.inputs])
    assert_agrees([np.asarray(o) for o in outs], expected, f"{name}, compiled")
