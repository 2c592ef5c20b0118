"""Every validation branch of the schedule primitives and of lowering raises ScheduleError whose
message names the stage, the primitive, the loop and the reason."""
from __future__ import annotations

import pytest
from util import blur, chain, matmul, matmul_scaled

import looptune as lt
from looptune import ScheduleError


@pytest.fixture
def mm():
    w = matmul(7, 9, 11)
    s = w.schedule()
    C = w["C"]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    return w, s, C, i, j, k


# ---- loops that are not (or no longer) leaves of this stage ------------------------------------

def test_loop_of_another_stage(mm):
    w = chain(5, 6)
    s = w.schedule()
    bi, bj = s[w["B1"]].op.axis
    with pytest.raises(ScheduleError, match=r"stage 'D': split\(i\): loop 'i' is a loop of "
                                            r"stage 'B1', not of stage 'D'"):
        s[w["D"]].split(bi, factor=2)


def test_loop_of_another_schedule(mm):
    w, s, C, i, j, k = mm
    io, ii = s[C].split(i, factor=2)
    s2 = w.schedule()
    with pytest.raises(ScheduleError, match=r"stage 'C': unroll\(i.outer\): loop 'i.outer' is "
                                            r"not a loop of this schedule"):
        s2[C].unroll(io)


def test_not_a_loop(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': .*expected a loop \(IterVar\) of this "
                                            r"stage; got 3"):
        s[C].vectorize(3)


def test_loop_already_split_away(mm):
    w, s, C, i, j, k = mm
    s[C].split(i, factor=2)
    with pytest.raises(ScheduleError, match=r"stage 'C': split\(i\): loop 'i' has been split or "
                                            r"fused away.*i.outer, i.inner"):
        s[C].split(i, factor=3)


def test_loop_already_fused_away(mm):
    w, s, C, i, j, k = mm
    s[C].fuse(i, j)
    with pytest.raises(ScheduleError, match=r"stage 'C': parallel\(j\): loop 'j' has been split "
                                            r"or fused away"):
        s[C].parallel(j)


def test_loop_by_unknown_name(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': loop: no loop named 'q'; loops are "
                                            r"\[i, j, k\]"):
        s[C].loop("q")


# ---- reorder / fuse ----------------------------------------------------------------------

def test_reorder_repeated_loop(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': reorder\(j, i, j\): loop 'j' is given "
                                            r"more than once"):
        s[C].reorder(j, i, j)


def test_reorder_foreign_loop(mm):
    w, s, C, i, j, k = mm
    other = lt.reduce_axis(3, name="r")
    with pytest.raises(ScheduleError, match=r"stage 'C': reorder\(k, r\): loop 'r' is not a loop "
                                            r"of this schedule"):
        s[C].reorder(k, other)


def test_fuse_non_adjacent(mm):
    w, s, C, i, j, k = mm
    s[C].reorder(i, k, j)
    with pytest.raises(ScheduleError, match=r"stage 'C': fuse\(i, j\): loops are not adjacent in "
                                            r"the current order \[i, k, j\]"):
        s[C].fuse(i, j)


def test_fuse_inner_before_outer(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"fuse\(j, i\): loops are not adjacent"):
        s[C].fuse(j, i)


def test_fuse_reduction_with_spatial(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': fuse\(j, k\): cannot fuse a reduction "
                                            r"loop with a spatial loop"):
        s[C].fuse(j, k)


