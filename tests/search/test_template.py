"""Templates, knob application, the fallback config, tasks and FLOP counting."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import looptune as lt
from helpers_templates import matmul_tensors, tmatmul
from looptune.errors import LooptuneError, ScheduleError
from looptune.search import ConfigSpace, FallbackConfig, count_flop, create_task, template
from looptune.search.template import get_template


def _check_matmul(s, tensors, N, M, K):
    A, B, C = tensors
    f = lt.build(s, tensors)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (N, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, M)).astype("float32")
    c = np.full((N, M), np.nan, dtype="float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def _leaf_names(s, T):
    return [v.name for v in s[T].leaf_iter_vars]


# ---- knob application ---------------------------------------------------------------------

def test_split_apply_two_and_three_way():
    A, B, C = matmul_tensors(24, 20, 16)
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    sp = ConfigSpace()
    sp.define_split("si", i, num_outputs=3, policy="candidate", candidate=[[-1, 3, 4]])
    sp.define_split("sj", j, num_outputs=2, policy="candidate", candidate=[[-1, 8]])
    io, im, ii = sp["si"].apply(s, C, i)
    jo, ji = sp["sj"].apply(s, C, j)
    assert [int(x.extent.value) for x in (io, im, ii, jo, ji)] == [2, 3, 4, 3, 8]
    assert [st.primitive for st in s.steps] == ["split"] * 3
    _check_matmul(s, [A, B, C], 24, 20, 16)        # 20 = 3*8 - 4: the j tail is guarded


def test_reorder_and_annotate_apply():
    A, B, C = matmul_tensors(16, 16, 16)
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    sp = ConfigSpace()
    sp.define_reorder("o", [i, j, k], policy="candidate", candidate=[[k, i, j]])
    sp.define_annotate("a", [i, j], policy="candidate", candidate=[["unroll", "vec"]])
    new = sp["o"].apply(s, C, [i, j, k])
    assert [v.name for v in new] == ["k", "i", "j"] == _leaf_names(s, C)
    sp["a"].apply(s, C, [i, j])
    assert [(st.primitive, st.args) for st in s.steps[1:]] == [("unroll", ("i",)),
                                                              ("vectorize", ("j",))]
    _check_matmul(s, [A, B, C], 16, 16, 16)


def test_annotate_max_unroll_skips_long_loops():
    A, B, C = matmul_tensors(64, 8, 8)
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    sp = ConfigSpace()
    sp.define_annotate("a", [i, j], policy="candidate", candidate=[["unroll", "unroll"]],
                       max_unroll=16)
    sp["a"].apply(s, C, [i, j])
    assert [st.args for st in s.steps] == [("j",)]


def test_apply_to_the_wrong_number_of_loops_raises():
    A, B, C = matmul_tensors(8, 8, 8)
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    sp = ConfigSpace()
    sp.define_reorder("o", [i, j])
    with pytest.raises(ScheduleError, match="defined over 2 loops but applied to 1"):
        sp["o"].apply(s, C, [i])


@pytest.mark.slow
def test_every_sampled_config_of_the_template_is_exact():
    task = create_task("test_matmul", (24, 20, 12))
    for cfg in task.config_space.sample(6, np.random.default_rng(3)):
        s, tensors = task.instantiate(cfg)
        assert [st.primitive for st in s.steps][:3] == ["split"] * 3
        _check_matmul(s, tensors, 24, 20, 12)


# ---- templates and the fallback -------------------------------------------------------------

def test_fallback_outside_tuning_is_correct_and_said_once(caplog):
    caplog.set_level(logging.WARNING, logger="looptune.search")
    s, tensors = tmatmul(8, 12, 4)
    s2, _ = tmatmul(8, 12, 4)
    msgs = [r.getMessage() for r in caplog.records if "fallback" in r.getMessage()]
    assert len(msgs) == 1 and "test_matmul" in msgs[0] and "(8, 12, 4, 'float32')" in msgs[0]
    # the fallback takes entity 0 of each knob: splits by 1, given order, no annotation
    assert [(st.primitive, st.args) for st in s.steps] == [
        ("split", ("i", 1, None)), ("split", ("j", 1, None)), ("split", ("k", 1, None)),
        ("reorder", ("k.outer", "i.inner", "k.inner")),
        ("reorder", ("i.outer", "j.outer", "k.outer", "i.inner", "k.inner", "j.inner"))]
    _check_matmul(s, tensors, 8, 12, 4)


def test_template_cfg_kinds():
    seen = []

    @template("test_cfg_kinds")
    def t(cfg, n):
        seen.append((type(cfg).__name__, cfg.is_fallback))
        cfg.define_knob("x", [3, 4])
        A = lt.placeholder((n,), "float32", name="A")
        C = lt.compute((n,), lambda i: A[i] * float(cfg["x"].val), name="C")
        return lt.create_schedule(C), [A, C]

    task = create_task("test_cfg_kinds", (5,))
    task.instantiate(1)
    t(5)
    assert seen == [("ConfigSpace", False), ("ConfigEntity", False), ("FallbackConfig", True)]
    assert get_template("test_cfg_kinds") is t


def test_args_are_canonical_with_defaults_and_keywords():
    key = tmatmul.key((8, 8, 8))
    assert key.args == (8, 8, 8, "float32") and key.target == "c"
    assert tmatmul.canonical_args((8,), {"M": 8, "K": 8}) == key.args
    assert create_task("test_matmul", [8, 8, 8]).key == key
    assert tmatmul.key((8, 8, 8), "c -threads=2").target == "c -threads=2"
    with pytest.raises(LooptuneError, match="numbers, strings"):
        tmatmul.canonical_args((8, 8, object()))


def test_template_errors():
    with pytest.raises(LooptuneError, match="no template named 'nope'.*registered: .*test_matmul"):
        create_task("nope", ())
    with pytest.raises(LooptuneError, match="keyword-only"):
        template("test_kwonly")(lambda cfg, *, n: None)

    @template("test_bad_return")
    def bad(cfg, n):
        return 3
    with pytest.raises(LooptuneError, match=r"must return \(schedule, tensors\)"):
        create_task("test_bad_return", (1,))


def test_a_template_must_define_the_same_knobs_for_every_config():
    @template("test_nondeterministic")
    def nd(cfg, n):
        cfg.define_knob("a", [0, 1])
        if cfg["a"].val == 0:
            cfg.define_knob("b", [0, 1])
        A = lt.placeholder((n,), "float32", name="A")
        C = lt.compute((n,), lambda i: A[i] + 1.0, name="C")
        return lt.create_schedule(C), [A, C]

    task = create_task("test_nondeterministic", (4,))
    task.instantiate(0)
    with pytest.raises(LooptuneError, match=r"did not define knobs \['b'\]"):
        task.instantiate(1)


# ---- FLOPs ---------------------------------------------------------------------------------

def test_flops_from_the_dag():
    A, B, C = matmul_tensors(8, 6, 5)
    assert count_flop([A, B, C]) == 2 * 8 * 6 * 5
    X = lt.placeholder((10, 3), "float32", name="X")
    E = lt.compute((10, 3), lambda i, j: lt.exp(X[i, j]) * 2.0 + 1.0, name="E")
    assert count_flop([X, E]) == 3 * 30
    k = lt.reduce_axis(3, name="k")
    S = lt.compute((10,), lambda i: lt.sum(E[i, k], axis=k), name="S")
    assert count_flop([X, S]) == 3 * 30 + 30              # the producer counts too
    P = lt.placeholder((4, 4), "int8", name="P")
    J = lt.compute((4, 4), lambda i, j: P[i, j] + P[j, i], name="J")
    assert count_flop([P, J]) == 16
    assert create_task("test_matmul", (8, 6, 5)).flop == 2 * 8 * 6 * 5


def test_add_flop_overrides_the_count():
    @template("test_add_flop")
    def t(cfg, n):
        cfg.add_flop(123)
        A = lt.placeholder((n,), "float32", name="A")
        C = lt.compute((n,), lambda i: A[i] + 1.0, name="C")
        return lt.create_schedule(C), [A, C]
    assert create_task("test_add_flop", (4,)).flop == 123


def test_fallback_config_object():
    cfg = FallbackConfig()
    cfg.define_split("s", 12, num_outputs=2)
    cfg.define_knob("k", ["a", "b"])
    assert cfg["s"].size == (12, 1) and cfg["k"].val == "a"
    assert "s=[12, 1]" in str(cfg)
