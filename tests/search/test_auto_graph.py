"""Every DAG the graph compiler hands the auto scheduler (one per fused group) gets a valid
fallback (config 0) and valid sampled configs, exact against the unscheduled DAG: small graphs
of the operator library, the test models (MLP, CNN, residual block, transformer layer) and
random graphs of every op pattern (matmuls that are outputs and read inside, square transposes
after them, row reductions)."""
from __future__ import annotations

import sys
from pathlib import Path

import looptune as lt
import numpy as np
import pytest
from looptune.graph.fusion import fuse, lower_group
from looptune.graph.registry import get_op
from looptune.lang.tensor import PlaceholderOp
from looptune.report import make_arrays
from looptune.search import auto_task

GRAPH_TESTS = str(Path(__file__).resolve().parents[1] / "graph")


def _w(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def _small_graphs():
    """(name, graph) for the patterns the graph compiler fuses, at odd sizes."""
    from looptune.graph import Graph
    rng = np.random.default_rng(0)
    out = []
    g = Graph("conv_bias_relu")
    y = g.op("Conv", g.input("x", (1, 3, 9, 11)), g.const(_w(rng, 5, 3, 3, 3)),
             g.const(_w(rng, 5)), pads=[1, 1, 1, 1])
    g.output(g.op("Relu", y))
    out.append(g)
    g = Graph("gemm_add_relu")
    y = g.op("Gemm", g.input("x", (7, 13)), g.const(_w(rng, 9, 13)), transB=1)
    g.output(g.op("Relu", g.op("Add", y, g.const(_w(rng, 9)))))
    out.append(g)
    g = Graph("matmul_out_and_relu")
    y = g.op("MatMul", g.input("x", (7, 13)), g.const(_w(rng, 13, 9)))
    g.output(y)
    g.output(g.op("Relu", y))
    out.append(g)
    g = Graph("matmul_reshape_transpose")
    y = g.op("MatMul", g.input("x", (2, 6, 10)), g.const(_w(rng, 10, 12)))
    y = g.op("Reshape", y, g.const(np.array([2, 6, 3, 4])))
    g.output(g.op("Transpose", y, perm=[0, 2, 1, 3]))
    out.append(g)
    g = Graph("transpose_matmul")
    x = g.op("Transpose", g.input("x", (9, 9)), perm=[1, 0])
    g.output(g.op("Transpose", g.op("MatMul", x, g.const(_w(rng, 9, 9))), perm=[1, 0]))
    out.append(g)
    g = Graph("softmax")
    g.output(g.op("Softmax", g.input("x", (5, 37)), axis=-1))
    out.append(g)
    g = Graph("layernorm")
    g.output(g.op("LayerNormalization", g.input("x", (5, 37)), g.const(_w(rng, 37)),
                  g.const(_w(rng, 37)), axis=-1))
    out.append(g)
    g = Graph("maxpool")
    g.output(g.op("MaxPool", g.input("x", (1, 3, 9, 11)), kernel_shape=[3, 3], strides=[2, 2]))
    out.append(g)
    g = Graph("global_pool")
    g.output(g.op("GlobalAveragePool", g.input("x", (1, 5, 7, 33))))
    out.append(g)
    g = Graph("concat")
    g.output(g.op("Concat", g.op("Relu", g.input("x", (3, 5))), g.input("y", (3, 7)), axis=1))
    out.append(g)
    g = Graph("gemv")
    g.output(g.op("MatMul", g.input("x", (1, 301)), g.const(_w(rng, 301, 17))))
    out.append(g)
    return out


def _dags(graph, optimize=True):
    g = lt.graph.optimize(graph) if optimize else graph
    for grp in fuse(g):
        if grp.outputs and all(get_op(n.op_type).compute is not None for n in grp.nodes):
            yield grp.name, lower_group(grp).tensors


def _check_dag(tensors, n_random: int, seed: int = 0) -> None:
    """Config 0 and ``n_random`` sampled configs of the DAG's auto task give the outputs of
    the unscheduled DAG."""
    outputs = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
    task = auto_task(tensors)
    inputs, outs, args = make_arrays(tensors, seed)
    want = [np.empty_like(o) for o in outs]
    lt.build(lt.create_schedule(outputs), tensors)(*inputs, *want)
    sp = task.config_space
    for cfg in [0] + [c.index for c in sp.sample(min(n_random, sp.size), seed)]:
        s, _ = task.instantiate(cfg)
        for o in outs:
            o.fill(np.nan)
        lt.build(s, tensors)(*args)
        for got, w in zip(outs, want):
            np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5, err_msg=f"config {cfg}")


@pytest.mark.parametrize("graph", _small_graphs(), ids=lambda g: g.name)
@pytest.mark.slow
def test_library_groups_get_a_valid_fallback(graph):
    for name, tensors in _dags(graph):
        _check_dag(tensors, n_random=0)


@pytest.mark.slow
@pytest.mark.parametrize("graph", _small_graphs(), ids=lambda g: g.name)
def test_library_groups_sampled_configs_are_exact(graph):
    for name, tensors in _dags(graph):
        _check_dag(tensors, n_random=3, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mlp", "cnn", "residual", "transformer"])
def test_test_models_groups_are_exact(model):
    pytest.importorskip("onnx")
    sys.path.insert(0, GRAPH_TESTS)
    try:
        import models
    finally:
        sys.path.remove(GRAPH_TESTS)
    for name, tensors in _dags(lt.graph.from_onnx(getattr(models, model)())):
        _check_dag(tensors, n_random=2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_groups_are_exact(seed):
    sys.path.insert(0, GRAPH_TESTS)
    try:
        import fusion_ops
    finally:
        sys.path.remove(GRAPH_TESTS)
    rng = np.random.default_rng(seed)
    with fusion_ops.installed():
        g = fusion_ops.random_graph(rng, int(rng.integers(5, 12)), n=int(rng.choice([5, 7, 8])))
        for name, tensors in _dags(g, optimize=False):
            _check_dag(tensors, n_random=2, seed=seed)