def test_fuse_nothing(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': fuse\(\): give at least one loop"):
        s[C].fuse()


def test_fuse_annotated_loop(mm):
    w, s, C, i, j, k = mm
    s[C].unroll(j)
    with pytest.raises(ScheduleError, match=r"stage 'C': fuse\(i, j\): loop 'j' is already "
                                            r"annotated unroll; fuse before annotating"):
        s[C].fuse(i, j)


# ---- split factors -----------------------------------------------------------------------

@pytest.mark.parametrize("kw, what", [({"factor": 0}, "factor must be a positive int; got 0"),
                                      ({"factor": -2}, "factor must be a positive int; got -2"),
                                      ({"factor": 2.0}, "factor must be a positive int; got 2.0"),
                                      ({"factor": True}, "factor must be a positive int; got True"),
                                      ({"factor": "4"}, "factor must be a positive int; got '4'"),
                                      ({"nparts": 0}, "nparts must be a positive int; got 0"),
                                      ({"nparts": -1}, "nparts must be a positive int; got -1"),
                                      ({"nparts": 1.5}, "nparts must be a positive int; got 1.5")])
def test_split_bad_factor(mm, kw, what):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': split\(i\): " + what):
        s[C].split(i, **kw)


def test_split_both_factor_and_nparts(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': split\(i\): give exactly one of factor= "
                                            r"or nparts="):
        s[C].split(i, factor=2, nparts=2)


def test_split_neither_factor_nor_nparts(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"give exactly one of factor= or nparts="):
        s[C].split(i)


def test_tile_bad_factor(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': split\(j\): factor must be a positive "
                                            r"int; got 0"):
        s[C].tile(i, j, 4, 0)


def test_split_annotated_loop(mm):
    w, s, C, i, j, k = mm
    s[C].vectorize(j)
    with pytest.raises(ScheduleError, match=r"stage 'C': split\(j\): loop 'j' is already "
                                            r"annotated vectorize; split before annotating"):
        s[C].split(j, factor=2)


def test_failed_split_leaves_the_stage_unchanged(mm):
    w, s, C, i, j, k = mm
    before = list(s[C].leaf_iter_vars)
    with pytest.raises(ScheduleError):
        s[C].split(i, factor=0)
    assert s[C].leaf_iter_vars == before
    assert s.steps == []
    w.check(s)


# ---- annotations ---------------------------------------------------------------------------

@pytest.mark.parametrize("prim", ["parallel", "vectorize"])
def test_parallel_or_vectorize_reduction_loop(mm, prim):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=rf"stage 'C': {prim}\(k\): loop 'k' carries the "
                                            r"reduction of 'C'.*rfactor"):
        getattr(s[C], prim)(k)


def test_parallel_or_vectorize_split_reduction_loop(mm):
    w, s, C, i, j, k = mm
    ko, ki = s[C].split(k, factor=4)
    with pytest.raises(ScheduleError, match=r"stage 'C': vectorize\(k.inner\): loop 'k.inner' "
                                            r"carries the reduction"):
        s[C].vectorize(ki)
    with pytest.raises(ScheduleError, match=r"parallel\(k.outer\): loop 'k.outer' carries"):
        s[C].parallel(ko)


@pytest.mark.parametrize("first, second", [("vectorize", "parallel"), ("parallel", "unroll"),
                                           ("unroll", "vectorize")])
def test_conflicting_annotations(mm, first, second):
    w, s, C, i, j, k = mm
    getattr(s[C], first)(j)
    with pytest.raises(ScheduleError, match=rf"stage 'C': {second}\(j\): loop 'j' is already "
                                            rf"marked {first}; a loop takes one of"):
        getattr(s[C], second)(j)


def test_repeating_the_same_annotation_is_harmless(mm):
    w, s, C, i, j, k = mm
    s[C].vectorize(j)
    s[C].vectorize(j)
    w.check(s)


def test_parallel_nested_inside_vectorized(mm):
    w, s, C, i, j, k = mm
    s[C].vectorize(i)
    s[C].parallel(j)
    with pytest.raises(ScheduleError, match=r"parallel loop 'j' is nested inside vectorized loop "
                                            r"'i'"):
        lt.lower(s, w.args)


def test_vectorized_nested_inside_vectorized(mm):
    w, s, C, i, j, k = mm
    s[C].vectorize(i)
    s[C].vectorize(j)
    with pytest.raises(ScheduleError, match=r"vectorized loop 'j' is nested inside vectorized "
                                            r"loop 'i'"):
        lt.build(s, w.args)


def test_parallel_producer_inside_vectorized_consumer_loop():
    w = chain(6, 10)
    s = w.schedule()
    D, B2 = w["D"], w["B2"]
    i, j = s[D].op.axis
    s[D].vectorize(i)
    s[B2].compute_at(s[D], i)
    bi, bj = s[B2].op.axis
    s[B2].parallel(bj)
    with pytest.raises(ScheduleError, match=r"parallel loop 'j' is nested inside vectorized "
                                            r"loop 'i'"):
        lt.lower(s, w.args)


