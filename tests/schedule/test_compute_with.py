"""compute_with: one stage's outer loops fused with another's (Halide's compute_with). Each
iteration of the fused loops runs the host's body, then the fused stage's; the fused stage may
read only what the host computed in that same iteration (proved on the bounds, else refused).
Checked against numpy on odd sizes, and every refusal names the stages and loops."""
from __future__ import annotations

import numpy as np
import pytest
from util import chain, softmax

import looptune as lt
from looptune import ScheduleError
from looptune.schedule import steps as steps_mod
from looptune.schedule.loop_steps import ComputeWith


def _fused_softmax(N, M, lanes=8, vec=True, parallel=True):
    """softmax with the row sum's rfactored partial loop fused into the exp loop, both
    computed per row of the output."""
    w = softmax(N, M)
    mx, ex, sm, out = w["rowmax"], w["expx"], w["rowsum"], w["softmax"]
    s = w.schedule()
    i, j = s[out].op.axis
    if parallel:
        s[out].parallel(i)
    s[mx].compute_at(s[out], i)
    (k,) = s[sm].op.reduce_axis
    _, ki = s[sm].split(k, factor=lanes)
    tf = s.rfactor(sm, ki)
    s[tf].compute_at(s[out], i)
    s[sm].compute_at(s[out], i)
    lane, ti = s[tf].op.axis
    (rko,) = s[tf].op.reduce_axis
    s[tf].reorder(ti, rko, lane)
    s[ex].compute_at(s[out], i)
    ei, ej = s[ex].op.axis
    jo, ji = s[ex].split(ej, factor=lanes)
    if vec:
        s[ex].vectorize(ji)
        s[tf].vectorize(lane)
    s[tf].compute_with(s[ex], jo)
    return w, s, tf


@pytest.mark.parametrize("N, M, lanes", [(5, 37, 8), (3, 31, 32), (4, 64, 16), (2, 1, 4),
                                         (7, 1000, 32), (1, 33, 32)])
def test_softmax_with_the_sum_fused_into_the_exp_loop_is_exact(N, M, lanes):
    w, s, tf = _fused_softmax(N, M, lanes)
    text = str(lt.lower(s, w.args))
    if M > lanes:      # one loop over the row's chunks holds the exp and the partial sums
        fused = text.split("for j.outer in")[1].split("rowsum[")[0]
        assert "exp(" in fused and "rowsum.rf[" in fused
    w.check(s)


def test_fusion_changes_no_bit_of_the_result():
    """The partial sums add the same values in the same order: bit-identical outputs."""
    w, s, _ = _fused_softmax(9, 200, 16)
    w2 = softmax(9, 200)
    mx, ex, sm, out = (w2[n] for n in ("rowmax", "expx", "rowsum", "softmax"))
    s2 = w2.schedule()
    i, _ = s2[out].op.axis
    for st in (mx, ex):
        s2[st].compute_at(s2[out], i)
    (k,) = s2[sm].op.reduce_axis
    _, ki = s2[sm].split(k, factor=16)
    tf = s2.rfactor(sm, ki)
    s2[tf].compute_at(s2[out], i)
    s2[sm].compute_at(s2[out], i)
    x = np.random.default_rng(3).uniform(-5, 5, (9, 200)).astype(np.float32)
    got = []
    for sched, ws in ((s, w), (s2, w2)):
        f = lt.build(sched, ws.args)
        o = np.empty_like(x)
        f(x, o)
        got.append(o)
    assert np.array_equal(got[0], got[1])


def test_root_stages_fuse_with_parallel_rows():
    """B1 and B2 at root, B2 fused into B1 per row (B2 reads row i of B1 in iteration i), the
    fused row loop parallel in both."""
    w = chain(13, 29)
    s = w.schedule()
    b1, b2 = w["B1"], w["B2"]
    for t in (b1, b2):
        s[t].parallel(s[t].op.axis[0])
    s[b2].compute_with(s[b1], s[b1].op.axis[0])
    text = str(lt.lower(s, w.args))
    fused = text.split("parallel:")[1].split("for i in")[0]   # up to D's loop
    assert text.count("parallel") == 1 and "B1[" in fused and "B2[" in fused
    w.check(s)


def test_a_split_fused_loop_with_tails_is_exact():
    w = chain(11, 37)
    s = w.schedule()
    b1, b2 = w["B1"], w["B2"]
    for t in (b1, b2):
        i, j = s[t].op.axis
        s[t].split(j, factor=8)
    s[b2].compute_with(s[b1], s[b1].leaf_iter_vars[1])     # rows and 8-column chunks
    w.check(s)


