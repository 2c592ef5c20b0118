"""The ONNX backend node cases of every claimed operator, through LooptuneBackend.

A case is claimed when all its operators are in lt.graph.supported_ops(); it must pass, or be
listed in looptune.graph.onnx_conformance.EXCLUDED with its reason. The reference run covers
every claimed case (fast); the compiled run (lt.graph.compile, target c) covers a small subset
here and every case in the slow test. ``python -m looptune.graph.onnx_conformance`` prints the
per-operator counts.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

pytest.importorskip("onnx")
import looptune as lt
from looptune.graph import GraphError
from looptune.graph import onnx_conformance as conf
from looptune.graph.onnx_backend import LooptuneBackend
from onnx import TensorProto as T
from onnx import helper

CLAIMED = conf.claimed_cases()
RUN = [c for c in CLAIMED if conf.exclusion(c.name) is None]
REFUSED = [c for c in CLAIMED if conf.exclusion(c.name) and conf.exclusion(c.name).raises]
RUN_COMPILED = [c for c in RUN if conf.exclusion(c.name, "compile") is None]
REFUSED_COMPILED = [c for c in RUN if conf.exclusion(c.name, "compile") is not None]
# one case per kind of operator for the fast compiled run (those claimed run)
FAST_COMPILE = ["test_relu", "test_add_bcast", "test_conv_with_strides_padding",
                "test_gemm_all_attributes", "test_softmax_axis_1", "test_maxpool_2d_pads",
                "test_transpose_all_permutations_3", "test_reshape_reordered_all_dims",
                "test_concat_3d_axis_1", "test_layer_normalization_3d_axis1_epsilon",
                "test_batchnorm_epsilon", "test_reduce_mean_keepdims_example"]


def _names(cases):
    return [c.name for c in cases]


def test_the_suite_claims_cases():
    assert len(conf.all_cases()) > 1800
    assert len(RUN) >= 40, "fewer claimed cases than the elementwise operators alone give"


@pytest.mark.parametrize("case", RUN, ids=_names(RUN))
@pytest.mark.slow
def test_reference_run(case):
    conf.run_case(case, "reference")


@pytest.mark.parametrize("case", REFUSED, ids=_names(REFUSED))
def test_refused_cases_raise_a_clear_error(case):
    with pytest.raises(GraphError, match=conf.exclusion(case.name).raises):
        conf.run_case(case, "reference")


@pytest.mark.parametrize("pattern", list(conf.EXCLUDED) + list(conf.COMPILE_EXCLUDED))
def test_every_exclusion_rule_matches_a_claimed_case(pattern):
    assert any(re.fullmatch(pattern, c.name) for c in CLAIMED), (
        f"EXCLUDED rule {pattern!r} matches no claimed case: remove it (or the operator is "
        "not claimed yet)")


def _compile_cases(names=None):
    return [c for c in RUN_COMPILED if names is None or c.name in names]


@pytest.mark.parametrize("case", _compile_cases(FAST_COMPILE),
                         ids=_names(_compile_cases(FAST_COMPILE)))
@pytest.mark.slow
def test_compiled_run_subset(case):
    conf.run_case(case, "compile")


@pytest.mark.slow
@pytest.mark.parametrize("case", RUN, ids=_names(RUN))
def test_reference_run_after_the_pipeline(case):
    """lt.graph.optimize keeps every claimed case's outputs."""
    conf.run_case(case, "reference", optimize=True)


@pytest.mark.slow
@pytest.mark.parametrize("case", RUN_COMPILED, ids=_names(RUN_COMPILED))
def test_compiled_run_all(case):
    conf.run_case(case, "compile")


@pytest.mark.slow
@pytest.mark.parametrize("case", REFUSED_COMPILED, ids=_names(REFUSED_COMPILED))
def test_compile_refuses_excluded_cases_clearly(case):
    with pytest.raises(GraphError, match=conf.exclusion(case.name, "compile").raises):
        conf.run_case(case, "compile")


