"""Config spaces and knobs: sizes, indexing, sampling, JSON round trips, validation."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import looptune as lt
from looptune.errors import LooptuneError
from looptune.search import ConfigSpace, create_task
from looptune.search.knobs import AnnotateKnob, OtherKnob, ReorderKnob, SplitKnob


def _loops(*extents):
    """Fresh loops (the axes of a compute) of the given extents."""
    A = lt.placeholder(extents, "float32", name="A")
    C = lt.compute(extents, lambda *i: A[i] * 2.0, name="C")
    return list(C.op.axis)


# ---- split ---------------------------------------------------------------------------------

def test_split_factors_two_outputs_lists_every_divisor():
    k = SplitKnob(32, 2)
    assert len(k) == 6
    assert [e.size for e in (k.get(i) for i in range(6))] == [
        (32, 1), (16, 2), (8, 4), (4, 8), (2, 16), (1, 32)]


def test_split_factors_three_outputs_products_divide_the_extent():
    k = SplitKnob(32, 3)
    # inner factors 2^a * 2^b with a + b <= 5: 21 ordered pairs
    assert len(k) == 21
    for i in range(len(k)):
        outer, f1, f2 = k.get(i).size
        assert outer * f1 * f2 == 32
    k12 = SplitKnob(12, 3)
    divisors = [1, 2, 3, 4, 6, 12]
    want = [(a, b) for a, b in itertools.product(divisors, repeat=2) if 12 % (a * b) == 0]
    assert sorted(e.size[1:] for e in k12.entities) == sorted(want)


def test_split_power2_divisible_unless_asked():
    assert [e.size for e in SplitKnob(48, 2, policy="power2").entities] == [
        (48, 1), (24, 2), (12, 4), (6, 8), (3, 16)]
    loose = SplitKnob(48, 2, policy="power2", allow_non_divisible=True)
    assert loose.get(len(loose) - 1).size == (2, 32)        # outer rounds up: ceil(48/32)
    assert len(loose) == 6


def test_split_non_divisible_factors_with_factors_policy():
    k = SplitKnob(12, 3, allow_non_divisible=True)
    assert (2, 4, 2) in [e.size for e in k.entities]          # 4*2 = 8 does not divide 12
    assert (2, 4, 2) not in [e.size for e in SplitKnob(12, 3).entities]


def test_split_candidates_max_factor_and_filter():
    k = SplitKnob(64, 3, policy="candidate", candidate=[[-1, 4, 8], [2, 4, 8], [-1, 1, 16]])
    assert [e.size for e in k.entities] == [(2, 4, 8), (4, 1, 16)]      # duplicates merged
    assert all(max(e.size[1:]) <= 4 for e in SplitKnob(64, 2, max_factor=4).entities)
    even = SplitKnob(64, 2, filter=lambda e: e.size[1] >= 8)
    assert [e.size[1] for e in even.entities] == [8, 16, 32, 64]


@pytest.mark.parametrize("kwargs, match", [
    ({"num_outputs": 1}, "num_outputs must be >= 2"),
    ({"policy": "bogus"}, "unknown policy 'bogus'"),
    ({"policy": "candidate"}, "needs candidate"),
    ({"policy": "candidate", "candidate": [[-1, 3, 5, 7]]}, "has 4 sizes"),
    ({"policy": "candidate", "candidate": [[5, 4]]}, "outer size"),
    ({"filter": lambda e: False}, "no split of extent"),
])
def test_split_validation(kwargs, match):
    with pytest.raises(LooptuneError, match=match):
        SplitKnob(16, **{"num_outputs": 2, **kwargs})


def test_define_split_needs_a_constant_extent():
    n = lt.var("n")
    A = lt.placeholder((n,), "float32", name="A")
    C = lt.compute((n,), lambda i: A[i] + 1.0, name="C")
    with pytest.raises(LooptuneError, match="symbolic extent"):
        ConfigSpace().define_split("t", C.op.axis[0])


# ---- reorder, knob, annotate ---------------------------------------------------------------

def test_reorder_all_permutations_index_round_trip():
    k = ReorderKnob(_loops(2, 3, 4, 5), policy="all")
    assert len(k) == 24
    perms = [k.get(i).perm for i in range(24)]
    assert perms[0] == (0, 1, 2, 3) and perms[-1] == (3, 2, 1, 0)
    assert sorted(perms) == sorted(itertools.permutations(range(4)))
    assert all(k.index_of(list(p)) == i for i, p in enumerate(perms))
    assert k.index_of([0, 0, 1, 2]) is None


def test_reorder_candidates_accept_loops_or_positions():
    a, b, c = _loops(2, 3, 4)
    k = ReorderKnob([a, b, c], policy="candidate", candidate=[[c, a, b], [0, 1, 2]])
    assert [k.get(i).perm for i in range(len(k))] == [(2, 0, 1), (0, 1, 2)]
    with pytest.raises(LooptuneError, match="not a permutation"):
        ReorderKnob([a, b, c], policy="candidate", candidate=[[a, a, b]])


def test_other_knob_any_values():
    k = OtherKnob([0, "x", (1, 2), None])
    assert len(k) == 4 and k.get(2).val == (1, 2) and k.get(2).to_json() == [1, 2]
    assert k.index_of([1, 2]) == 2
    with pytest.raises(LooptuneError, match="duplicates"):
        OtherKnob([1, 1])


@pytest.mark.parametrize("policy, size", [("try_unroll", 8), ("try_vec", 2),
                                          ("try_unroll_vec", 12)])
def test_annotate_policies_vectorize_only_the_innermost(policy, size):
    k = AnnotateKnob(_loops(2, 3, 4), policy=policy)
    assert len(k) == size
    anns = [k.get(i).anns for i in range(size)]
    assert anns[0] == ("none", "none", "none")
    assert len(set(anns)) == size
    assert all("vec" not in a[:-1] for a in anns)


# ---- the space -----------------------------------------------------------------------------

def _space() -> ConfigSpace:
    sp = ConfigSpace("t")
    i, j = _loops(16, 6)
    sp.define_split("a", i, num_outputs=2)            # 5
    sp.define_knob("b", [1, 2, 3])                    # 3
    sp.define_reorder("c", [i, j])                    # 2
    return sp


def test_space_size_is_the_product_and_indexing_is_mixed_radix():
    sp = _space()
    assert len(sp) == sp.size == 30 and sp.dims == [5, 3, 2]
    assert sp.vector(1) == (1, 0, 0)                  # the first knob varies fastest
    assert sp.vector(5) == (0, 1, 0)
    assert sp.vector(29) == (4, 2, 1)
    for idx in range(30):
        assert sp.index_of(sp.vector(idx)) == idx
        cfg = sp.get(idx)
        assert cfg.index == idx
        a, b, c = sp.vector(idx)
        assert cfg["a"] == sp.knobs["a"].get(a) and cfg["b"].val == [1, 2, 3][b]
        assert cfg["c"].perm == sp.knobs["c"].get(c).perm
    with pytest.raises(IndexError):
        sp.get(30)
    with pytest.raises(IndexError):
        sp.get(-1)


def test_space_iteration_covers_every_config_once():
    sp = _space()
    idx = [c.index for c in sp]
    assert idx == list(range(30))
    assert len({str(c) for c in sp}) == 30


def test_space_sample_distinct_and_seeded():
    sp = _space()
    a = [c.index for c in sp.sample(10, np.random.default_rng(5))]
    b = [c.index for c in sp.sample(10, np.random.default_rng(5))]
    c = [c.index for c in sp.sample(10, np.random.default_rng(6))]
    assert a == b and a != c and len(set(a)) == 10
    assert sorted(c.index for c in sp.sample(100, 1)) == list(range(30))


def test_space_str_is_readable():
    text = str(_space())
    assert "30 configs over 3 knobs" in text
    for name, kind in [("a", "split"), ("b", "knob"), ("c", "reorder")]:
        assert any(line.split()[:2] == [name, kind] for line in text.splitlines())


def test_space_json_round_trip_and_mismatch():
    sp = _space()
    cfg = sp.get(17)
    obj = cfg.to_json()
    assert obj == {"index": 17, "knobs": {"a": [4, 4], "b": 1, "c": [1, 0]}}
    assert sp.from_json(obj) == cfg
    bad = {"index": 17, "knobs": {**obj["knobs"], "b": 3}}
    with pytest.raises(LooptuneError, match="knobs changed"):
        sp.from_json(bad)


def test_huge_space_beyond_int64():
    sp = ConfigSpace("huge")
    for n in range(8):
        sp.define_reorder(f"r{n}", _loops(*([2] * 12)))     # 12! each
    assert sp.size == math.factorial(12) ** 8 > 2 ** 63
    rng = np.random.default_rng(0)
    idx = sp.random_index(rng)
    assert 0 <= idx < sp.size and sp.get(idx).index == idx
    assert len({c.index for c in sp.sample(5, 1)}) == 5


def test_knob_names_are_unique():
    sp = ConfigSpace("t")
    sp.define_knob("x", [1])
    with pytest.raises(LooptuneError, match="defined twice"):
        sp.define_knob("x", [2])


def test_task_space_of_the_test_template():
    task = create_task("test_matmul", (32, 32, 32))
    sp = task.config_space
    assert list(sp.knobs) == ["tile_i", "tile_j", "tile_k", "order", "ann", "parallel"]
    assert sp.dims == [6, 6, 6, 6, 2, 2] and len(sp) == 6 ** 4 * 4
