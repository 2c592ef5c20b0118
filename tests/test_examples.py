"""Every operator of examples/: hand schedule, template fallback and a few sampled configs are
exact against the numpy reference on small odd sizes (the defaults are benchmark sizes)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import looptune as lt
from looptune.operators import load_operators
from looptune.report import make_arrays
from looptune.search.space import FallbackConfig

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

SMALL = {
    "matmul": (13, 45, 7), "matmul_relu": (13, 45, 7), "batch_matmul": (2, 9, 37, 5),
    "conv2d": (1, 5, 9, 11, 6, 3, 3, 2, 1), "conv2d_nchwc": (1, 5, 9, 11, 18, 3, 3, 1, 1),
    "depthwise_conv2d": (1, 5, 9, 11, 3, 3, 2, 1), "max_pool2d": (1, 3, 9, 11, 3, 3, 2, 1),
    "avg_pool2d": (1, 3, 9, 11, 2, 2, 2, 0), "softmax": (7, 37), "layernorm": (7, 37),
    "transpose": (13, 37), "blur": (11, 37),
}
OPS = [op for f in sorted(EXAMPLES.glob("*.py")) for op in load_operators(str(f))]


def test_every_operator_has_small_sizes():
    assert sorted(op.name for op in OPS) == sorted(SMALL)


def _run(op, args, s, tensors):
    inputs, outs, call_args = make_arrays(tensors, 3)
    for o in outs:
        o.fill(np.nan)
    lt.build(s, tensors)(*call_args)
    want = op.reference_for(args)(*inputs)
    for got, w in zip(outs, want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(got, w, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_hand_schedule_template_fallback_and_sampled_configs(op):
    args = SMALL[op.name]
    _run(op, args, *op.hand_schedule(*args))
    _run(op, args, *op.template.func(FallbackConfig(), *args))
    task = lt.search.create_task(op.name, args)
    for cfg in task.config_space.sample(min(3, len(task.config_space)), 7):
        try:
            s, tensors = task.instantiate(cfg)
        except lt.ScheduleError:
            continue
        _run(op, args, s, tensors)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_auto_schedule_space_is_exact(op):
    """lt.search.auto_task's generated space for the operator's algorithm: the fallback and
    sampled configs give valid schedules that match numpy."""
    args = SMALL[op.name]
    out = op.algorithm(*args)
    tensors = list(out) if isinstance(out, (list, tuple)) else [out]
    task = lt.search.auto_task(tensors)
    _run(op, args, *task.instantiate(0))
    for cfg in task.config_space.sample(min(3, len(task.config_space)), 11):
        _run(op, args, *task.instantiate(cfg))