def test_bind_unknown_tag(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': bind\(i\): unknown thread tag "
                                            r"'threadIdx.w'"):
        s[C].bind(i, "threadIdx.w")


def test_bind_reduction_to_threads(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': bind\(k\): a reduction loop cannot be "
                                            r"bound to threads"):
        s[C].bind(k, "threadIdx.x")


# ---- compute_at / compute_inline ---------------------------------------------------------

def test_compute_at_a_stage_that_does_not_read_it():
    w = blur(6, 8)
    s = w.schedule()
    bx, by = w["blur_x"], w["blur_y"]
    y, x = s[bx].op.axis
    with pytest.raises(ScheduleError, match=r"stage 'blur_y': compute_at\(blur_x, y\): "
                                            r"'blur_y' is an output"):
        s[by].compute_at(s[bx], y)


def test_compute_at_a_non_consumer():
    w = chain(5, 6)
    s = w.schedule()
    B1, B2 = w["B1"], w["B2"]
    bi, bj = s[B1].op.axis
    with pytest.raises(ScheduleError, match=r"stage 'B2': compute_at\(B1, i\): stage 'B1' does "
                                            r"not read 'B2'"):
        s[B2].compute_at(s[B1], bi)


def test_compute_at_a_loop_of_the_wrong_stage():
    w = chain(5, 6)
    s = w.schedule()
    D, B2, B1 = w["D"], w["B2"], w["B1"]
    bi, bj = s[B2].op.axis
    with pytest.raises(ScheduleError, match=r"compute_at\(D, i\): loop 'i' is a loop of stage "
                                            r"'B2', not of stage 'D'"):
        s[B1].compute_at(s[D], bi)


def test_compute_at_itself():
    w = chain(5, 6)
    s = w.schedule()
    B1 = w["B1"]
    i, j = s[B1].op.axis
    with pytest.raises(ScheduleError, match=r"stage 'B1': compute_at\(B1, i\): a stage cannot be "
                                            r"computed at one of its own loops"):
        s[B1].compute_at(s[B1], i)


def test_compute_at_needs_a_stage():
    w = chain(5, 6)
    s = w.schedule()
    D = w["D"]
    i, j = s[D].op.axis
    with pytest.raises(ScheduleError, match=r"stage 'B1': compute_at\(D, i\): the first argument "
                                            r"must be a stage s\[T\]"):
        s[w["B1"]].compute_at(D, i)


def test_compute_at_by_an_output(mm):
    w = matmul_scaled(5, 6, 7)
    s = w.schedule()
    C, P = w["C"], w["P"]
    pi, pk = s[P].op.axis
    with pytest.raises(ScheduleError, match=r"stage 'C': compute_at\(P, i\): 'C' is an output"):
        s[C].compute_at(s[P], pi)


def test_compute_inline_of_an_output(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"stage 'C': compute_inline\(\): 'C' is an output of "
                                            r"the schedule"):
        s[C].compute_inline()


def test_compute_inline_of_a_reduction():
    w = matmul(5, 6, 7)
    C = w["C"]
    D = lt.compute((5, 6), lambda i, j: C[i, j] * 2.0, name="D")
    s = lt.create_schedule(D)
    with pytest.raises(ScheduleError, match=r"stage 'C': compute_inline\(\): a reduction cannot "
                                            r"be inlined"):
        s[C].compute_inline()


def test_compute_at_a_loop_split_afterwards():
    w = chain(5, 6)
    s = w.schedule()
    D, B2 = w["D"], w["B2"]
    i, j = s[D].op.axis
    s[B2].compute_at(s[D], j)
    s[D].split(j, factor=2)
    with pytest.raises(ScheduleError, match=r"stage 'B2': compute_at\(D, j\): loop 'j' of 'D' "
                                            r"was split or fused after compute_at"):
        lt.lower(s, w.args)


