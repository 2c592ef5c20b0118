"""Static memory planning: liveness, reuse, in-place, greedy best fit; the planner never lets
two live values overlap (random step sequences and random fused graphs), and compiled models
stay exact with their intermediates in one arena."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.graph import Graph
from looptune.graph.compile import Step, elementwise_inplace
from looptune.graph.memory import liveness, plan_memory

import fusion_ops


@pytest.fixture(autouse=True)
def fx_ops():
    with fusion_ops.installed():
        yield


def _chain_steps(n):
    names = ["x"] + [f"v{k}" for k in range(n - 1)] + ["y"]
    return [((names[k],), (names[k + 1],)) for k in range(n)], names[1:-1]


def test_chain_reuses_two_buffers_and_in_place_one():
    steps, mids = _chain_steps(5)                   # x -> v0 -> v1 -> v2 -> v3 -> y
    sizes = {v: 4096 for v in mids}
    plan = plan_memory(steps, sizes)
    plan.verify()
    assert plan.naive_bytes == 4 * 4096 and plan.arena_bytes == 2 * 4096
    assert plan.lifetimes == {"v0": (0, 1), "v1": (1, 2), "v2": (2, 3), "v3": (3, 4)}
    assert plan.offsets["v0"][0] == plan.offsets["v2"][0] != plan.offsets["v1"][0]
    inpl = plan_memory(steps, sizes, lambda k: [(steps[k][1][0], steps[k][0][0])])
    inpl.verify()
    assert inpl.arena_bytes == 4096 and len(inpl.buffers) == 1
    assert inpl.inplace == [(1, "v0", "v1"), (2, "v1", "v2"), (3, "v2", "v3")]


def test_best_fit_puts_a_value_into_a_gap_below_a_live_one():
    steps = [((), ("a",)), (("a",), ("b",)), (("b",), ("c",)), (("c",), ())]
    plan = plan_memory(steps, {"a": 1024, "b": 512, "c": 512})
    plan.verify()
    # a [0..1] at 0, b [1..2] above it; c [2..3] overlaps b only: the gap a leaves fits it
    assert plan.offsets == {"a": (0, 1024), "b": (1024, 512), "c": (0, 512)}
    assert plan.arena_bytes == 1536 and plan.naive_bytes == 2048


def test_offsets_and_sizes_are_aligned():
    steps = [((), ("a", "b")), (("a", "b"), ("c",)), (("c",), ())]
    plan = plan_memory(steps, {"a": 3, "b": 70, "c": 5}, alignment=64)
    plan.verify()
    assert all(off % 64 == 0 for off, _ in plan.offsets.values())
    assert plan.arena_bytes == 64 + 128 + 64       # c is written while a and b are read


def test_in_place_needs_the_input_to_die_at_that_step():
    steps = [((), ("a",)), (("a",), ("b",)), (("a", "b"), ())]
    plan = plan_memory(steps, {"a": 256, "b": 256}, lambda k: [("b", "a")] if k == 1 else [])
    plan.verify()
    assert plan.inplace == [] and plan.offsets["a"][0] != plan.offsets["b"][0]


def test_verify_catches_live_values_sharing_bytes():
    steps, mids = _chain_steps(3)
    plan = plan_memory(steps, {v: 128 for v in mids})
    a, b = mids
    plan.offsets[b] = plan.offsets[a]
    with pytest.raises(AssertionError, match=f"values '{a}' .* and '{b}' .* are live at once "
                       "in overlapping memory"):
        plan.verify()


def test_liveness_of_values_and_misuse():
    steps = [((), ("a", "dead")), (("a",), ("b",)), (("a", "b"), ())]
    assert liveness(steps, ["a", "b", "dead"]) == {"a": (0, 2), "b": (1, 2), "dead": (0, 0)}
    with pytest.raises(AssertionError, match="step 0 reads 'b' before any step writes it"):
        liveness([(("b",), ()), ((), ("b",))], ["b"])
    with pytest.raises(AssertionError, match=r"no step writes \['z'\]"):
        liveness(steps, ["z"])


def _random_steps(rng, n_steps):
    steps, sizes, alive = [], {}, []
    for k in range(n_steps):
        reads = tuple(rng.choice(alive, size=min(len(alive), int(rng.integers(0, 3))),
                                 replace=False)) if alive else ()
        writes = tuple(f"t{k}_{j}" for j in range(int(rng.integers(1, 3))))
        for v in writes:
            sizes[v] = int(rng.choice([4, 64, 100, 256, 1000, 4096]))
        alive += list(writes)
        steps.append((reads, writes))
    return steps, sizes


@pytest.mark.parametrize("seed", range(40))
def test_random_sequences_never_overlap_live_values(seed):
    rng = np.random.default_rng(seed)
    steps, sizes = _random_steps(rng, int(rng.integers(2, 30)))
    allow = rng.random() < 0.5

    def inplace(k):
        reads, writes = steps[k]
        return [(o, i) for o in writes for i in reads if sizes[i] >= sizes[o]] if allow else []
    plan = plan_memory(steps, sizes, inplace)
    plan.verify()
    aligned = sum((n + 63) // 64 * 64 for n in sizes.values())
    assert plan.peak_live_bytes <= plan.arena_bytes + sum(
        sizes[i] for _, i, _ in plan.inplace) and plan.arena_bytes <= aligned
    rep = plan.report()
    assert set(rep["values"]) == set(sizes) and rep["arena_bytes"] == plan.arena_bytes


@pytest.mark.parametrize("seed", range(30))
def test_random_fused_graphs_plans_never_overlap(seed):
    rng = np.random.default_rng(1000 + seed)
    g = fusion_ops.random_graph(rng, int(rng.integers(3, 25)))
    groups = lt.graph.fuse(g)
    steps = [Step(grp, 0, grp.inputs, grp.outputs) for grp in groups]
    outside = set(g.inputs) | set(g.consts) | set(g.outputs)
    sizes = {v: g.types[v].nbytes for st in steps for v in st.outputs if v not in outside}
    plan = plan_memory([(st.inputs, st.outputs) for st in steps], sizes,
                       lambda k: elementwise_inplace(steps[k], g.types))
    plan.verify()
    assert set(plan.offsets) == set(sizes)


def _opaque_chain(n=48):
    """x -> opaque -> neg -> opaque -> neg -> opaque: nothing fuses, the negs are in place."""
    g = Graph("chain")
    v = g.input("x", (n, n))
    for k in range(2):
        v = g.op("Neg", g.op("FxOpaque", v, name=f"o{k}"), name=f"n{k}")
    g.output(g.op("FxOpaque", v, name="out"))
    return g


def test_compiled_chain_reuses_memory_in_place_and_stays_exact(rng):
    g = _opaque_chain()
    model = lt.graph.compile(g, optimize=False)
    rep = model.memory_report()
    assert len(model.steps) == 5
    assert rep["naive_bytes"] == 4 * 48 * 48 * 4
    # o0/n0 share a buffer (in place), o1/n1 another: o1 is written while n0 is read
    assert rep["arena_bytes"] == 2 * 48 * 48 * 4 < rep["naive_bytes"]
    assert [(d["input"], d["output"]) for d in rep["inplace"]] == [("o0", "n0"), ("o1", "n1")]
    assert {"offset", "bytes", "start", "end", "buffer"} <= set(rep["values"]["o0"])
    assert rep["values"]["o0"]["start"] == 0 and rep["values"]["o0"]["end"] == 1
    model.plan.verify()
    x = rng.standard_normal((48, 48)).astype("float32")
    (out,) = model(x)
    np.testing.assert_array_equal(out, g.run_reference([x])[0])


def test_arena_is_allocated_once_and_outputs_are_fresh(rng):
    model = lt.graph.compile(_opaque_chain(8), optimize=False)
    where = model.arena.ctypes.data
    assert where % 64 == 0 and model.arena.nbytes == model.plan.arena_bytes
    x = rng.standard_normal((8, 8)).astype("float32")
    (a,) = model(x)
    (b,) = model(x * 2)
    assert model.arena.ctypes.data == where and not np.shares_memory(a, b)
    np.testing.assert_allclose(b, 2 * a, rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, pytest.param(2, marks=pytest.mark.slow),
                                  pytest.param(3, marks=pytest.mark.slow),
                                  pytest.param(4, marks=pytest.mark.slow)])
def test_random_compiled_graphs_match_the_reference(seed):
    rng = np.random.default_rng(500 + seed)
    g = fusion_ops.random_graph(rng, 10)
    model = lt.graph.compile(g, optimize=False)
    model.plan.verify()
    xs = [rng.uniform(-1, 1, g.types[n].shape).astype("float32") for n in g.inputs]
    for _ in range(2):                     # twice: a stale arena must not leak into a call
        for got, want in zip(model(*xs), g.run_reference(xs)):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