def test_steps_print_replay_and_round_trip_json():
    w, s, tf = _fused_softmax(5, 37)
    (step,) = [x for x in s.steps if isinstance(x, ComputeWith)]
    assert step == ComputeWith(tf.name, "expx", "j.outer")
    assert str(step) == "s.stage('rowsum.rf').compute_with(s[expx], s[expx].loop('j.outer'))"
    assert steps_mod.loads(steps_mod.dumps([step])) == [step]
    folded = s.replayed()
    assert folded.state == s.state
    assert str(lt.lower(folded, w.args)) == str(lt.lower(s, w.args))
    assert s[tf.name].state.fused == "expx.j.outer"


# ---- refusals -------------------------------------------------------------------------------

def _chain_rows():
    w = chain(8, 16)
    return w, w.schedule(), w["B1"], w["B2"], w["D"]


def test_a_stage_that_reads_ahead_of_the_host_is_refused():
    A = lt.placeholder((16,), "float32", name="A")
    P = lt.compute((16,), lambda i: A[i] * 2.0, name="P")
    Q = lt.compute((16,), lambda i: P[i] + P[lt.min(i + 1, 15)], name="Q")
    R = lt.compute((16,), lambda i: Q[i] + P[i], name="R")
    s = lt.create_schedule(R)
    s[Q].compute_with(s[P], s[P].op.axis[0])
    with pytest.raises(ScheduleError, match=r"stage 'Q': compute_with\(P, i\): cannot show that "
                       r"'Q' reads P\[.*15\)\] \(dimension 0\) only where 'P' writes in the "
                       "same iteration"):
        lt.lower(s, [A, R])


def test_extents_must_match():
    w, s, b1, b2, _ = _chain_rows()
    s[b1].split(s[b1].op.axis[0], factor=4)
    s[b2].split(s[b2].op.axis[0], factor=2)
    s[b2].compute_with(s[b1], s[b1].leaf_iter_vars[0])
    with pytest.raises(ScheduleError, match="fused loops 'i.outer' of 'B1' \\(extent 2\\) and "
                       "'i.outer' of 'B2' \\(extent 4\\) differ in extent; split them alike"):
        lt.lower(s, w.args)


def test_stages_at_different_places_are_refused_when_fused():
    w, s, b1, b2, d = _chain_rows()
    s[b1].compute_at(s[d], s[d].op.axis[0])
    with pytest.raises(ScheduleError, match="'B2' is computed at root but 'B1' is computed "
                       "at D.i; fused stages are computed at the same place"):
        s[b2].compute_with(s[b1], s[b1].op.axis[0])
    assert not s.steps[1:]


def test_stages_moved_apart_after_fusing_are_refused_when_lowered():
    w, s, b1, b2, d = _chain_rows()
    s[b2].compute_with(s[b1], s[b1].op.axis[0])
    s[b2].compute_at(s[d], s[d].op.axis[0])
    with pytest.raises(ScheduleError, match="'B2' is computed at D.i but 'B1' is computed at "
                       "root; fused stages are computed at the same place"):
        lt.lower(s, w.args)


def test_the_host_may_not_read_the_fused_stage():
    w, s, b1, b2, _ = _chain_rows()
    with pytest.raises(ScheduleError, match="stage 'B2' reads 'B1', so it cannot run first in "
                       "the fused loops; fuse the other way round"):
        s[b1].compute_with(s[b2], s[b2].op.axis[0])


@pytest.mark.parametrize(("kind", "done"), [("vectorize", "vectorized"), ("stream", "streamed")])
def test_vectorized_or_streamed_fused_loops_are_refused(kind, done):
    w, s, b1, b2, _ = _chain_rows()
    s[b2].compute_with(s[b1], s[b1].op.axis[1])
    getattr(s[b1], kind)(s[b1].op.axis[1])
    with pytest.raises(ScheduleError, match=f"fused loops 'j' / 'j' may not be {done} "
                       rf"\(each stage's body is a statement of its own\); fuse at an outer "
                       f"loop and {kind} the loops inside"):
        lt.lower(s, w.args)


def test_fused_loops_must_be_of_one_kind():
    w, s, b1, b2, _ = _chain_rows()
    s[b1].parallel(s[b1].op.axis[0])
    s[b2].compute_with(s[b1], s[b1].op.axis[0])
    with pytest.raises(ScheduleError, match="fused loops differ in kind: 'i' of 'B1' is "
                       "parallel, 'i' of 'B2' serial; give both the same"):
        lt.lower(s, w.args)


