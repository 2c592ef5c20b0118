"""Unary elementwise operators (with their attributes): reference against a numpy formula
and ONNX Runtime, compiled kernels against the reference, the ELEMWISE pattern."""
from __future__ import annotations

import math

import numpy as np
import pytest
from graph_util import HAVE_ORT, assert_close, check_op, onnx_run, rand

from looptune.graph import OpPattern, get_op

_erf = np.vectorize(math.erf)
SQ2 = math.sqrt(2)
UNARY = {
    "Relu": (lambda x: np.maximum(x, 0), {}),
    "Sigmoid": (lambda x: 1 / (1 + np.exp(-x)), {}),
    "Tanh": (np.tanh, {}),
    "Exp": (np.exp, {}),
    "Erf": (_erf, {}),
    "Neg": (np.negative, {}),
    "Abs": (np.abs, {}),
    "Reciprocal": (lambda x: 1 / x, {}),
    "LeakyRelu": (lambda x: np.where(x < 0, 0.2 * x, x), {"alpha": 0.2}),
    "Elu": (lambda x: np.where(x < 0, 0.7 * (np.exp(x) - 1), x), {"alpha": 0.7}),
    "Selu": (lambda x: 1.0507009873554805 * np.where(x <= 0, 1.6732632423543772 *
                                                     (np.exp(x) - 1), x), {}),
    "HardSigmoid": (lambda x: np.clip(0.2 * x + 0.5, 0, 1), {}),
    "HardSwish": (lambda x: x * np.clip(x / 6 + 0.5, 0, 1), {}),
    "Softplus": (lambda x: np.log(1 + np.exp(x)), {}),
    "Softsign": (lambda x: x / (1 + np.abs(x)), {}),
    "Floor": (np.floor, {}),
    "Ceil": (np.ceil, {}),
    "Round": (np.round, {}),
    "Sin": (np.sin, {}),
    "Cos": (np.cos, {}),
    "Sign": (np.sign, {}),
    "Gelu": (lambda x: 0.5 * x * (1 + _erf(x / SQ2)), {}),
    "Gelu-tanh": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                                   (x + 0.044715 * x ** 3))),
                  {"approximate": "tanh"}),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.slow
def test_unary(rng, name):
    op = name.split("-")[0]
    fn, attrs = UNARY[name]
    x = rand(rng, (3, 7), lo=-3, hi=3)
    x[0, :3] = [-2.5, 0.5, 1.5]                  # halves: Round goes to even, as numpy
    ref = check_op(op, [x], expect=[fn(x.astype(np.float64))], rtol=1e-5, atol=1e-6, **attrs)
    if HAVE_ORT:
        (ort,) = onnx_run(op, [x], opset=20, **attrs)
        assert_close(ref[0], ort, 1e-5, 1e-6, f"{name} vs onnxruntime")
    assert get_op(op).pattern is OpPattern.ELEMWISE


def test_log_sqrt_and_integer_unary(rng):
    x = rand(rng, (4, 5), lo=0.1, hi=3)
    check_op("Log", [x], expect=[np.log(x)])
    check_op("Sqrt", [x], expect=[np.sqrt(x)])
    xi = rand(rng, (4, 5), "int32", -9, 9)
    for op, fn in [("Relu", lambda v: np.maximum(v, 0)), ("Neg", np.negative), ("Abs", np.abs),
                   ("Sign", np.sign)]:
        check_op(op, [xi], expect=[fn(xi)])
