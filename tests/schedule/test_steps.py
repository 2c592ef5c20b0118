"""Schedules as data: every primitive is a frozen step value (schedule/loop_steps.py,
schedule/memory.py) that validates and applies itself; a schedule is what folding its steps
onto a fresh schedule gives; a stage's attach point is Attach.ROOT / INLINE / AttachAt."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fuzz_gen import generate
from util import chain, matmul, matmul_scaled

import looptune as lt
from looptune import ScheduleError
from looptune.schedule import Attach, AttachAt
from looptune.schedule import steps as steps_mod
from looptune.schedule.loop_steps import (Annotate, Bind, ComputeAt, ComputeInline, ComputeRoot,
                                          ComputeWith, Fuse, Prefetch, Reorder, Split,
                                          StoreAt)
from looptune.schedule.memory import CacheRead, CacheWrite, RFactor
from looptune.schedule.relations import Annot

ONE_OF_EACH = [Split("C", "i", factor=8), Split("C", "i", nparts=3), Fuse("C", ("i", "j")),
               Reorder("C", ("j", "i")), Annotate("C", "i", Annot.UNROLL),
               Annotate("C", "j", Annot.VECTORIZE), Annotate("C", "i", Annot.PARALLEL),
               Annotate("C", "j", Annot.STREAM),
               Bind("C", "i", "blockIdx.x"), ComputeAt("P", "C", "j"), ComputeInline("P"),
               ComputeRoot("P"), ComputeWith("D", "C", "i"), CacheRead("A", "local", ("C", "P")), CacheWrite("C", "local"),
               RFactor("C", "k.inner"), Prefetch("C", "A", "k", 16), StoreAt("P", "C", "i")]


def test_every_primitive_is_a_registered_step_class():
    assert set(steps_mod.primitives()) == {
        "split", "fuse", "reorder", "unroll", "vectorize", "parallel", "stream", "bind",
        "compute_at", "compute_with",
        "compute_inline", "compute_root", "cache_read", "cache_write", "rfactor", "prefetch",
        "store_at"}
    assert {type(x).__name__ for x in ONE_OF_EACH} == {
        cls.__name__ for cls in steps_mod.primitives().values()}


@pytest.mark.parametrize("step", ONE_OF_EACH, ids=str)
def test_a_step_round_trips_json_and_prints_as_python(step):
    assert steps_mod.Step.from_json(step.to_json()) == step
    assert steps_mod.loads(steps_mod.dumps([step])) == [step]
    compile(str(step), "<step>", "exec")          # one Python statement
    assert str(step).startswith("s")
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.stage = "D"


def test_split_records_numpy_sizes_as_ints():
    w = matmul(7, 9, 11)
    s = w.schedule()
    i, _ = s[w["C"]].op.axis
    s[w["C"]].split(i, factor=np.int64(4))
    (step,) = s.steps
    assert step == Split("C", "i", factor=4) and type(step.factor) is int
    assert steps_mod.dumps(s.steps) == '[["split", "C", ["i", 4, null]]]'


# ---- the steps are the schedule -------------------------------------------------------------

def _fold_case(seed: int) -> None:
    case = generate(seed)
    assert case.bug is None, case.describe() + "\n" + case.bug
    folded = case.s.replayed()
    assert folded.steps == case.s.steps
    assert folded.state == case.s.state, case.describe()
    if case.lowered is not None:
        assert str(lt.lower(folded, case.op.args)) == case.lowered, case.describe()


def test_folding_the_steps_of_random_schedules_rebuilds_them():
    """Random schedules of the fuzzer's ten operators (refused calls included): the steps
    folded onto a fresh schedule give the same stages, loops, relations, annotations and
    attach points, and the identical loop nest. (Each case also checks the JSON replay and
    the exec of the printed steps.)"""
    for seed in range(7_000, 7_060):
        _fold_case(seed)


@pytest.mark.slow
def test_folding_the_steps_of_many_random_schedules_rebuilds_them():
    for seed in range(7_060, 7_660):
        _fold_case(seed)


def test_stage_state_and_its_steps():
    w = matmul_scaled(13, 17, 9)
    s = w.schedule()
    C, P = w["C"], w["P"]
    i, _ = s[C].op.axis
    io, _ = s[C].split(i, factor=4)
    s[C].parallel(io)
    s[P].compute_at(s[C], io)
    st = s[C].state
    assert [x[0] for x in st.leaves] == ["i.outer", "i.inner", "j", "k"]
    assert st.relations == ("split i -> i.outer, i.inner (4, None)",)
    assert st.annotations == (("i.outer", "parallel", None),)
    assert s[P].state.attach == "computed at C.i.outer"
    assert s[C].steps == [Split("C", "i", factor=4), Annotate("C", "i.outer", Annot.PARALLEL)]
    assert s[P].steps == [ComputeAt("P", "C", "i.outer")]
    assert s.replayed().state == s.state
    w.check(s)


def test_a_refused_step_changes_nothing():
    w = chain(9, 11)
    s = w.schedule()
    D = w["D"]
    i, j = s[D].op.axis
    s[D].vectorize(j)
    before = (list(s.steps), s.state)
    for bad in (lambda: s[D].tile(i, j, 4, 3),           # j is annotated: second split refused
                lambda: s[D].fuse(i, j),
                lambda: s.rfactor(D, i),
                lambda: s.cache_write(D, "local"),
                lambda: lt.replay(s, [Split("D", "i", factor=0)])):
        with pytest.raises(ScheduleError):
            bad()
        assert (list(s.steps), s.state) == before
    w.check(s)


# ---- attach points ----------------------------------------------------------------------------

def _where(st) -> str:
    match st.attach:
        case Attach.ROOT:
            return "root"
        case Attach.INLINE:
            return "inline"
        case AttachAt(host, loop):
            return f"at {host.name}.{loop.name}"
    raise AssertionError(st.attach)


def test_attach_points_are_a_small_matchable_type():
    w = chain(9, 11)
    s = w.schedule()
    D, B1, B2 = w["D"], w["B1"], w["B2"]
    i, j = s[D].op.axis
    s[B1].compute_inline()
    s[B2].compute_at(s[D], i)
    assert [_where(s[t]) for t in (B1, B2, D)] == ["inline", "at D.i", "root"]
    assert s[B2].attach == AttachAt(s[D], i) and s[B2].attach != AttachAt(s[D], j)
    assert str(s[B2].attach) == "computed at D.i" and str(s[B1].attach) == "inlined"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s[B2].attach.loop = j
    s[B2].compute_root()
    assert s[B2].attach is Attach.ROOT
    w.check(s)


def test_lower_names_how_an_argument_stage_is_computed():
    w = chain(9, 11)
    s = w.schedule()
    s[w["B1"]].compute_inline()
    with pytest.raises(ScheduleError, match=r"lower: 'B1' is an argument, so it is written "
                                            r"whole to memory, but stage 'B1' is inlined"):
        lt.lower(s, w.args + [w["B1"]])
    s[w["B1"]].compute_at(s[w["D"]], s[w["D"]].op.axis[0])
    with pytest.raises(ScheduleError, match=r"stage 'B1' is computed at D.i; compute it at root"):
        lt.lower(s, w.args + [w["B1"]])


# ---- errors of naming by name ------------------------------------------------------------------

def test_two_loops_of_one_name_are_refused_where_a_step_would_name_them():
    A = lt.placeholder((5, 7), "float32", name="A")
    r = lt.reduce_axis(7, name="i")
    C = lt.compute((5,), lambda i: lt.sum(A[i, r], axis=r), name="C")
    s = lt.create_schedule(C)
    (i,) = s[C].op.axis
    with pytest.raises(ScheduleError, match=r"stage 'C': loop: 2 loops are called 'i' \[i, i\]; "
                                            r"steps name loops, so give the compute's axes "
                                            r"distinct names"):
        s[C].split(i, factor=2)
    assert s.steps == [] and s[C].leaf_iter_vars == [i, r]


def test_compute_at_a_stage_of_another_schedule():
    w = matmul_scaled(7, 9, 5)
    s, s2 = w.schedule(), w.schedule()
    C, P = w["C"], w["P"]
    with pytest.raises(ScheduleError, match=r"stage 'P': compute_at\(C, i\): stage 'C' belongs "
                                            r"to another schedule; use s\[C\] of this one"):
        s[P].compute_at(s2[C], s2[C].op.axis[0])


def test_cache_read_of_a_tensor_whose_name_another_tensor_has():
    A = lt.placeholder((5, 7), "float32", name="A")
    B = lt.compute((5, 7), lambda i, j: A[i, j] + 1.0, name="A")
    C = lt.compute((5, 7), lambda i, j: B[i, j] * A[i, j], name="C")
    s = lt.create_schedule(C)
    with pytest.raises(ScheduleError, match=r"cache_read\(A, 'local'\): another tensor of this "
                                            r"schedule is called 'A' too; steps name tensors"):
        s.cache_read(A, "local", [C])
    s.cache_read(B, "local", [C])                      # the stage's tensor: named uniquely
    assert [st.name for st in s.stages] == ["A", "A.local", "C"]


def test_schedule_tensor_by_name():
    w = matmul_scaled(7, 9, 5)
    s = w.schedule()
    assert s.tensor("P") is w["P"] and s.tensor("A") is w["A"]
    with pytest.raises(ScheduleError, match=r"s.tensor\('Q'\): no stage or input is called "
                                            r"'Q'; stages are \['P', 'C'\]"):
        s.tensor("Q")


@pytest.mark.parametrize("step, match", [
    (Fuse("C", ("i",)), r"stage 'C': fuse\(i\): a fuse step takes two or more loops"),
    (CacheRead("A", "local", ()), r"cache_read\(A, 'local'\): give the reader tensors"),
    (CacheRead("Z", "local", ("C",)), (r"cache_read\(Z, 'local'\): stage 'C' does not read "
                                       r"'Z'; readers of it are \[\]")),
    (CacheWrite("C", "L2"), r"cache_write\(C, 'L2'\): unknown scope 'L2'"),
    (ComputeAt("C", "C", "i"), r"stage 'C': compute_at\(C, i\): 'C' is an output"),
    (Bind("C", "i", "warp.x"), r"stage 'C': bind\(i\): unknown thread tag 'warp.x'"),
    (Bind("C", "k", "threadIdx.x"), r"a reduction loop cannot be bound to threads"),
    (RFactor("C", "i"), r"stage 'C': rfactor\(C, i\): loop 'i' is spatial"),
])
def test_replayed_steps_are_validated_like_the_methods(step, match):
    w = matmul(7, 9, 11)
    s = w.schedule()
    with pytest.raises(ScheduleError, match=match):
        lt.replay(s, [step])
    assert s.steps == [] and s.state == w.schedule().state