# ---- the backend API ----------------------------------------------------------------------------


def _relu_model(shape=("N", 3)):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "r",
                          [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", T.FLOAT, list(shape))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_backend_runs_symbolic_inputs_at_their_given_shapes(rng):
    rep = LooptuneBackend.prepare(_relu_model())
    for n in (1, 4):
        x = rng.standard_normal((n, 3)).astype("float32")
        (y,) = rep.run([x])
        np.testing.assert_array_equal(y, np.maximum(x, 0))
    out = rep.run({"x": np.ones((2, 3), "float32")})
    assert out.y.shape == (2, 3)


def test_backend_run_node_and_device(rng):
    x = rng.standard_normal((2, 5)).astype("float32")
    (y,) = LooptuneBackend.run_node(helper.make_node("Neg", ["x"], ["y"]), [x])
    np.testing.assert_array_equal(y, -x)
    assert LooptuneBackend.supports_device("CPU") and not LooptuneBackend.supports_device("CUDA")
    assert LooptuneBackend.is_compatible(_relu_model())
    bad = _relu_model()
    bad.graph.node[0].op_type = "NonZero"
    assert not LooptuneBackend.is_compatible(bad)


def test_backend_binds_compile_time_inputs():
    """A suite model passes a Reshape's shape as an input: it becomes a constant per value."""
    if "Reshape" not in lt.graph.supported_ops():
        pytest.fail("Reshape is not in supported_ops(); this test needs it")
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "r",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2, 6]),
                           helper.make_tensor_value_info("s", T.INT64, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    rep = LooptuneBackend.prepare(helper.make_model(g, opset_imports=[
        helper.make_opsetid("", 17)]))
    assert rep.bound == ["s"]
    x = np.arange(12, dtype="float32").reshape(2, 6)
    assert rep.run([x, np.array([3, 4])])[0].shape == (3, 4)
    assert rep.run([x, np.array([4, 3])])[0].shape == (4, 3)


@pytest.mark.parametrize("call, match", [
    (lambda: LooptuneBackend.prepare(_relu_model(), mode="jit"),
     r"mode='jit'; use one of reference, compile"),
    (lambda: LooptuneBackend.prepare(_relu_model(), device="CUDA"),
     r"device 'CUDA' is not supported; looptune runs ONNX models on the CPU"),
    (lambda: LooptuneBackend.prepare(_relu_model()).run([]),
     r"the model takes 1 input\(s\) \(x\); got 0"),
    (lambda: LooptuneBackend.prepare(_relu_model()).run({"z": 1}), r"missing input\(s\) x"),
])
def test_backend_errors(call, match):
    with pytest.raises(GraphError, match=match):
        call()


def test_counts_report_lists_each_op():
    counts = conf.run_suite("reference", ops={"Relu", "Neg"})
    assert set(counts) == {"Relu", "Neg"}
    assert counts["Relu"].claimed == counts["Relu"].passed >= 1
    text = conf.format_counts(counts)
    assert text.splitlines()[0].split() == ["operator", "passed", "claimed", "excluded", "failed"]
    neg = next(line.split() for line in text.splitlines() if line.startswith("Neg "))
    assert neg[1] == neg[2] == str(counts["Neg"].claimed) and neg[3:] == ["0", "0"]


@pytest.mark.slow
def test_onnx_runner_accepts_the_backend():
    """ONNX's own BackendTest runner drives the backend (a few cases)."""
    import unittest

    import onnx.backend.test
    bt = onnx.backend.test.BackendTest(LooptuneBackend, __name__)
    bt.include(r"^test_(relu|neg|sigmoid)_cpu$")
    suite = unittest.TestSuite()
    for case in bt.test_cases.values():
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
    with open(os.devnull, "w") as devnull:
        result = unittest.TextTestRunner(verbosity=0, stream=devnull).run(suite)
    ran = result.testsRun - len(result.skipped)
    assert ran == 3 and result.wasSuccessful(), (result.failures, result.errors)
