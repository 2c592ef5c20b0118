"""The library's computes under the auto scheduler (search/auto.py): Conv, MatMul and Gemm are
recognised as contractions (one reduction of a product of two loads), a bias is their
epilogue, padding an inlinable stage; the fallback and sampled configs of each generated
space compute what the reference computes."""
from __future__ import annotations

import numpy as np
import pytest
from graph_util import assert_close, node_tensors, one_node, rand, run_node

from looptune.lang.tensor import ComputeOp
from looptune.schedule.schedule import _topo_ops
from looptune.search import auto_task
from looptune.search.auto import is_contraction


def _conv(rng):
    x, w, b = rand(rng, (1, 4, 9, 7)), rand(rng, (6, 2, 3, 3)), rand(rng, (6,))
    return one_node("Conv", [x, w, b], consts=(1, 2), pads=[1, 1, 1, 1], group=2)


def _matmul(rng):
    return one_node("MatMul", [rand(rng, (2, 5, 7)), rand(rng, (7, 9))], consts=(1,))


def _gemm(rng):
    return one_node("Gemm", [rand(rng, (5, 7)), rand(rng, (9, 7)), rand(rng, (9,))],
                    consts=(1, 2), transB=1, alpha=0.5)


@pytest.mark.parametrize("make", [_conv, _matmul, _gemm])
def test_contractions_are_recognised(rng, make):
    g, _ = make(rng)
    _, _, outs = node_tensors(g)
    ops = [op for op in _topo_ops(outs) if isinstance(op, ComputeOp)]
    reductions = [op for op in ops if op.reduce_axis]
    assert len(reductions) == 1 and is_contraction(reductions[0]), [op.name for op in ops]


def _softmax(rng):
    return one_node("Softmax", [rand(rng, (6, 11))])


def _layernorm(rng):
    return one_node("LayerNormalization", [rand(rng, (5, 12)), rand(rng, (12,)),
                                           rand(rng, (12,))], consts=(1, 2))


def _avgpool(rng):
    return one_node("AveragePool", [rand(rng, (1, 3, 8, 7))], kernel_shape=[3, 3],
                    strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)


def _reshape_transpose(rng):
    return one_node("Transpose", [rand(rng, (4, 6, 5))], perm=[2, 0, 1])


@pytest.mark.slow
@pytest.mark.parametrize("make", [_conv, _matmul, _gemm, _softmax, _layernorm, _avgpool,
                                  _reshape_transpose])
def test_auto_scheduled_kernels_match_the_reference(rng, make):
    g, feed = make(rng)
    (want,) = g.run_reference(feed)
    args, _, outs = node_tensors(g)
    task = auto_task(args + [o for o in outs if o is not None])
    cfgs = [0] + list(task.config_space.sample(min(2, len(task.config_space)), 1))
    for cfg in cfgs:
        def schedule(tensors, cfg=cfg):
            t = auto_task(tensors)
            return t.instantiate(cfg)[0]
        (got,) = run_node(g, feed, schedule=schedule)
        assert_close(got, want, 1e-5, 1e-5, f"config {cfg}")
    assert np.isfinite(want).all()
