"""store_at: a buffer kept at an outer loop, its region slid along the compute loop and folded
(schedule/sliding.py). Results are bit for bit those of plain compute_at (the same arithmetic,
computed once instead of three times) and within rounding of numpy; the lowered nest computes
each row of blur_x once per strip (counted by walking it) into a 4-row buffer; misuse is
refused with the loop to change."""
from __future__ import annotations

import looptune as lt
import numpy as np
import pytest
from looptune import ScheduleError
from looptune.lang.expr import Const, Var
from looptune.lang.simplify import simplify
from looptune.lang.visitor import substitute
from looptune.schedule import steps as steps_mod
from looptune.schedule.schedule import replay
from looptune.schedule.sliding import direction
from looptune.schedule.stmt import Allocate, For, IfThenElse, LetStmt, Seq, Store
from util import blur, chain


def _blur_slid(H, W, rows, *, cols=None, stream=False, unroll=False, store=True):
    """blur_y in strips of ``rows`` (or rows x cols tiles), blur_x computed per output row
    and (``store``) stored per strip."""
    w = blur(H, W)
    s = w.schedule()
    by, bx = w["blur_y"], w["blur_x"]
    y, x = s[by].op.axis
    if cols:
        yo, xo, yi, xi = s[by].tile(y, x, rows, cols)
        outer = s[by].fuse(yo, xo)
        x = xi
    else:
        outer, yi = s[by].split(y, factor=rows)
    s[by].parallel(outer)
    (s[by].stream if stream else s[by].vectorize)(x)
    if unroll:
        s[by].unroll(yi)
    s[bx].compute_at(s[by], yi)
    if store:
        s[bx].store_at(s[by], outer)
    s[bx].vectorize(s[bx].op.axis[1])
    return w, s


def _run(w, s, seed=0):
    data = w.make_data(np.random.default_rng(seed))
    f = lt.build(s, w.args)
    out = np.full(w["blur_y"].shape, np.nan, np.float32)
    f(data["I"], out)
    return data, out


CASES = [(37, 53, 8, None), (37, 53, 1, None), (37, 53, 3, None), (13, 25, 40, None),
         (64, 64, 16, None), (37, 53, 5, 16), (40, 70, 8, 32), (9, 11, 2, 4)]


@pytest.mark.parametrize("H,W,rows,cols", CASES)
@pytest.mark.parametrize("stream", [False, True])
def test_blur_slid_is_bitwise_compute_at(H, W, rows, cols, stream):
    w, s = _blur_slid(H, W, rows, cols=cols, stream=stream)
    data, got = _run(w, s)
    w2, s2 = _blur_slid(H, W, rows, cols=cols, stream=stream, store=False)
    _, want = _run(w2, s2)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, w.reference(data)["blur_y"], rtol=1e-5, atol=1e-6)


def test_blur_slid_unrolled_rows():
    w, s = _blur_slid(37, 53, 6, unroll=True)
    data, got = _run(w, s)
    np.testing.assert_allclose(got, w.reference(data)["blur_y"], rtol=1e-5, atol=1e-6)


# ---- what the nest computes: stores counted by walking the lowered loops ------------------

def _count_stores(stmt, env=None, counts=None):
    """Stores per buffer name that executing ``stmt``'s loops would make (loads and values
    ignored; every integer expression evaluated with the simplifier)."""
    env = {} if env is None else env
    counts = {} if counts is None else counts

    def ev(e):
        v = simplify(substitute(e, {k: Const(x, k.dtype) for k, x in env.items()}))
        assert isinstance(v, Const), f"not constant: {v}"
        return int(v.value)

    if isinstance(stmt, For):
        lo, n = ev(stmt.min), ev(stmt.extent)
        for i in range(lo, lo + n):
            _count_stores(stmt.body, {**env, stmt.var: i}, counts)
    elif isinstance(stmt, LetStmt):
        _count_stores(stmt.body, {**env, stmt.var: ev(stmt.value)}, counts)
    elif isinstance(stmt, IfThenElse):
        branch = stmt.then if ev(stmt.cond) else stmt.orelse
        if branch is not None:
            _count_stores(branch, env, counts)
    elif isinstance(stmt, Allocate):
        _count_stores(stmt.body, env, counts)
    elif isinstance(stmt, Seq):
        for x in stmt.stmts:
            _count_stores(x, env, counts)
    elif isinstance(stmt, Store):
        counts[stmt.buffer.name] = counts.get(stmt.buffer.name, 0) + 1
    return counts