def test_a_parallel_host_loop_cannot_carry_a_fused_reduction():
    """The fused stage's reduction loop cannot be parallel (parallel() refuses it), so a
    parallel host loop differs in kind from it."""
    w, s, tf = _fused_softmax(4, 32, 8, vec=False, parallel=False)
    ex = w["expx"]
    s[ex].parallel(s[ex].leaf_iter_vars[1])
    with pytest.raises(ScheduleError, match="fused loops differ in kind: 'j.outer' of 'expx' is "
                       "parallel, 'k2.outer' of 'rowsum.rf' serial"):
        lt.lower(s, w.args)


def test_reading_a_host_whose_reduction_loop_is_fused_is_refused():
    A = lt.placeholder((8, 8), "float32", name="A")
    k = lt.reduce_axis(8, name="k")
    S = lt.compute((8,), lambda i: lt.sum(A[i, k], axis=k), name="S")
    T = lt.compute((8, 8), lambda i, j: S[i] * A[i, j], name="T")
    s = lt.create_schedule(T)
    s[T].compute_with(s[S], s[S].leaf_iter_vars[1])      # S's i, k with T's i, j
    with pytest.raises(ScheduleError, match="'T' reads 'S', whose reduction loop 'k' is fused: "
                       "it would read partial sums"):
        lt.lower(s, [A, T])


def test_one_stage_per_host_and_no_chains():
    w, s, b1, b2, d = _chain_rows()
    s[b2].compute_with(s[b1], s[b1].op.axis[0])
    with pytest.raises(ScheduleError, match="stage 'B2' is already fused into 'B1'"):
        s[d].compute_with(s[b1], s[b1].op.axis[0])
    with pytest.raises(ScheduleError, match="stage 'B2' is itself fused into 'B1'; fuse with "
                       "that stage instead"):
        s[d].compute_with(s[b2], s[b2].op.axis[0])
    with pytest.raises(ScheduleError, match="a stage cannot be fused with itself"):
        s[b1].compute_with(s[b1], s[b1].op.axis[0])
    X = lt.placeholder((8,), "float32", name="X")
    P = lt.compute((8,), lambda i: X[i] * 2.0, name="P")
    Q = lt.compute((8,), lambda i: X[i] * 3.0, name="Q")
    R = lt.compute((8,), lambda i: X[i] * 4.0, name="R")
    O = lt.compute((8,), lambda i: P[i] + Q[i] + R[i], name="O")
    s = lt.create_schedule(O)
    s[Q].compute_with(s[P], s[P].op.axis[0])
    with pytest.raises(ScheduleError, match="stage 'Q' is fused into 'P', so 'P' cannot be "
                       "fused into another stage"):
        s[P].compute_with(s[R], s[R].op.axis[0])


def test_a_loop_split_after_fusing_is_refused():
    w, s, b1, b2, _ = _chain_rows()
    s[b2].compute_with(s[b1], s[b1].op.axis[0])
    s[b1].split(s[b1].op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match="loop 'i' of 'B1' was split or fused after "
                       "compute_with"):
        lt.lower(s, w.args)


def test_an_inlined_stage_cannot_be_fused():
    w, s, b1, b2, _ = _chain_rows()
    s[b1].compute_inline()
    with pytest.raises(ScheduleError, match="stage 'B1' is inlined and has no loops"):
        s[b2].compute_with(s[b1], s[b1].op.axis[0])


def test_a_stage_between_host_and_fused_stage_that_it_reads_is_refused():
    A = lt.placeholder((8,), "float32", name="A")
    P = lt.compute((8,), lambda i: A[i] * 2.0, name="P")
    Q = lt.compute((8,), lambda i: A[i] + 1.0, name="Q")
    R = lt.compute((8,), lambda i: Q[i] * 3.0, name="R")
    O = lt.compute((8,), lambda i: P[i] + R[i], name="O")
    s = lt.create_schedule(O)
    s[R].compute_with(s[P], s[P].op.axis[0])
    with pytest.raises(ScheduleError, match="'R' reads 'Q', which is computed between 'P' "
                       "and 'R'"):
        lt.lower(s, [A, O])


