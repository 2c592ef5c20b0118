"""Compiling a graph: one kernel per distinct group, schedules from a log / the auto
scheduler's fallback / a default schedule, the callable model against the reference, input
checks, shared kernels, host steps, the interface the tuner and exporter read."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import looptune as lt
from looptune.graph import Graph, GraphError
from looptune.graph.compile import default_schedule
from looptune.search.log import LogWriter, Record

import fusion_ops


def _cnn(c_in=3, c_out=4, hw=7, name="cnn", seed=0):
    rng = np.random.default_rng(seed)
    g = Graph(name)
    x = g.input("x", (1, c_in, hw, hw))
    w = g.const(rng.standard_normal((c_out, c_in, 3, 3)).astype("float32"), name="w")
    b = g.const(rng.standard_normal((1, c_out, 1, 1)).astype("float32"), name="b")
    y = g.op("Relu", g.op("Add", g.op("Conv", x, w, pads=[1, 1, 1, 1], name="conv"), b),
             name="act")
    g.output(g.op("MaxPool", y, kernel_shape=[2, 2], strides=[2, 2], name="pool"))
    return g


def _check(model, g, rng, rtol=1e-5):
    xs = [rng.standard_normal(g.types[n].shape).astype(g.types[n].dtype) for n in g.inputs]
    outs = model(*xs)
    assert isinstance(outs, list) and len(outs) == len(g.outputs)
    for got, want in zip(outs, g.run_reference(xs)):
        assert got.shape == want.shape and got.dtype == want.dtype
        scale = max(1.0, float(np.abs(want).max()))       # sums in another order
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-5 * scale)
    return xs


@pytest.mark.slow
def test_conv_bias_relu_pool_compiles_to_two_kernels_and_matches(rng):
    g = _cnn()
    model = lt.graph.compile(g, optimize=False)
    assert [k.name for k in model.kernels] == ["fused_conv_add_relu", "fused_maxpool"]
    assert [st.kernel for st in model.steps] == [0, 1]
    assert model.steps[0].args == ("x", "w", "b", "act")
    assert all(k.schedule == "fallback" and k.task.name.startswith("auto_")
               for k in model.kernels)
    assert "int fused_conv_add_relu(" in model.kernels[0].source
    assert set(model.weights) == {"w", "b"}
    _check(model, g, rng)


@pytest.mark.slow
def test_conv_epilogue_runs_in_the_conv_tile_loops():
    model = lt.graph.compile(_cnn(c_in=16, c_out=32, hw=30), optimize=False)   # on threads
    kern = model.kernels[0]
    text = str(kern.module.lowered)
    # the conv is accumulated per tile of the relu output, in the parallel loop that stores
    # the relu (a padded copy of the input may come first), never stored whole
    nests = text.split("parallel:")
    last = nests[-1]
    assert len(nests) >= 2
    assert "relu2[" in last and "allocate conv0[" in last and "relu2[" not in "".join(nests[:-1])
    assert "allocate conv0[float32 * 1, 32, 30, 30]" not in text


def test_inputs_by_position_name_or_dict_and_checked(rng):
    g = _cnn(hw=5)
    model = lt.graph.compile(g, optimize=False)
    x = rng.standard_normal((1, 3, 5, 5)).astype("float32")
    (a,) = model(x)
    (b,) = model(x=x)
    (c,) = model({"x": x})
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    with pytest.raises(GraphError, match=r"missing input\(s\) x of graph 'cnn'"):
        model()
    with pytest.raises(GraphError, match="input 'x' has shape \\(1, 3, 4, 5\\); graph 'cnn' "
                       "declares \\(1, 3, 5, 5\\)"):
        model(x[:, :, :4])
    with pytest.raises(GraphError, match="input 'x' has dtype float64"):
        model(x.astype("float64"))
    with pytest.raises(GraphError, match="has no input named 'y'"):
        model(y=x)
    with pytest.raises(GraphError, match="takes 1 inputs \\(x\\); got 2"):
        model(x, x)


@pytest.mark.slow
def test_identical_groups_share_one_task_and_kernel(rng):
    g = Graph("twins")
    x = g.input("x", (1, 4, 6, 6))
    v = x
    for k in range(3):
        w = g.const(rng.standard_normal((4, 4, 3, 3)).astype("float32"), name=f"w{k}")
        b = g.const(rng.standard_normal((1, 4, 1, 1)).astype("float32"), name=f"b{k}")
        v = g.op("Relu", g.op("Add", g.op("Conv", v, w, pads=[1, 1, 1, 1]), b))
    g.output(v)
    model = lt.graph.compile(g, optimize=False)
    assert len(model.steps) == 3 and len(model.kernels) == 1
    assert [st.kernel for st in model.steps] == [0, 0, 0]
    assert [grp.index for grp in model.kernels[0].groups] == [0, 1, 2]
    assert model.steps[1].inputs == (model.steps[0].outputs[0], "w1", "b1")
    _check(model, g, rng)


@pytest.mark.slow
def test_best_logged_config_schedules_its_task(tmp_path, rng):
    g = _cnn(hw=5)
    plain = lt.graph.compile(g, optimize=False)
    task = plain.kernels[0].task
    space = task.config_space
    pick = space.get(space.size - 1)
    log = tmp_path / "cnn.jsonl"
    with LogWriter(log) as w:
        for cfg, cost in ((pick, 1e-4), (space.get(1), 5e-4)):
            w.write(Record(task.key, cfg.to_json(), [cost]))
    model = lt.graph.compile(g, log=str(log), optimize=False)
    assert [k.schedule for k in model.kernels] == ["log", "fallback"]
    want = lt.build(task.instantiate(pick.index)[0], plain.kernels[0].dag.tensors,
                    name="fused_conv_add_relu")
    assert model.kernels[0].source == want.source != plain.kernels[0].source
    _check(model, g, rng)


def test_missing_log_is_a_graph_error():
    with pytest.raises(GraphError, match=r"compile\(log='nowhere.jsonl'\): tuning log "
                       "nowhere.jsonl does not exist"):
        lt.graph.compile(_cnn(), log="nowhere.jsonl")


def test_default_schedule_when_the_sketch_fails(monkeypatch, rng):
    import looptune.search.auto as auto

    def broken(tensors, target="c"):
        raise lt.LooptuneError("no sketch for this DAG")
    monkeypatch.setattr(auto, "auto_task", broken)
    g = _cnn(hw=9)
    model = lt.graph.compile(g, optimize=False)
    assert [k.schedule for k in model.kernels] == ["default", "default"]
    assert all(k.task is None for k in model.kernels)
    text = str(model.kernels[0].module.lowered)
    assert "parallel" in text and "vectorized" in text
    _check(model, g, rng)


@pytest.mark.parametrize("shape", [(3, 17), (5,), (2, 3)])
@pytest.mark.slow
def test_default_schedule_of_a_reduction_dag_is_exact(shape, rng):
    A = lt.placeholder(shape, "float32", name="A")
    B = lt.compute(shape, lambda *i: lt.exp(A[i]), name="B")
    r = lt.reduce_axis(shape[-1], name="r")
    C = lt.compute(shape[:-1], lambda *i: lt.sum(B[(*i, r)], axis=r), name="C")
    s = default_schedule([C], lanes=4)
    f = lt.build(s, [A, C], name="red")
    a = rng.standard_normal(shape).astype("float32")
    c = np.empty(shape[:-1], "float32")
    f(a, c)
    np.testing.assert_allclose(c, np.exp(a).sum(-1), rtol=1e-5)


@pytest.mark.slow
def test_group_without_compute_runs_its_numpy_reference(rng):
    with fusion_ops.installed():
        g = Graph("host")
        x = g.input("x", (3, 8))
        s = g.op("FxSort", g.op("Exp", x, name="e"), name="s")
        g.output(g.op("Neg", s, name="n"))
        model = lt.graph.compile(g, optimize=False)
        assert [st.kernel for st in model.steps] == [0, None, 1]
        assert "numpy reference" in str(model)
        _check(model, g, rng)


def test_outputs_that_are_inputs_or_repeated_are_copies(rng):
    g = Graph("io")
    x = g.input("x", (4, 5))
    r = g.op("Relu", x)
    g.output(r, x, r)
    model = lt.graph.compile(g, optimize=False)
    xin = rng.standard_normal((4, 5)).astype("float32")
    a, b, c = model(xin)
    np.testing.assert_array_equal(a, np.maximum(xin, 0))
    np.testing.assert_array_equal(b, xin)
    np.testing.assert_array_equal(c, a)
    assert not np.shares_memory(a, c) and not np.shares_memory(b, xin)


def test_compile_runs_the_pass_pipeline_when_there_is_one(monkeypatch, rng):
    seen = []

    def optimize(graph, target, winograd):
        seen.append((graph, target, winograd))
        return graph.replace(name="optimized")
    monkeypatch.setattr(lt.graph, "optimize", optimize, raising=False)
    g = _cnn(hw=5)
    model = lt.graph.compile(g, target="c -threads=2")
    assert seen == [(g, "c -threads=2", True)] and model.graph.name == "optimized"
    assert model.source_graph is g and model.winograd
    assert lt.graph.compile(g, optimize=False).graph is g and len(seen) == 1
    assert not lt.graph.compile(g, winograd=False).winograd
    assert seen[-1] == (g, "c", False)
    _check(model, g, rng)


def test_compile_rejects_bad_arguments():
    with pytest.raises(GraphError, match="compile: expected a looptune.graph.Graph; got str"):
        lt.graph.compile("model.onnx")
    g = Graph("empty")
    g.input("x", (2,))
    with pytest.raises(GraphError, match="graph 'empty' has no outputs"):
        lt.graph.compile(g)
    with pytest.raises(lt.BuildError, match="unknown target 'cuda'"):
        lt.graph.compile(_cnn(), target="cuda")


def test_model_prints_its_steps_and_is_safe_to_share_between_threads(rng):
    g = _cnn(hw=5)
    model = lt.graph.compile(g, optimize=False)
    text = str(model)
    assert text.startswith("model cnn: 2 steps, 2 kernels, target c, arena ")
    assert "0: fused_conv_add_relu [fallback, c](x, w, b) -> act" in text
    xs = [rng.standard_normal((1, 3, 5, 5)).astype("float32") for _ in range(4)]
    want = [g.run_reference([x])[0] for x in xs]
    got = [None] * 4

    def run(k):
        for _ in range(20):
            got[k] = model(xs[k])[0]
    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_memory_report_has_the_documented_keys():
    rep = lt.graph.compile(_cnn(), optimize=False).memory_report()
    assert {"arena_bytes", "naive_bytes", "buffers", "values", "inplace", "peak_live_bytes",
            "input_bytes", "output_bytes", "weight_bytes", "steps"} <= set(rep)
    assert rep["naive_bytes"] == 4 * 7 * 7 * 4 and set(rep["values"]) == {"act"}
    assert rep["values"]["act"] == {"offset": 0, "bytes": 784, "start": 0, "end": 1,
                                    "buffer": 0}


def test_dead_nodes_get_no_step(rng):
    g = Graph("dead")
    x = g.input("x", (3, 4))
    g.op("Exp", x, name="unused")
    g.output(g.op("Neg", x, name="n"))
    model = lt.graph.compile(g, optimize=False)
    assert len(model.groups) == 2 and [st.group.name for st in model.steps] == ["fused_neg"]
    _check(model, g, rng)
