"""Every operator of examples/: hand schedule, template fallback and a few sampled configs are
exact against the numpy reference on small odd sizes (the defaults are benchmark sizes)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import looptune as lt
import numpy as np
import pytest
from looptune.backends.compiler import flags_for, predefined_macros
from looptune.operators import load_operators
from looptune.report import make_arrays
from looptune.search.space import FallbackConfig
from util import prefetches
from util import pick_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

SMALL = {
    "matmul": (13, 45, 7), "matmul_relu": (13, 45, 7), "batch_matmul": (2, 9, 37, 5),
    "conv2d": (1, 5, 9, 11, 6, 3, 3, 2, 1), "conv2d_nchwc": (1, 5, 9, 11, 18, 3, 3, 1, 1),
    "conv2d_winograd": (2, 5, 9, 11, 6, 3, 3, 1, 1),
    "depthwise_conv2d": (1, 5, 9, 11, 3, 3, 2, 1), "max_pool2d": (1, 3, 9, 11, 3, 3, 2, 1),
    "avg_pool2d": (1, 3, 9, 11, 2, 2, 2, 0), "softmax": (7, 37), "layernorm": (7, 37),
    "transpose": (13, 37), "blur": (11, 37),
}
OPS = [op for f in sorted(EXAMPLES.glob("*.py")) for op in load_operators(str(f))]


def test_every_operator_has_small_sizes():
    assert sorted(op.name for op in OPS) == sorted(SMALL)


def _run(op, args, s, tensors):
    inputs, outs, call_args = make_arrays(tensors, 3)
    for o in outs:
        o.fill(np.nan)
    lt.build(s, tensors)(*call_args)
    want = op.reference_for(args)(*inputs)
    for got, w in zip(outs, want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(got, w, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_template_fallback_is_the_hand_schedule(op):
    """The examples' docstrings promise that the template's fallback config (the first value of
    each knob) is the hand schedule: the same loop nest, at small sizes and at the defaults."""
    for args in (SMALL[op.name], tuple(op.default_args)):
        hand = lt.lower(*op.hand_schedule(*args))
        fallback = lt.lower(*op.template.func(FallbackConfig(), *args))
        assert str(fallback) == str(hand), f"{op.name}{args}"


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
@pytest.mark.slow
def test_hand_schedule_template_fallback_and_sampled_configs(op):
    args = SMALL[op.name]
    _run(op, args, *op.hand_schedule(*args))
    _run(op, args, *op.template.func(FallbackConfig(), *args))
    task = lt.search.create_task(op.name, args)
    for cfg in task.config_space.sample(min(3, len(task.config_space)), 7):
        try:
            s, tensors = task.instantiate(cfg)
        except lt.ScheduleError:
            continue
        _run(op, args, s, tensors)


@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64"])
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_hand_schedules_and_fallbacks_are_exact_sized_for_avx2(op, march, monkeypatch):
    """Under LOOPTUNE_MARCH=x86-64-v3 (AVX2) or x86-64 (SSE2: 4 lanes) every hand schedule
    sizes its tiles for the lanes and 16 registers (conv2d_nchwc: 3 x 2 positions at 56 x 56
    with AVX2) and stays exact; so does the template's fallback, still the hand schedule (the
    matmul template raised on AVX2 machines: its knob values repeated)."""
    from looptune.backends.compiler import predefined_macros
    try:
        predefined_macros("gcc", march)
    except lt.BuildError:
        pytest.skip("not an x86-64 gcc")
    monkeypatch.setenv("LOOPTUNE_MARCH", march)
    args = SMALL[op.name]
    _run(op, args, *op.hand_schedule(*args))
    hand = lt.lower(*op.hand_schedule(*args))
    assert str(lt.lower(*op.template.func(FallbackConfig(), *args))) == str(hand)


@pytest.mark.parametrize("march, want", [("x86-64-v4", (14, 1, 2)), ("x86-64-v3", (3, 2, 1))])
def test_nchwc_tile_fills_the_registers(march, want):
    """The register tile: the most useful accumulators that fit (the tile, a weight vector per
    block register and one broadcast), the widest of equals; for every layer shape."""
    conv2d = _example("conv2d")
    t = lt.Target.parse(f"c -march={march}")
    assert conv2d.nchwc_tile(1, 64, 56, 56, 64, 3, 3, 1, 1, target=str(t)) == want
    for shape in [(1, 64, 56, 56, 64, 3, 3, 1, 1), (1, 256, 14, 14, 256, 3, 3, 1, 1),
                  (1, 512, 7, 7, 512, 3, 3, 1, 1), (1, 3, 33, 17, 8, 3, 3, 2, 1),
                  (1, 8, 1, 1, 24, 1, 1, 1, 0)]:
        tx, ty, blocks = conv2d.nchwc_tile(*shape, target=str(t))
        per_pos = blocks * 16 // t.vector_lanes()
        assert tx * ty * per_pos + per_pos + 1 <= t.vector_registers(), (shape, tx, ty)
        OH, OW = conv2d._out_size(*shape[2:4], *shape[5:9])
        assert 1 <= tx <= OW and 1 <= ty <= OH


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
@pytest.mark.slow
def test_auto_schedule_space_is_exact(op):
    """lt.search.auto_task's generated space for the operator's algorithm: the fallback and
    sampled configs give valid schedules that match numpy."""
    args = SMALL[op.name]
    out = op.algorithm(*args)
    tensors = list(out) if isinstance(out, (list, tuple)) else [out]
    task = lt.search.auto_task(tensors)
    _run(op, args, *task.instantiate(0))
    for cfg in task.config_space.sample(min(3, len(task.config_space)), 11):
        _run(op, args, *task.instantiate(cfg))


def _example(name: str):
    (op, *_) = load_operators(str(EXAMPLES / f"{name}.py"))
    import sys
    return sys.modules[op.hand_schedule.__module__]


@pytest.mark.parametrize("target", ["c", "c -march=haswell"])
def test_matmul_blocking_fits_the_registers(target):
    """The micro-tile of examples/matmul.py: 2 * mr accumulators + 2 B vectors + a broadcast
    fit the target's registers (6 x 16 with AVX2's 16 ymm, 14 x 32 with AVX-512's 32 zmm)."""
    mm = _example("matmul")
    t = lt.Target.parse(target)
    b = mm.blocking(1024, 1024, 1024, target=target)
    assert b["nr"] == 2 * t.vector_lanes("float32")
    assert 2 * b["mr"] + 4 <= t.vector_registers() < 2 * (b["mr"] + 1) + 4   # no fewer rows
    assert b["kc"] * 4 * (b["mr"] + b["nr"]) <= t.cache_bytes(2) // 4 or b["kc"] <= 8


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("M", [50, 1024, 2048, 5000])
def test_matmul_blocking_keeps_b_blocks_within_a_share_of_l3(threads, M):
    """nc: every thread's columns in equal blocks whose packed B (kc x nc floats) stays within
    1/16 of L3 (a whole micro-panel at least): one thread at 1024^3 once packed all 4 MiB of B
    at once, 1.7x slower on a Zen 3 VM than two 2 MiB blocks."""
    mm = _example("matmul")
    target = f"c -threads={threads}"
    t = lt.Target.parse(target)
    b = mm.blocking(1024, M, 1024, target=target)
    assert b["nc"] % b["nr"] == 0
    assert b["kc"] * b["nc"] * 4 <= max(t.cache_bytes(3) // mm.B_BLOCK_L3_SHARE,
                                        b["kc"] * b["nr"] * 4)
    columns = -(-M // threads)                                # each thread's share
    per_thread = -(-columns // b["nr"]) * b["nr"]
    blocks = -(-per_thread // b["nc"])
    assert blocks * b["nc"] - per_thread < blocks * b["nr"]       # equal blocks, no thin tail
    if t.cache_bytes(3) // mm.B_BLOCK_L3_SHARE >= b["kc"] * per_thread * 4:
        assert blocks == 1                                    # no needless split


@pytest.mark.parametrize("march,kc,pack_a", [
    (m, k, p) for m in ("x86-64-v4", "haswell") for k in (1024, 256) for p in (True, False)
    if (m, k, p) != ("haswell", 1024, False)])     # spills 7 accumulators: see blocking()
def test_matmul_micro_kernel_keeps_its_accumulators_in_registers(march, kc, pack_a):
    """gcc's code for the micro-kernel of examples/matmul.py at the tile of AVX-512 (14 x 32)
    and of AVX2 (6 x 16), 1024^3 with fixed blockings (the host's caches would change them):
    the basic block with the most FMAs (the guarded tails of partial tiles may use memory)
    has 2 * mr FMAs a step of k, none reading or writing the stack (a spilled accumulator
    would). gcc keeps a tile that needs 15 of the 16 ymm registers fragilely: at 256^3 with
    nc = 128 it kept half the AVX2 tile in memory (not covered here); with A read in place
    (the template's pack_a False, no prefetch) it keeps them with -march=znver3 and at
    kc = 256 but spills 7 with -march=haswell at kc = 1024 (excluded: why the hand schedule
    packs A)."""
    try:
        predefined_macros("gcc", march)
    except lt.BuildError:
        pytest.skip(f"this gcc does not target -march={march}")
    mm = _example("matmul")
    target = f"c -march={march}"
    t = lt.Target.parse(target)
    mr, nr = t.gemm_tile()
    s, tensors = mm._schedule(1024, 1024, 1024, "float32", mr, nr, kc, 80 // mr * mr, 512,
                              prefetch=2048 // (4 * nr) if pack_a else 0, pack_a=pack_a)
    src = lt.build(s, tensors, target=target).source
    asm = subprocess.run(["gcc", *flags_for(t.options, parallel=True), "-S", "-o", "-", "-x",
                          "c", "-"], input=src, capture_output=True, text=True,
                         check=True).stdout
    blocks, block = [], []
    for ln in asm.splitlines():
        if ln.startswith(".L") or "\tj" in ln:       # a label or a jump ends a block
            blocks.append(block)
            block = []
        elif "vfmadd" in ln:
            block.append(ln)
    fmas = max(blocks + [block], key=len)
    assert len(fmas) >= 2 * mr
    assert not [ln for ln in fmas if "(%rsp)" in ln or "(%rbp)" in ln]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["c", "c -march=haswell"])
def test_matmul_micro_kernel_prefetches_its_b_panel_2_kib_ahead(target):
    """The hand schedule (A packed) asks for the B micro-panel's row ``prefetch`` steps of k
    ahead, 2 KiB of the panel (16 rows of 32 floats with AVX-512, 32 of 16 with AVX2); the
    template's ``prefetch_scale`` 0 builds the same kernel without it, and its ``pack_a``
    False reads A in place with no prefetch (gcc spilled an accumulator with one); exact
    either way."""
    mm = _example("matmul")
    b = mm.blocking(1024, 1024, 1024, target=target)
    assert b["pack_a"] and b["prefetch"] * b["nr"] * 4 == 2048
    s, tensors = mm.hand_schedule(40, 70, 50, target=target)
    (step,) = [x for x in s.steps if x.primitive == "prefetch"]
    assert (step.stage, step.tensor, step.loop) == ("partial", "B_packed", "ki")
    assert step.offset == min(b["prefetch"], 50) and step.bound == "nonfaulting"
    src = lt.build(s, tensors, target=target).source
    assert prefetches(src, "B_packed") and not prefetches(src, "A_packed")
    task = lt.search.create_task("matmul", (40, 70, 50))
    space = task.config_space
    s0, _ = task.instantiate(pick_config(space, {"prefetch_scale": 0}))
    assert [x.primitive for x in s0.steps if x.primitive == "prefetch"] == []
    hand = mm.hand_schedule(40, 70, 50)[0].steps             # the template's target: "c"
    assert [str(x) for x in s0.steps] == [str(x) for x in hand if x.primitive != "prefetch"]
    fallback, _ = task.instantiate(space.get(0))
    assert [str(x) for x in fallback.steps] == [str(x) for x in hand]
    inplace, args = task.instantiate(pick_config(space, {"pack_a": False}))
    src = lt.build(inplace, args).source
    assert "A_packed" not in src and "prefetch" not in src


@pytest.mark.parametrize("pack_a", [True, False])
@pytest.mark.parametrize("shape", [(37, 53, 2501), (13, 17, 40), (70, 50, 1)])
def test_matmul_packed_or_in_place_a_is_exact(pack_a, shape):
    """A packed or read in place, K blocks that overhang K (2501 = 2 x 1251 - 1) included."""
    mm = _example("matmul")
    N, M, K = shape
    b = mm.blocking(N, M, K)
    s, tensors = mm._schedule(N, M, K, "float32", b["mr"], b["nr"], b["kc"], b["mc"], b["nc"],
                              pack_a=pack_a)
    rng = np.random.default_rng(0)
    a, w = rng.random((N, K), dtype=np.float32), rng.random((K, M), dtype=np.float32)
    c = np.full((N, M), np.nan, np.float32)
    lt.build(s, tensors)(a, w, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sizes", [(37, 45, 70), (9, 100, 33), (1, 1, 1)])
@pytest.mark.parametrize("blk", [{"mr": 8, "nr": 32, "kc": 16, "mc": 16, "nc": 32},
                                 {"mr": 6, "nr": 16, "kc": 70, "mc": 12, "nc": 48},
                                 {"mr": 3, "nr": 8, "kc": 7, "mc": 9, "nc": 8}])
@pytest.mark.slow
def test_matmul_k_blocked_packed_schedule_is_exact(sizes, blk):
    """K blocks (kc not dividing K), packed panels zero-padded on every side, tiles with
    tails: C matches numpy (C's outputs start as NaN)."""
    mm = _example("matmul")
    s, tensors = mm._schedule(*sizes, "float32", **blk)
    N, M, K = sizes
    rng = np.random.default_rng(5)
    a, b = rng.random((N, K), dtype=np.float32), rng.random((K, M), dtype=np.float32)
    c = np.full((N, M), np.nan, np.float32)
    lt.build(s, tensors)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_matmul_hand_schedule_for_avx2_is_exact():
    mm = _example("matmul")
    s, tensors = mm.hand_schedule(13, 45, 7, target="c -march=haswell")
    rng = np.random.default_rng(6)
    a, b = rng.random((13, 7), dtype=np.float32), rng.random((7, 45), dtype=np.float32)
    c = np.full((13, 45), np.nan, np.float32)
    lt.build(s, tensors, target="c -march=haswell")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("N, M, lanes, rows, fuse", [
    (7, 37, 8, 1, 128), (3, 1000, 32, 2, 256), (4, 1024, 16, 1, 512), (2, 130, 64, 8, 128),
    (7, 37, 8, 8, 128)])
def test_softmax_with_the_row_sum_fused_into_the_exp_loop_is_exact(N, M, lanes, rows, fuse):
    """The template's knob ``fuse``: the sum's partial loop computed with the exp loop (rows
    per parallel iteration with a tail: the fused loops' extents are equal only once the
    simplifier sees through bound inference's min/max)."""
    sm = _example("softmax")
    s, tensors = sm._schedule(N, M, "float32", lanes, rows, True, False, fuse)
    assert any(x.primitive == "compute_with" for x in s.steps)
    x = np.random.default_rng(2).standard_normal((N, M)).astype(np.float32) * 4
    out = np.full_like(x, np.nan)
    lt.build(s, tensors)(x, out)
    np.testing.assert_allclose(out, sm.reference(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cols", [None, 16, 53])
@pytest.mark.parametrize("stream", [False, True])
def test_blur_slide_schedule_is_exact(cols, stream):
    """examples/blur.py's sliding-window schedule (strips, or tiles of ``cols`` columns):
    blur_x stored per strip (store_at), bit for bit the float32 reference."""
    blur = _example("blur")
    s, tensors = blur.slide_schedule(37, 53, rows=8, cols=cols, stream=stream)
    assert [x.primitive for x in s.steps].count("store_at") == 1
    img = np.random.default_rng(0).random((39, 55), dtype=np.float32)
    out = np.full((37, 53), np.nan, np.float32)
    lt.build(s, tensors)(img, out)
    np.testing.assert_array_equal(out, blur.reference(img))
