"""Fusion by op pattern: the decisions on small graphs, the printed groups, and every group's
compute DAG run against the reference (stand-in operators of each pattern: fusion_ops)."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.graph import Graph, GraphError, OpPattern
from looptune.graph.fusion import lower_group
from looptune.graph.fusion.postdom import forward_graph, post_dominator_tree

import fusion_ops


@pytest.fixture(autouse=True)
def fx_ops():
    with fusion_ops.installed():
        yield


def _names(groups):
    return [[n.name for n in grp.nodes] for grp in groups]


def _run_fused(graph, groups, inputs):
    """Run the groups' DAGs in order (plain schedules) and return the graph's outputs."""
    env = dict(zip(graph.inputs, inputs))
    env.update(graph.consts)
    for grp in groups:
        if any(lt.graph.get_op(n.op_type).compute is None for n in grp.nodes):
            for node in grp.nodes:                 # a host-only operator: its reference
                ctx = lt.graph.registry.call_of(graph, node)
                outs = lt.graph.get_op(node.op_type).reference(ctx, [env[i] for i in
                                                                     node.inputs])
                env.update(zip(node.outputs, outs))
            continue
        dag = lower_group(grp)
        outs = [t for t in dag.tensors if t not in dag.placeholders]
        f = lt.build(lt.create_schedule(outs), dag.tensors, name="grp")
        arrays = [np.array(env[v], order="C") for v in dag.inputs]
        results = [np.empty(graph.types[v].shape, graph.types[v].dtype) for v in dag.outputs]
        f(*arrays, *results)
        env.update(zip(dag.outputs, results))
    return [env[v] for v in graph.outputs]


def _check_numerics(g, rng):
    xs = [rng.uniform(-1, 1, g.types[n].shape).astype("float32") for n in g.inputs]
    ref = g.run_reference(xs)
    got = _run_fused(g, lt.graph.fuse(g), xs)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-5)


def _matmul_bias_relu():
    g = Graph("mbr")
    x = g.input("x", (3, 4))
    w = g.const(np.linspace(-1, 1, 20, dtype="float32").reshape(4, 5), name="w")
    b = g.const(np.linspace(-1, 1, 5, dtype="float32"), name="b")
    y = g.op("FxMatMul", x, w, name="mm")
    y = g.op("Add", y, b, name="bias")
    g.output(g.op("Relu", y, name="act"))
    return g


def test_matmul_bias_relu_is_one_group_with_the_matmul_as_master(rng):
    g = _matmul_bias_relu()
    (grp,) = lt.graph.fuse(g)
    assert _names([grp]) == [["mm", "bias", "act"]]
    assert grp.master.name == "mm" and grp.pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert grp.inputs == ("x", "w", "b") and grp.outputs == ("act",)
    assert grp.patterns == (OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.BROADCAST,
                            OpPattern.ELEMWISE)
    _check_numerics(g, rng)


def test_group_prints_nodes_master_pattern_and_io():
    (grp,) = lt.graph.fuse(_matmul_bias_relu())
    text = str(grp)
    assert text.splitlines()[0] == ("group 0 fused_fxmatmul_add_relu [OUT_ELEMWISE_FUSABLE, "
                                    "master node 'mm' (FxMatMul)]")
    assert "inputs: %x: float32[3, 4], %w: float32[4, 5] (const), %b: float32[5] (const)" \
        in text
    assert "%bias: float32[3, 5] = Add(%mm, %b)    # BROADCAST" in text
    assert text.splitlines()[-1] == "  outputs: %act: float32[3, 5]"
    assert "fused_fxmatmul_add_relu" in repr(grp)


def _diamond(name: str, branch: str) -> Graph:
    """x -> Exp a -> (``branch`` b, Abs c) -> Add d: two paths from a that meet at d."""
    g = Graph(name)
    a = g.op("Exp", g.input("x", (4, 6)), name="a")
    b = g.op(branch, a, name="b")
    c = g.op("Abs", a, name="c")
    g.output(g.op("Add", b, c, name="d"))
    return g


def test_diamond_of_elementwise_ops_is_one_group(rng):
    g = _diamond("diamond", "Neg")
    groups = lt.graph.fuse(g)
    assert _names(groups) == [["a", "b", "c", "d"]]
    assert groups[0].outputs == ("d",)
    _check_numerics(g, rng)


def test_diamond_with_an_opaque_branch_does_not_fuse_its_top(rng):
    g = _diamond("diamond2", "FxOpaque")
    groups = lt.graph.fuse(g)
    # a's post-dominator is d, but the path through the opaque b may not fuse; c joins d
    assert _names(groups) == [["a"], ["b"], ["c", "d"]]
    assert groups[0].outputs == ("a",) and set(groups[2].inputs) == {"a", "b"}
    _check_numerics(g, rng)


def test_value_with_two_consumers_that_never_meet_stays_alone(rng):
    g = Graph("fork")
    x = g.input("x", (4, 6))
    a = g.op("Exp", x, name="a")
    g.output(g.op("Neg", a, name="b"), g.op("Abs", a, name="c"))
    groups = lt.graph.fuse(g)
    assert _names(groups) == [["a"], ["b"], ["c"]]
    tree = post_dominator_tree(forward_graph(g))
    assert tree[0].parent is None                 # no post-dominator: both are outputs
    _check_numerics(g, rng)


def test_reduction_takes_injective_and_elementwise_inputs_not_its_consumer(rng):
    g = Graph("red")
    x = g.input("x", (5, 7))
    t = g.op("FxTranspose", x, name="t")
    e = g.op("Exp", t, name="e")
    s = g.op("FxReduceSum", e, name="s")
    g.output(g.op("Neg", s, name="n"))
    groups = lt.graph.fuse(g)
    assert _names(groups) == [["t", "e", "s"], ["n"]]
    assert groups[0].pattern == OpPattern.COMM_REDUCE and groups[0].master.name == "s"
    _check_numerics(g, rng)


def test_opaque_op_is_alone(rng):
    g = Graph("opq")
    x = g.input("x", (4, 6))
    a = g.op("Exp", x, name="a")
    b = g.op("FxOpaque", a, name="b")
    g.output(g.op("Neg", b, name="c"))
    groups = lt.graph.fuse(g)
    assert _names(groups) == [["a"], ["b"], ["c"]]
    assert groups[1].pattern == OpPattern.OPAQUE
    _check_numerics(g, rng)


def test_epilogue_must_be_elementwise_from_the_matmul():
    g = Graph("mmt")
    x = g.input("x", (3, 3))
    y = g.op("FxMatMul", x, x, name="mm")
    g.output(g.op("Relu", g.op("FxTranspose", y, name="t"), name="r"))
    # the transpose is injective: the matmul stays alone, the transpose fuses into the relu
    assert _names(lt.graph.fuse(g)) == [["mm"], ["t", "r"]]


def test_a_value_that_is_a_graph_output_does_not_fuse_into_its_consumers(rng):
    g = Graph("outmid")
    x = g.input("x", (3, 4))
    w = g.const(np.ones((4, 4), "float32"), name="w")
    y = g.op("FxMatMul", x, w, name="mm")
    g.output(y, g.op("Relu", y, name="r"))
    assert _names(lt.graph.fuse(g)) == [["mm"], ["r"]]
    _check_numerics(g, rng)


def test_two_matmuls_never_share_a_group(rng):
    g = Graph("two")
    x = g.input("x", (4, 4))
    a = g.op("FxMatMul", x, x, name="mm1")
    b = g.op("FxMatMul", x, g.op("Neg", x, name="nx"), name="mm2")
    g.output(g.op("Relu", g.op("Add", a, b, name="add"), name="r"))
    groups = lt.graph.fuse(g)
    assert sum(grp.pattern == OpPattern.OUT_ELEMWISE_FUSABLE for grp in groups) == 2
    assert ["mm1", "add", "r"] in _names(groups) and ["mm2"] in _names(groups)
    _check_numerics(g, rng)


def test_multi_output_node_fuses_into_the_node_reading_both_outputs(rng):
    g = Graph("split")
    x = g.input("x", (3, 8))
    a, b = g.op("FxSplit", g.op("Exp", x, name="e"), name="sp")
    g.output(g.op("Mul", a, b, name="m"))
    groups = lt.graph.fuse(g)
    assert _names(groups) == [["e", "sp", "m"]]
    _check_numerics(g, rng)


def test_host_only_operator_is_opaque_and_alone(rng):
    g = Graph("host")
    x = g.input("x", (3, 8))
    s = g.op("FxSort", g.op("Exp", x, name="e"), name="s")
    g.output(g.op("Neg", s, name="n"))
    groups = lt.graph.fuse(g)
    assert _names(groups) == [["e"], ["s"], ["n"]] and groups[1].pattern == OpPattern.OPAQUE
    _check_numerics(g, rng)


def test_identical_groups_lower_to_the_same_task():
    g = Graph("twins")
    x = g.input("x", (3, 4))
    w1 = g.const(np.ones((4, 4), "float32"), name="w1")
    w2 = g.const(np.full((4, 4), 2, "float32"), name="w2")
    y = g.op("Relu", g.op("FxMatMul", x, w1, name="mm1"), name="r1")
    g.output(g.op("Relu", g.op("FxMatMul", y, w2, name="mm2"), name="r2"))
    g1, g2 = lt.graph.fuse(g)
    t1 = lt.search.auto_task(lower_group(g1).tensors)
    t2 = lt.search.auto_task(lower_group(g2).tensors)
    assert t1.name == t2.name
    other = lt.search.auto_task(lower_group(lt.graph.fuse(_matmul_bias_relu())[0]).tensors)
    assert other.name != t1.name


def test_identity_output_becomes_a_copy_stage(rng):
    g = Graph("ident")
    x = g.input("x", (2, 3))
    a, b = g.op("FxSplit", x, name="sp")
    g.output(a, b)
    (grp,) = lt.graph.fuse(g)
    dag = lower_group(grp)
    assert dag.inputs == ("x",) and dag.outputs == (a.name, b.name)
    _check_numerics(g, rng)


def test_max_depth_one_keeps_every_node_alone():
    g = _matmul_bias_relu()
    assert _names(lt.graph.fuse(g, max_depth=1)) == [["mm"], ["bias"], ["act"]]


def test_fuse_rejects_bad_arguments():
    with pytest.raises(GraphError, match="fuse: expected a looptune.graph.Graph; got list"):
        lt.graph.fuse([])
    with pytest.raises(GraphError, match="max_depth must be a positive int; got 0"):
        lt.graph.fuse(_matmul_bias_relu(), max_depth=0)


def test_lowering_names_the_node_whose_compute_is_wrong(monkeypatch):
    from looptune.graph import registry
    op = registry._OPS["FxOpaque"]
    bad = type(op)(**{**op.__dict__, "compute": lambda ctx, ts: [
        lt.compute((1,), lambda i: ts[0][0, 0], name="wrong")]})
    monkeypatch.setitem(registry._OPS, "FxOpaque", bad)
    g = Graph("bad")
    x = g.input("x", (2, 3))
    g.output(g.op("FxOpaque", g.op("Exp", x), name="oq"))
    groups = lt.graph.fuse(g)
    with pytest.raises(GraphError, match=r"node 'oq' \(FxOpaque\): its compute gave "
                       r"float32\[1\] for output 'oq', but inference says float32\[2, 3\]"):
        lower_group(groups[1])


def _convex(graph, groups) -> bool:
    """No path leaves a group and comes back into it."""
    owner = {o: k for k, grp in enumerate(groups) for n in grp.nodes for o in n.outputs}
    order = {k: i for i, k in enumerate(range(len(groups)))}
    for k, grp in enumerate(groups):
        for v in grp.inputs:
            if v in owner and order[owner[v]] >= order[k]:
                return False
    return True


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_partition_every_node_once_in_execution_order(seed):
    rng = np.random.default_rng(seed)
    g = fusion_ops.random_graph(rng, int(rng.integers(4, 16)))
    groups = lt.graph.fuse(g)
    nodes = [n for grp in groups for n in grp.nodes]
    assert sorted(map(id, nodes)) == sorted(map(id, g.nodes))
    assert _convex(g, groups)
    assert [grp.index for grp in groups] == list(range(len(groups)))
    for grp in groups:
        assert sum(p == OpPattern.OUT_ELEMWISE_FUSABLE for p in grp.patterns) <= 1
        assert OpPattern.OPAQUE not in grp.patterns or len(grp) == 1


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.slow
def test_random_graphs_fused_run_equals_reference(seed):
    rng = np.random.default_rng(100 + seed)
    _check_numerics(fusion_ops.random_graph(rng, 8), rng)


def test_library_ops_compile_time_constants_stay_out_of_the_dag(rng):
    g = Graph("lib")
    x = g.input("x", (2, 3, 5))
    t = g.op("Transpose", x, perm=[0, 2, 1], name="t")
    s = g.op("ReduceSum", g.op("Exp", t, name="e"), np.array([1], "int64"), keepdims=0,
             name="s")
    c = g.op("Constant", value=np.arange(3, dtype="float32"), name="c")
    g.output(g.op("Add", g.op("Identity", s, name="i"), c, name="a"))
    groups = lt.graph.fuse(g)
    assert _names(groups) == [["t", "e", "s"], ["c", "i", "a"]]
    axes = groups[0].inputs[1]
    assert g.is_const(axes) and groups[0].inputs == ("x", axes)
    assert lower_group(groups[0]).inputs == ("x",)          # the axes are read at compile time
    assert lower_group(groups[1]).inputs == ("s",)          # the Constant is computed inside
    _check_numerics(g, rng)