def _allocations(stmt, out=None):
    out = [] if out is None else out
    if isinstance(stmt, Allocate):
        out.append(stmt.buffer)
    for child in ("body", "then", "orelse"):
        c = getattr(stmt, child, None)
        if c is not None:
            _allocations(c, out)
    for c in getattr(stmt, "stmts", ()):
        _allocations(c, out)
    return out


@pytest.mark.parametrize("rows", [1, 4, 8, 12])
def test_each_blur_x_row_computed_once_per_strip(rows):
    H, W = 21, 10
    w, s = _blur_slid(H, W, rows)
    f = lt.lower(s, w.args)
    strips = -(-H // rows)
    counts = _count_stores(f.body)
    # per strip: its rows + 2 rows of blur_x, each W wide; without store_at 3 rows per row
    assert counts["blur_x"] == (H + 2 * strips) * W
    assert counts["blur_y"] == H * W
    w2, s2 = _blur_slid(H, W, rows, store=False)
    assert _count_stores(lt.lower(s2, w2.args).body)["blur_x"] == 3 * H * W
    shapes = {tuple(b.shape) for b in _allocations(f.body) if b.name == "blur_x"}
    assert shapes == {(4, W) if rows > 2 else (min(rows + 2, 4), W)}   # per strip, folded


def test_region_constant_in_the_compute_loop_is_computed_once():
    """P[i] read at every j of C[i, j]: computed at j, stored at i, it is computed at
    j == 0 only (N stores instead of N * M)."""
    N, M = 7, 9
    X = lt.placeholder((N,), name="X")
    Y = lt.placeholder((N, M), name="Y")
    P = lt.compute((N,), lambda i: X[i] * 2.0, name="P")
    C = lt.compute((N, M), lambda i, j: P[i] + Y[i, j], name="C")
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    s[P].compute_at(s[C], j)
    assert _count_stores(lt.lower(s, [X, Y, C]).body)["P"] == N * M
    s[P].store_at(s[C], i)
    assert _count_stores(lt.lower(s, [X, Y, C]).body)["P"] == N
    x = np.random.default_rng(0).random(N, dtype=np.float32)
    y = np.random.default_rng(1).random((N, M), dtype=np.float32)
    out = np.empty((N, M), np.float32)
    lt.build(s, [X, Y, C])(x, y, out)
    np.testing.assert_array_equal(out, (x * np.float32(2))[:, None] + y)


def test_two_moving_dimensions_compute_the_whole_region():
    """A region that moves along rows and columns with the compute loop is not slid: each
    iteration computes all it reads (storage hoisted only), and the result is exact."""
    w = blur(12, 12)
    s = w.schedule()
    by, bx = w["blur_y"], w["blur_x"]
    y, x = s[by].op.axis
    f = s[by].fuse(y, x)
    fo, fi = s[by].split(f, factor=5)
    s[bx].compute_at(s[by], fi)
    s[bx].store_at(s[by], fo)
    w.check(s)


def test_direction():
    c, k = Var("c"), Var("k")
    assert direction(c * 2 + k, c) == 1
    assert direction(k - c, c) == -1
    assert direction(k * 3, c) == 0
    assert direction(lt.min(c + 3, k), c) == 1
    assert direction(c * k, c) is None


# ---- errors --------------------------------------------------------------------------------

def _needs_compute_at(s, by, bx):
    y, _ = s[by].op.axis
    return lambda: s[bx].store_at(s[by], y)


def _store_loop_inside(s, by, bx):
    y, x = s[by].op.axis
    s[bx].compute_at(s[by], y)
    return lambda: s[bx].store_at(s[by], x)


def _parallel_between(s, by, bx):
    y, _ = s[by].op.axis
    yo, yi = s[by].split(y, factor=4)
    s[by].parallel(yi)
    s[bx].compute_at(s[by], yi)
    return lambda: s[bx].store_at(s[by], yo)


REFUSED = {   # name -> (set-up returning the refused call, the message)
    "not computed at a loop": (_needs_compute_at,
                               r"blur_x.*computed at root.*compute_at it first"),
    "store loop inside the compute loop": (
        _store_loop_inside, r"loop 'x' is inside 'y'.*store at 'y' or a loop outside it"),
    "parallel loop between": (_parallel_between,
                              r"'y.inner' of 'blur_y' is parallel.*must run in order"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_store_at_refused(name):
    w = blur(9, 9)
    s = w.schedule()
    setup, message = REFUSED[name]
    call = setup(s, w["blur_y"], w["blur_x"])
    with pytest.raises(ScheduleError, match=message):
        call()


def test_annotating_after_store_at_refused_at_lowering():
    w, s = _blur_slid(9, 9, 4)
    by = w["blur_y"]
    s[by].unroll(s[by].loop("y.inner"))   # unrolled: still in order
    lt.lower(s, w.args)
    w2, s2 = _blur_slid(9, 9, 4)
    by2 = w2["blur_y"]
    yi = s2[by2].loop("y.inner")
    s2[by2].reorder(s2[by2].loop("x"), yi)
    s2[by2].vectorize(yi)
    with pytest.raises(ScheduleError, match=r"store_at.*vectorized"):
        lt.lower(s2, w2.args)


def test_other_host_refused():
    w = chain(7, 9)
    s = w.schedule()
    D, B2, B1 = w["D"], w["B2"], w["B1"]
    s[B1].compute_at(s[B2], s[B2].op.axis[0])
    with pytest.raises(ScheduleError, match=r"computed at 'B2', not at 'D'"):
        s[B1].store_at(s[D], s[D].op.axis[0])


def test_split_after_store_at_refused_at_lowering():
    w = blur(9, 9)
    s = w.schedule()
    by, bx = w["blur_y"], w["blur_x"]
    y, _ = s[by].op.axis
    yo, yi = s[by].split(y, factor=4)
    s[bx].compute_at(s[by], yi)
    s[bx].store_at(s[by], yo)
    s[by].split(yo, factor=2)
    with pytest.raises(ScheduleError, match=r"store_at\(blur_y, y.outer\): loop 'y.outer' of "
                                            r"'blur_y' \(store_at\) was split or fused"):
        lt.lower(s, w.args)


def test_prefetch_of_a_folded_buffer_refused():
    w = blur(13, 9)
    s = w.schedule()
    by, bx = w["blur_y"], w["blur_x"]
    y, x = s[by].op.axis
    yo, yi = s[by].split(y, factor=4)
    xo, xi = s[by].split(x, factor=4)
    s[by].vectorize(xi)
    s[bx].compute_at(s[by], yi)
    s[bx].store_at(s[by], yo)
    s[by].prefetch(bx, xo, 1)
    with pytest.raises(ScheduleError, match=r"prefetch\(blur_x, x.outer\): 'blur_x' is stored "
                                            r"at an outer loop \(store_at\) in a buffer "
                                            r"folded"):
        lt.lower(s, w.args)


def test_compute_at_again_drops_store_at():
    w, s = _blur_slid(9, 9, 4)
    by, bx = w["blur_y"], w["blur_x"]
    assert s[bx].stored_at is not None
    s[bx].compute_at(s[by], s[by].loop("y.inner"))
    assert s[bx].stored_at is None


def test_steps_round_trip():
    w, s = _blur_slid(13, 9, 4)
    text = steps_mod.dumps(s.steps)
    assert "store_at" in text
    s2 = replay(w.schedule(), steps_mod.loads(text))
    assert s2.state == s.state
    assert "store_at(s[blur_y], s[blur_y].loop('y.outer'))" in str(s.steps[-2])
    w.check(s2)
