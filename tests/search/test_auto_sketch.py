"""The auto sketch's rules: multi-level tiling of contractions (register tiles sized by the
target's vector lanes, packing, K-blocks), epilogues by op pattern (bias, activation,
transposes by their index map), contractions that are outputs, the rfactor rule, the fallback's
choices; every schedule checked against numpy at odd sizes."""
from __future__ import annotations

import looptune as lt
import numpy as np
import pytest
from looptune.schedule import Attach, AttachAt
from looptune.search import auto_task
from looptune.search.auto_rules import extent, machine_of
from util import check_outputs, pick_config

L = lt.Target.parse("c").vector_lanes("float32")


def _configs(task, n, seed=0):
    sp = task.config_space
    return [0] + [c.index for c in sp.sample(min(n, sp.size), seed)]


def _matmul(N, M, K, name="C"):
    A = lt.placeholder((N, K), "float32", name="A")
    B = lt.placeholder((K, M), "float32", name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name=name)
    return A, B, C


def _mm(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


# ---- contractions ----------------------------------------------------------------------------

@pytest.mark.slow
def test_matmul_gets_multi_level_tiles_sized_by_the_vector_lanes():
    A, B, C = _matmul(70, 125, 45)
    task = auto_task([A, B, C])
    sp = task.config_space
    assert {"C.cache", "C.tile0", "C.mid0", "C.tile1", "C.mid1", "C.red0", "C.order",
            "C.unroll", "C.pack", "C.prefetch", "parallel"} == set(sp.knobs)
    # the fallback: two vectors of columns, rows filling 16 vector accumulators (12 with
    # AVX2's 16 registers); B packed when its rows are 4 KiB apart or more (here 500 bytes:
    # not packed first)
    assert sp.knobs["C.tile1"].values[0] == 2 * L
    assert sp.knobs["C.tile0"].values[0] * 2 == min(16, machine_of("c").accumulators())
    assert sp.knobs["C.pack"].values[0] == "none"
    wide = auto_task(list(_matmul(9, 1031, 13)))
    assert wide.config_space.knobs["C.pack"].values[0] == "B"
    s, _ = task.instantiate(pick_config(sp, {"parallel": True, "C.pack": "B"}))
    text = str(lt.lower(s, [A, B, C]))
    assert "B.local" in text and "C.local" in text and "parallel" in text
    rows = sp.knobs["C.tile0"].values[0]                 # 8 with AVX-512, 6 with AVX2
    assert f"allocate C.local[float32 * {rows}, {2 * L}]" in text
    for i in _configs(task, 2):
        check_outputs(task.instantiate(i)[0], [A, B, C], _mm)


def test_matmul_micro_kernel_prefetches_the_vector_operand_2_kib_ahead():
    """Knob C.prefetch (on first, as examples/matmul.py measures): the innermost reduction
    loop asks for B's rows (or its packed panel's) 2 KiB of the vector tile ahead, where
    that loop is at least twice as long; off, the same program without the step. Exact
    both ways. A reduction too short to run ahead in gets no knob."""
    A, B, C = _matmul(40, 3 * L, 300)
    task = auto_task([A, B, C])
    sp = task.config_space
    assert sp.knobs["C.prefetch"].values == [True, False]
    base = {"C.red0": 1, "C.order": "tile", "C.tile1": 2 * L, "parallel": False}
    for pack, tensor in (("none", "B"), ("B", "B.local")):
        on = task.instantiate(pick_config(sp, {**base, "C.pack": pack}))[0]
        (step,) = [x for x in on.steps if x.primitive == "prefetch"]
        assert (step.tensor, step.loop, step.offset) == (tensor, "k", 2048 // (2 * L * 4))
        off = task.instantiate(pick_config(sp, {**base, "C.pack": pack,
                                                "C.prefetch": False}))[0]
        assert [str(x) for x in off.steps] == [str(x) for x in on.steps if x is not step]
        check_outputs(on, [A, B, C], _mm)
        check_outputs(off, [A, B, C], _mm)
    # the micro-kernel loop split to 16 steps: too short for 16 rows ahead, no step
    short = task.instantiate(pick_config(sp, {**base, "C.red0": 16, "C.unroll": "none"}))[0]
    assert [x for x in short.steps if x.primitive == "prefetch"] == []
    assert "C.prefetch" not in auto_task(list(_matmul(40, 3 * L, 12))).config_space.knobs


@pytest.mark.parametrize("values", [
    {"C.order": "kblock", "C.red0": 8},                       # K-blocks outside the middle tiles
    {"C.order": "kblock", "C.pack": "A", "C.red0": 16},       # a K-block of A packed
    {"C.cache": False, "C.order": "kblock", "C.red0": 4},     # accumulating in C itself
    {"C.cache": False, "C.unroll": "tile+k", "C.red0": 4},
    {"C.unroll": "tile+k", "C.red0": 2, "C.mid0": "all", "C.pack": "none"},
])
@pytest.mark.slow
def test_kblocked_packed_and_uncached_variants_are_exact(values):
    A, B, C = _matmul(37, 53, 41)
    task = auto_task([A, B, C])
    s, _ = task.instantiate(pick_config(task.config_space, values))
    check_outputs(s, [A, B, C], _mm)


@pytest.mark.slow
def test_a_contraction_that_is_also_an_output():
    """Was: compute_at(D, ...): 'C' is an output. C keeps its tiles (and write-back), the
    activation reading it runs as its own stage."""
    A, B, C = _matmul(23, 37, 19)
    D = lt.compute(C.shape, lambda i, j: lt.max(C[i, j], 0.0), name="D")
    task = auto_task([A, B, C, D])
    assert "C.cache" in task.config_space.knobs
    for i in _configs(task, 4):
        s, _ = task.instantiate(i)
        check_outputs(s, [A, B, C, D], lambda a, b: (_mm(a, b), np.maximum(_mm(a, b), 0)))


@pytest.mark.slow
def test_bias_relu_transpose_chain_is_one_epilogue():
    """An epilogue chain by op pattern: bias (broadcast), relu, then a transpose; the chain's
    stages are inlined into the output, which takes the tiled loops (C per tile)."""
    A, B, C = _matmul(29, 29, 17)
    bias = lt.placeholder((29,), "float32", name="bias")
    E = lt.compute(C.shape, lambda i, j: C[i, j] + bias[j], name="E")
    F = lt.compute(C.shape, lambda i, j: lt.max(E[i, j], 0.0), name="F")
    G = lt.compute(C.shape, lambda i, j: F[j, i], name="G")
    task = auto_task([A, B, bias, G])
    assert not [k for k in task.config_space.knobs if not k.startswith("C.")
                and k != "parallel"]
    s, _ = task.instantiate(0)
    assert isinstance(s.stage("C").attach, AttachAt) and s.stage("E").attach is Attach.INLINE
    for i in _configs(task, 4):
        check_outputs(task.instantiate(i)[0], [A, B, bias, G],
                      lambda a, b, c: np.maximum(_mm(a, b) + c, 0).T)


def test_square_transpose_epilogue_takes_the_tiles_of_the_axes_it_reads():
    """Was: the epilogue's loop i was split by C's knob of i while it reads C's j (swapped
    tile limits); the register tile of C is now tile0 x tile1 whatever the output's order."""
    A, B, C = _matmul(32, 32, 9)
    D = lt.compute(C.shape, lambda i, j: C[j, i], name="D")
    task = auto_task([A, B, D])
    sp = task.config_space
    rows = next(v for v in sp.knobs["C.tile0"].values if v not in (1, sp.knobs["C.tile1"]
                                                                  .values[0]))
    cfg = pick_config(sp, {"C.tile0": rows, "C.tile1": L})
    s, _ = task.instantiate(cfg)
    assert f"allocate C[float32 * {rows}, {L}]" in str(lt.lower(s, [A, B, D]))
    check_outputs(s, [A, B, D], lambda a, b: _mm(a, b).T)


@pytest.mark.slow
def test_conv_rows_are_the_channels_the_input_vector_is_reused_by():
    N, C, H, W, K = 1, 3, 7, 37, 12
    data = lt.placeholder((N, C, H, W), "float32", name="data")
    weight = lt.placeholder((K, C, 3, 3), "float32", name="weight")
    rc, ry, rx = (lt.reduce_axis(C, name="rc"), lt.reduce_axis(3, name="ry"),
                  lt.reduce_axis(3, name="rx"))
    out = lt.compute((N, K, H - 2, W - 2), lambda n, k, y, x: lt.sum(
        data[n, rc, y + ry, x + rx] * weight[k, rc, ry, rx], axis=[rc, ry, rx]), name="out")
    task = auto_task([data, weight, out])
    sp = task.config_space
    # rows: the channels that reuse each input vector; the 35 columns' tile is one vector
    # (two would waste more lanes, with 16, 8 or 4 of them), so the second vector comes from
    # the next input row: 2 rows
    assert sp.knobs["out.tile1"].values[0] > 1 and sp.knobs["out.tile2"].values[0] == 2
    assert sp.knobs["out.tile3"].values[0] == L
    assert "out.pack" not in sp.knobs or sp.knobs["out.pack"].values[0] == "none"

    def want(d, w):
        o = np.zeros((N, K, H - 2, W - 2))
        for dy in range(3):
            for dx in range(3):
                o += np.einsum("nchw,kc->nkhw", d[:, :, dy:dy + H - 2, dx:dx + W - 2],
                               w[:, :, dy, dx].astype(np.float64))
        return o
    for i in _configs(task, 2):
        check_outputs(task.instantiate(i)[0], [data, weight, out], want)


def test_tiles_follow_the_machine_and_the_task_name_says_which():
    A, B, C = _matmul(64, 256, 32)
    wide = auto_task([A, B, C], target="c -march=skylake-avx512 -threads=2")
    narrow = auto_task([A, B, C], target="c -march=haswell -threads=2")
    assert wide.name != narrow.name
    assert wide.config_space.knobs["C.tile1"].values[0] == 32
    assert narrow.config_space.knobs["C.tile1"].values[0] == 16
    # rows: 16 accumulators first with AVX-512 (8 x 2 vectors), and a tile of all 28
    # (14 rows) among the choices; AVX2 keeps 4 of its 16 registers for the operands (6 x 2:
    # 8 x 2 spilled there)
    assert machine_of("c -march=skylake-avx512").accumulators() == 28
    assert machine_of("c -march=haswell").accumulators() == 12
    rows = wide.config_space.knobs["C.tile0"].values
    assert rows[0] == 8 and 14 in rows
    assert narrow.config_space.knobs["C.tile0"].values[0] == 6
    s, _ = wide.instantiate(pick_config(wide.config_space, {"C.tile0": 14}))
    check_outputs(s, [A, B, C], _mm)
    assert machine_of("c -march=haswell -threads=3").threads == 3


# ---- the rfactor rule ------------------------------------------------------------------------

@pytest.mark.slow
def test_gemv_against_a_transposed_weight_is_rfactored_over_lanes():
    x = lt.placeholder((301,), "float32", name="x")
    W = lt.placeholder((23, 301), "float32", name="W")
    k = lt.reduce_axis(301, name="k")
    y = lt.compute((23,), lambda j: lt.sum(x[k] * W[j, k], axis=k), name="y")
    task = auto_task([x, W, y])
    assert task.config_space.knobs["y.lanes"].values[0] == L
    s, _ = task.instantiate(0)
    assert isinstance(s.stage("y.rf").attach, AttachAt)
    for i in _configs(task, 4):
        check_outputs(task.instantiate(i)[0], [x, W, y], lambda a, w: w.astype(np.float64) @ a)


@pytest.mark.slow
def test_row_norms_rfactor_and_column_sums_vectorize_across_columns():
    X = lt.placeholder((5, 203), "float32", name="X")
    k = lt.reduce_axis(203, name="k")
    rows = lt.compute((5,), lambda i: lt.sum(X[i, k] * X[i, k], axis=k), name="rows")
    task = auto_task([X, rows])
    assert task.config_space.knobs["rows.lanes"].values[0] == L
    for i in _configs(task, 4):
        check_outputs(task.instantiate(i)[0], [X, rows],
                      lambda a: (a.astype(np.float64) ** 2).sum(1))
    Y = lt.placeholder((203, 67), "float32", name="Y")
    r = lt.reduce_axis(203, name="r")
    cols = lt.compute((67,), lambda j: lt.sum(Y[r, j], axis=r), name="cols")
    task = auto_task([Y, cols])
    assert task.config_space.knobs["cols.lanes"].values[0] == 1
    assert task.config_space.knobs["cols.vec"].values[0] == "inner"
    for i in _configs(task, 4):
        check_outputs(task.instantiate(i)[0], [Y, cols], lambda a: a.astype(np.float64).sum(0))


@pytest.mark.slow
def test_a_global_sum_is_rfactored_at_root():
    X = lt.placeholder((3, 101), "float32", name="X")
    a, b = lt.reduce_axis(3, name="a"), lt.reduce_axis(101, name="b")
    tot = lt.compute((1,), lambda i: lt.sum(X[a, b], axis=[a, b]), name="tot")
    task = auto_task([X, tot])
    for i in _configs(task, 4):
        check_outputs(task.instantiate(i)[0], [X, tot],
                      lambda x: x.astype(np.float64).sum(keepdims=True).reshape(1))


# ---- the fallback's other choices ----------------------------------------------------------

def test_transposes_get_2d_tiles_and_rows_get_whole_vectors_in_the_fallback():
    X = lt.placeholder((67, 45), "float32", name="X")
    T = lt.compute((45, 67), lambda i, j: X[j, i], name="T")
    task = auto_task([X, T])
    assert task.config_space.knobs["T.rows"].values[0] == L
    assert task.config_space.knobs["T.width"].values[0] == L
    check_outputs(task.instantiate(0)[0], [X, T], lambda x: x.T)
    E = lt.compute((67, 45), lambda i, j: X[i, j] * 2.0, name="E")
    task = auto_task([X, E])
    assert task.config_space.knobs["E.rows"].values[0] == 1


@pytest.mark.slow
def test_softmax_fallback_is_fused_per_row_with_buffered_exponentials():
    X = lt.placeholder((7, 45), "float32", name="X")
    k1, k2 = lt.reduce_axis(45, name="k1"), lt.reduce_axis(45, name="k2")
    mx = lt.compute((7,), lambda i: lt.max(X[i, k1], axis=k1), name="mx")
    e = lt.compute((7, 45), lambda i, j: lt.exp(X[i, j] - mx[i]), name="e")
    sm = lt.compute((7,), lambda i: lt.sum(e[i, k2], axis=k2), name="sm")
    out = lt.compute((7, 45), lambda i, j: e[i, j] / sm[i], name="out")
    task = auto_task([X, out])
    s, _ = task.instantiate(0)
    attach = {st.name: type(st.attach) for st in s.stages}
    assert attach["e"] == attach["mx"] == attach["sm"] == AttachAt
    assert attach["mx.rf"] == attach["sm.rf"] == AttachAt

    def want(x):
        z = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
        return z / z.sum(1, keepdims=True)
    for i in _configs(task, 6):
        check_outputs(task.instantiate(i)[0], [X, out], want)


@pytest.mark.parametrize("N, M", [(7, 45 * 16), (3, 1000), (2, 130)])
def test_a_row_sum_may_fuse_its_partial_loop_into_the_exp_loop_exactly(N, M):
    """Knob ``<sum>.with``: the rfactored row sum's partial loop fused (compute_with) into
    the loop of the exponentials it sums, ``with`` columns a step; off, or without lanes, the
    knob is not read (one program, not several)."""
    from looptune.search.programs import canonical
    X = lt.placeholder((N, M), "float32", name="X")
    k1, k2 = lt.reduce_axis(M, name="k1"), lt.reduce_axis(M, name="k2")
    mx = lt.compute((N,), lambda i: lt.max(X[i, k1], axis=k1), name="mx")
    e = lt.compute((N, M), lambda i, j: lt.exp(X[i, j] - mx[i]), name="e")
    sm = lt.compute((N,), lambda i: lt.sum(e[i, k2], axis=k2), name="sm")
    out = lt.compute((N, M), lambda i, j: e[i, j] / sm[i], name="out")
    task = auto_task([X, out])
    sp = task.config_space
    chunks = sp.knobs["sm.with"].values
    assert chunks[:2] == [8 * L, 0] and set(chunks[2:]) <= {16 * L, 32 * L}
    assert all(c <= M for c in chunks)

    def want(x):
        z = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
        return z / z.sum(1, keepdims=True)
    row = {"e.inline": False, "e.at": "row", "sm.at": "row"}
    for chunk in [c for c in chunks if c]:
        for lanes in sp.knobs["sm.lanes"].values:
            cfg = pick_config(sp, {**row, "sm.with": chunk, "sm.lanes": lanes})
            s, _ = task.instantiate(cfg)
            fused = [x for x in s.steps if x.primitive == "compute_with"]
            assert len(fused) == (lanes > 1)
            if lanes > 1:
                assert (fused[0].stage, fused[0].parent) == ("sm.rf", "e")
            else:                      # nothing to fuse: the knob is not read
                assert canonical(task, cfg)[0].index == \
                    pick_config(sp, {**row, "sm.lanes": lanes, "sm.with": chunks[0]}).index
            check_outputs(s, [X, out], want)


def _row_softmax(N, M):
    X = lt.placeholder((N, M), "float32", name="X")
    k1, k2 = lt.reduce_axis(M, name="k1"), lt.reduce_axis(M, name="k2")
    mx = lt.compute((N,), lambda i: lt.max(X[i, k1], axis=k1), name="mx")
    e = lt.compute((N, M), lambda i, j: lt.exp(X[i, j] - mx[i]), name="e")
    sm = lt.compute((N,), lambda i: lt.sum(e[i, k2], axis=k2), name="sm")
    return X, lt.compute((N, M), lambda i, j: e[i, j] / sm[i], name="out")


def _softmax_ref(x):
    z = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    return z / z.sum(1, keepdims=True)


@pytest.mark.parametrize("N, M", [(9, 45 * 16), (5, 1000)])
def test_row_passes_prefetch_the_next_row_along_the_row_loop(N, M):
    """Knob ``<output>.ahead`` (on first, parallel rows only): the exp loop whose row sum is
    fused into it asks, each chunk, for its chunk of x ``ahead`` rows on (``along`` the row
    loop); without the fused loop, the first rfactored row reduction does; off or on one
    thread, no prefetch. Exact every way."""
    X, out = _row_softmax(N, M)
    task = auto_task([X, out], target="c -threads=2")
    sp = task.config_space
    assert sp.knobs["out.ahead"].values == [1, 0]
    row = {"e.inline": False, "e.at": "row", "sm.at": "row", "mx.at": "row", "parallel": True}
    fused = task.instantiate(pick_config(sp, row))[0]
    (step,) = [x for x in fused.steps if x.primitive == "prefetch"]
    assert (step.stage, step.tensor, step.offset, step.along) == ("e", "X", 1, "i")
    assert "prefetch X[" in str(lt.lower(fused, [X, out]))
    unfused = task.instantiate(pick_config(sp, {**row, "sm.with": 0}))[0]
    (step,) = [x for x in unfused.steps if x.primitive == "prefetch"]
    assert (step.stage, step.tensor, step.along) == ("mx.rf", "X", "i")
    off = task.instantiate(pick_config(sp, {**row, "out.ahead": 0}))[0]
    serial = task.instantiate(pick_config(sp, {**row, "parallel": False}))[0]
    assert [x for x in off.steps + serial.steps if x.primitive == "prefetch"] == []
    assert [str(x) for x in off.steps] == [str(x) for x in fused.steps
                                           if x.primitive != "prefetch"]
    for s in (fused, unfused, off, serial):
        check_outputs(s, [X, out], _softmax_ref)


def _padded_conv(N, C, H, W, K, stride, depthwise, relu):
    """A 3x3 conv (or depthwise conv) over a zero padding (pad 1) of ``data``; ``relu``: an
    epilogue after it. Returns the tensors and the float64 numpy reference."""
    data = lt.placeholder((N, C, H, W), "float32", name="data")
    wshape = (C, 3, 3) if depthwise else (K, C, 3, 3)
    weight = lt.placeholder(wshape, "float32", name="weight")
    pad = lt.compute((N, C, H + 2, W + 2), lambda n, c, y, x: lt.if_then_else(
        lt.all(y >= 1, y < H + 1, x >= 1, x < W + 1), data[n, c, y - 1, x - 1], 0.0),
        name="pad")
    OH, OW = (H - 1) // stride + 1, (W - 1) // stride + 1
    ry, rx = lt.reduce_axis(3, name="ry"), lt.reduce_axis(3, name="rx")
    if depthwise:
        out = lt.compute((N, C, OH, OW), lambda n, c, y, x: lt.sum(
            pad[n, c, y * stride + ry, x * stride + rx] * weight[c, ry, rx], axis=[ry, rx]),
            name="conv")
    else:
        rc = lt.reduce_axis(C, name="rc")
        out = lt.compute((N, K, OH, OW), lambda n, k, y, x: lt.sum(
            pad[n, rc, y * stride + ry, x * stride + rx] * weight[k, rc, ry, rx],
            axis=[rc, ry, rx]), name="conv")
    if relu:
        out = lt.compute(out.shape, lambda *i: lt.max(out[i], 0.0), name="relu")

    def want(d, w):
        dp = np.pad(d.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        o = 0.0
        for dy in range(3):
            for dx in range(3):
                win = dp[:, :, dy:dy + stride * (OH - 1) + 1:stride,
                         dx:dx + stride * (OW - 1) + 1:stride]
                o = o + (win * w[None, :, dy, dx, None, None] if depthwise else
                         np.einsum("nchw,kc->nkhw", win, w[:, :, dy, dx].astype(np.float64)))
        return np.maximum(o, 0.0) if relu else o
    return [data, weight, out], want


@pytest.mark.slow
@pytest.mark.parametrize("stride, depthwise, relu", [(1, True, False), (2, True, False),
                                                     (1, False, True), (2, False, False)])
def test_a_padding_may_be_computed_per_parallel_tile_of_the_conv_exactly(stride, depthwise,
                                                                         relu):
    """Knob ``pad.at``: the padding at root or per parallel iteration of the contraction
    that alone reads it, only the window that iteration reads (halo recomputed). A depthwise
    conv reads its own channel's padding, so that window is a few channels: "tile" first;
    a conv reads every channel per output channel: "root" first."""
    tensors, want = _padded_conv(1, 12, 29, 37, 20, stride, depthwise, relu)
    task = auto_task(tensors)
    sp = task.config_space
    assert sp.knobs["pad.at"].values == (["tile", "root"] if depthwise else ["root", "tile"])
    values = {"pad.inline": False, "pad.at": "tile"}
    if "parallel" in sp.knobs:
        values["parallel"] = True
    s, _ = task.instantiate(pick_config(sp, values))
    (pad_stage,) = [st for st in s.stages if st.name == "pad"]
    assert isinstance(pad_stage.attach, AttachAt)
    text = str(lt.lower(s, tensors))
    lines = [ln for ln in text.splitlines() if "allocate pad" in ln]
    assert lines and all(ln.startswith("    ") for ln in lines)   # in the conv's outer loop
    if "parallel" in sp.knobs:
        assert text.index("parallel") < text.index("allocate pad")
    check_outputs(s, tensors, want)
    check_outputs(task.instantiate(pick_config(sp, {"pad.inline": False, "pad.at": "root"}))[0],
                  tensors, want)
    picks = [c for c in sp.sample(40, 1) if not c["pad.inline"].val
             and c["pad.at"].val == "tile"][:4]
    assert picks
    for c in picks:
        check_outputs(task.instantiate(c.index)[0], tensors, want)



def _unrolled(s, stage: str) -> list[str]:
    return [st.loop for st in s.steps if type(st).__name__ == "Annotate"
            and st.kind.value == "unroll" and st.stage == stage]


@pytest.mark.slow
def test_a_register_tile_too_big_to_hold_is_unrolled_only_within_the_budget(monkeypatch):
    """Was: every row of a register tile and the micro-kernel steps were unrolled whatever
    their size: an (8 x 6 x 2-vector) tile times 16 steps took gcc 53 s to compile (the
    tuner's build timeout is 10 s). Rows are now unrolled innermost first while they hold at
    most UNROLL_VECTORS vectors, reduction steps while the body stays within UNROLL_BODY."""
    from looptune.search import auto_cpu
    from looptune.search.auto_rules import UNROLL_BODY, UNROLL_K, UNROLL_VECTORS
    tensors, want = _padded_conv(1, 12, 29, 37, 20, 1, False, True)
    task = auto_task(tensors)
    sp = task.config_space
    red = {"conv.red0": 4, "conv.red1": 3, "conv.red2": 3, "conv.order": "tile"}
    big = {k: max(v for v in sp.knobs[k].values if isinstance(v, int)) for k in
           ("conv.tile1", "conv.tile2")}
    # the widest column tile whose inner row alone holds (2 vectors of 16 lanes with AVX-512,
    # of 8 with AVX2: the widest tile, 4 vectors of 8, would not)
    big["conv.tile3"] = max(v for v in sp.knobs["conv.tile3"].values if isinstance(v, int)
                            and big["conv.tile2"] * -(-v // L) <= UNROLL_VECTORS)
    vectors = -(-big["conv.tile3"] // L)
    rows = big["conv.tile1"] * big["conv.tile2"]
    assert rows * vectors > UNROLL_VECTORS >= big["conv.tile2"] * vectors   # too big to hold
    for unroll in ("tile", "tile+k"):
        s, _ = task.instantiate(pick_config(sp, {**big, **red, "conv.unroll": unroll}))
        # the inner row alone, and no reduction step around a rolled row loop
        assert _unrolled(s, "conv") == ["y"]
        check_outputs(s, tensors, want)
    # a tile that fits: its rows whole, and the 3x3 window (9 steps, 36 vector operations;
    # times rc's 4 it would be 36 steps, over UNROLL_K)
    fit = {"conv.tile1": 2, "conv.tile2": 2, "conv.tile3": L}
    assert 4 * 9 <= UNROLL_BODY and 36 > UNROLL_K
    s, _ = task.instantiate(pick_config(sp, {**fit, **red, "conv.unroll": "tile+k"}))
    assert sorted(_unrolled(s, "conv")) == ["k", "rx.inner", "ry.inner", "y"]
    check_outputs(s, tensors, want)
    # a body budget that the window would pass: the steps stay loops (innermost first)
    monkeypatch.setattr(auto_cpu, "UNROLL_BODY", 4 * 3 - 1)
    s, _ = task.instantiate(pick_config(sp, {**fit, **red, "conv.unroll": "tile+k"}))
    assert sorted(_unrolled(s, "conv")) == ["k", "y"]
    monkeypatch.setattr(auto_cpu, "UNROLL_BODY", 4 * 3)
    s, _ = task.instantiate(pick_config(sp, {**fit, **red, "conv.unroll": "tile+k"}))
    assert sorted(_unrolled(s, "conv")) == ["k", "rx.inner", "y"]
    s, _ = task.instantiate(pick_config(sp, {**fit, **red, "conv.unroll": "tile"}))
    assert sorted(_unrolled(s, "conv")) == ["k", "y"]
    check_outputs(s, tensors, want)


def _max_pool(N, C, H, W, k, stride, pad):
    data = lt.placeholder((N, C, H, W), "float32", name="data")
    padded = lt.compute((N, C, H + 2 * pad, W + 2 * pad), lambda n, c, y, x: lt.if_then_else(
        lt.all(y >= pad, y < H + pad, x >= pad, x < W + pad), data[n, c, y - pad, x - pad],
        -np.inf), name="pad")
    OH, OW = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1
    ry, rx = lt.reduce_axis(k, name="ry"), lt.reduce_axis(k, name="rx")
    out = lt.compute((N, C, OH, OW), lambda n, c, y, x: lt.max(
        padded[n, c, y * stride + ry, x * stride + rx], axis=[ry, rx]), name="out")

    def want(d):
        dp = np.pad(d, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf)
        o = np.full((N, C, OH, OW), -np.inf, np.float32)
        for dy in range(k):
            for dx in range(k):
                o = np.maximum(o, dp[:, :, dy:dy + stride * (OH - 1) + 1:stride,
                                     dx:dx + stride * (OW - 1) + 1:stride])
        return o
    return [data, out], want


@pytest.mark.parametrize("shape", [(1, 5, 23, 37, 3, 2, 1), (2, 3, 40, 19, 2, 2, 1),
                                   (1, 4, 17, 150, 3, 1, 1)])
@pytest.mark.slow
def test_a_pooling_accumulates_rows_locally_with_its_padding_per_parallel_iteration(shape):
    """Was: a pooling's fallback inlined its padding (the guard tested at every window
    step) and reduced straight into the output (0.50 ms against the hand schedule's 0.15 on
    the ResNet stem's 3x3/2). Now the padding is kept and computed per parallel iteration of
    the pooling (knob pad.at, "tile" first) and the pooling accumulates a block of whole rows
    (when they are short) in a local buffer, its window outside the vector loop (knob
    out.cache, True first), as the hand schedule does; every choice exact."""
    N, C, H, W, k, stride, pad = shape
    tensors, want = _max_pool(N, C, H, W, k, stride, pad)
    task = auto_task(tensors)
    sp = task.config_space
    assert sp.knobs["pad.inline"].values[0] is False
    assert sp.knobs["pad.at"].values == ["tile", "root"]
    assert sp.knobs["out.cache"].values == [True, False]
    OW = extent(tensors[-1].op.axis[-1])
    assert sp.knobs["out.width"].values[0] == (OW if OW <= 4 * L else L)
    s, _ = task.instantiate(0)
    text = str(lt.lower(s, tensors))
    if "parallel" in text:
        par = text.index("parallel")
        assert par < text.index("allocate pad") and par < text.index("allocate out.local")
    check_outputs(s, tensors, want)
    for values in ({"pad.at": "root"}, {"out.cache": False}, {"out.rows": 2},
                   {"out.rows": 4, "out.width": L // 2}, {"parallel": False},
                   {"out.vec": "none"}, {"pad.inline": True}):
        values = {k: v for k, v in values.items() if k in sp.knobs}
        check_outputs(task.instantiate(pick_config(sp, values))[0], tensors, want)
    for c in sp.sample(6, 3):
        check_outputs(task.instantiate(c.index)[0], tensors, want)