def test_a_stage_computed_at_an_outer_fused_loop_is_refused():
    X = lt.placeholder((8, 16), "float32", name="X")
    P = lt.compute((8, 16), lambda i, j: X[i, j] * 2.0, name="P")
    Q = lt.compute((8, 16), lambda i, j: P[i, j] + 1.0, name="Q")
    R = lt.compute((8, 16), lambda i, j: X[i, j] - 1.0, name="R")
    O = lt.compute((8, 16), lambda i, j: Q[i, j] + R[i, j], name="O")
    s = lt.create_schedule(O)
    s[P].compute_at(s[Q], s[Q].op.axis[0])
    s[R].compute_with(s[Q], s[Q].op.axis[1])             # fuses rows and columns
    with pytest.raises(ScheduleError, match="stage 'P' is computed at 'Q's loop 'i', an outer "
                       "fused loop; compute it at the innermost fused loop"):
        lt.lower(s, [X, O])
    s[P].compute_at(s[Q], s[Q].op.axis[1])             # at the innermost fused loop: fine
    f = lt.build(s, [X, O])
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    o = np.empty_like(x)
    f(x, o)
    np.testing.assert_allclose(o, x * 2 + 1 + x - 1, rtol=1e-6)


def test_a_stage_computed_inside_the_fused_stage_may_not_read_the_host():
    X = lt.placeholder((8, 16), "float32", name="X")
    P = lt.compute((8, 16), lambda i, j: X[i, j] * 2.0, name="P")
    Q = lt.compute((8, 16), lambda i, j: P[i, j] + 1.0, name="Q")
    R = lt.compute((8, 16), lambda i, j: Q[i, j] - X[i, j], name="R")
    O = lt.compute((8, 16), lambda i, j: P[i, j] + R[i, j], name="O")
    s = lt.create_schedule(O)
    s[Q].compute_at(s[R], s[R].op.axis[1])
    s[R].compute_with(s[P], s[P].op.axis[0])
    with pytest.raises(ScheduleError, match="stage 'Q', computed inside 'R', reads 'P'"):
        lt.lower(s, [X, O])


def _random_fusion(seed):
    """A random legal fusion: two stages computed at the same place, split alike (random
    factors, tails included), fused at a random depth, random annotations inside."""
    rng = np.random.default_rng(seed)
    N, M = int(rng.integers(1, 40)), int(rng.integers(1, 70))
    w = chain(N, M)
    s = w.schedule()
    b1, b2 = s[w["B1"]], s[w["B2"]]
    fi, fj = int(rng.integers(1, 9)), int(rng.integers(1, 17))
    split_rows, split_cols = bool(rng.random() < 0.5), bool(rng.random() < 0.7)
    for st in (b1, b2):
        i, j = st.op.axis
        rows = st.split(i, factor=fi) if split_rows else (i,)
        cols = st.split(j, factor=fj) if split_cols else (j,)
        st.reorder(*rows[:1], *cols[:1], *rows[1:], *cols[1:])
    depth = int(rng.integers(1, len(b1.leaf_iter_vars)))       # leave a loop inside
    par = bool(rng.random() < 0.5)
    for st in (b1, b2):
        leaves = st.leaf_iter_vars
        if par:
            st.parallel(leaves[0])
        if rng.random() < 0.6:
            st.vectorize(leaves[-1])
        elif rng.random() < 0.5 and (leaves[-1].extent.value if hasattr(leaves[-1].extent,
                                                                        "value") else 99) <= 16:
            st.unroll(leaves[-1])
    b2.compute_with(b1, b1.leaf_iter_vars[depth - 1])
    return w, s


@pytest.mark.parametrize("seed", range(40))
def test_random_legal_fusions_are_exact(seed):
    w, s = _random_fusion(seed)
    w.check(s)


@pytest.mark.parametrize("seed", range(30))
def test_random_softmax_sum_fusions_are_exact(seed):
    """The examples' softmax with random lanes, columns per fused step, rows per parallel
    iteration and sizes (tails in every loop)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import softmax as sm
    rng = np.random.default_rng(1000 + seed)
    N, M = int(rng.integers(1, 12)), int(rng.integers(1, 300))
    lanes = int(rng.choice([4, 8, 16, 32]))
    chunk = lanes * int(rng.choice([1, 2, 4, 8]))
    rows = int(rng.choice([1, 2, 3]))
    s, tensors = sm._schedule(N, M, "float32", lanes, rows, True, bool(rng.random() < 0.2),
                              chunk)
    x = (rng.standard_normal((N, M)) * 4).astype(np.float32)
    out = np.full_like(x, np.nan)
    lt.build(s, tensors)(x, out)
    np.testing.assert_allclose(out, sm.reference(x), rtol=1e-5, atol=1e-7)