def test_compute_at_an_inlined_stage():
    w = chain(5, 6)
    s = w.schedule()
    B1, B2 = w["B1"], w["B2"]
    bi, bj = s[B2].op.axis
    s[B1].compute_at(s[B2], bi)
    s[B2].compute_inline()
    with pytest.raises(ScheduleError, match=r"stage 'B1': compute_at\(B2, i\): stage 'B2' is "
                                            r"inlined and has no loops"):
        lt.lower(s, w.args)


def test_compute_at_one_reader_when_another_reads_outside():
    """chain: D reads A and B2; make B1 read by B2 (at D) and also by a second output E."""
    w = chain(5, 6)
    B1, B2, D = w["B1"], w["B2"], w["D"]
    E = lt.compute((5, 6), lambda i, j: B1[i, j] + 1.0, name="E")
    s = lt.create_schedule([D, E])
    di, dj = s[D].op.axis
    s[B2].compute_at(s[D], di)
    s[B1].compute_at(s[D], di)
    with pytest.raises(ScheduleError, match=r"stage 'B1': compute_at\(D, i\): .*E"):
        lt.lower(s, [*w.inputs, D, E])


# ---- the schedule itself -------------------------------------------------------------------

def test_schedule_of_a_placeholder(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"s\[A\]: 'A' is a placeholder \(an input\); it has no "
                                            r"loops to schedule"):
        s[w["A"]]


def test_schedule_of_a_foreign_tensor(mm):
    w, s, C, i, j, k = mm
    other = lt.compute((3,), lambda i: w["A"][i, 0], name="other")
    with pytest.raises(ScheduleError, match=r"s\[other\]: tensor 'other' is not computed by this "
                                            r"schedule"):
        s[other]


def test_create_schedule_of_a_placeholder(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"create_schedule: 'A' is a placeholder"):
        lt.create_schedule(w["A"])


def test_create_schedule_of_a_non_tensor():
    with pytest.raises(ScheduleError, match=r"create_schedule: expected the output tensors "
                                            r"\(or their operations, t.op\); got 3"):
        lt.create_schedule([3])


def test_stage_by_unknown_name(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"no stage named 'Q'; stages are \['C'\]"):
        s.stage("Q")


# ---- lower / build arguments ------------------------------------------------------------

def test_missing_placeholder_in_args(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"lower: stage 'C' reads placeholder 'B', which is "
                                            r"not in the arguments"):
        lt.build(s, [w["A"], C])


def test_output_missing_from_args(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"lower: output 'C' is not in the arguments"):
        lt.build(s, [w["A"], w["B"]])


def test_argument_given_twice(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"lower: tensor 'A' is given twice"):
        lt.lower(s, [w["A"], w["A"], w["B"], C])


def test_argument_not_a_tensor(mm):
    w, s, C, i, j, k = mm
    with pytest.raises(ScheduleError, match=r"lower: arguments must be tensors; got 'A'"):
        lt.lower(s, ["A", w["B"], C])


def test_inlined_intermediate_as_argument():
    w = chain(5, 6)
    s = w.schedule()
    s[w["B1"]].compute_inline()
    with pytest.raises(ScheduleError, match=r"lower: 'B1' is an argument, .*inlined"):
        lt.lower(s, [*w.args, w["B1"]])


def test_symbolic_size_not_bound_by_any_argument():
    n = lt.var("n")
    X = lt.placeholder((4,), name="X")
    Y = lt.compute((n,), lambda i: X[i % 4], name="Y")
    Z = lt.compute((4,), lambda i: Y[i] * 2.0, name="Z")
    s = lt.create_schedule(Z)
    with pytest.raises(ScheduleError, match=r"lower: the size n of stage 'Y' does not appear in "
                                            r"any argument's shape"):
        lt.lower(s, [X, Z])


def test_create_schedule_takes_operations_as_tvm_does_and_names_anything_else(mm):
    w, s, C, i, j, k = mm
    by_op = lt.create_schedule(C.op)
    assert [s.name for s in by_op.stages] == [s.name for s in lt.create_schedule(C).stages]
    assert lt.create_schedule([C.op]).outputs == [C]
    for bad in (3, "C", [C, 3]):
        with pytest.raises(ScheduleError, match=r"create_schedule: expected the output tensors"):
            lt.create_schedule(bad)
