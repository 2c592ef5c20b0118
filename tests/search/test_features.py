"""Loop-nest features: values checked by hand on small nests, shape, speed, invalid configs."""
from __future__ import annotations

import os
import sys
import time

import numpy as np

import looptune as lt
from looptune.search import create_task
from looptune.search.features import (N_FEATURES, config_features, feature_names,
                                      loop_nest_features)

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _raw(vec) -> dict[str, float]:
    """Features by name, log2(1 + x) sizes turned back into x."""
    out = {}
    for name, v in zip(feature_names(), vec):
        logged = name.split(".")[-1] in ("iters", "work_flops", "par_extent", "work_per_par_iter",
                                         "unroll_left", "alloc_live", "buf_bytes", "extent",
                                         "stride_inner", "bytes", "reuse", "total_flops",
                                         "alloc_total", "alloc_max")
        out[name] = round(2.0 ** v - 1.0, 6) if logged and v >= 0 else v
    return out


def _matmul(N=4, M=8, K=16):
    A = lt.placeholder((N, K), "float32", name="A")
    B = lt.placeholder((K, M), "float32", name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def test_small_matmul_by_hand():
    # for i < 4:
    #   for j < 8 vectorized: C[i, j] = 0
    #   for k < 16:
    #     for j < 8 vectorized: C[i, j] = C[i, j] + A[i, k] * B[k, j]
    A, B, C = _matmul()
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    s[C].reorder(i, k, j)
    s[C].vectorize(j)
    f = _raw(loop_nest_features(lt.lower(s, [A, B, C])))
    # statement 0 is the update (most work): 4 * 16 * 8 iterations, a mul and an add each
    assert f["s0.n_loops"] == 3 and f["s0.iters"] == 512 and f["s0.copies"] == 1
    assert f["s0.fops"] == 2 and f["s0.work_flops"] == 1024 and f["s0.accumulate"] == 1
    assert f["s0.vec_len"] == 8 and f["s0.vec_innermost"] == 1
    assert f["s0.par_extent"] == 0 and f["s0.par_depth"] == -1
    assert [f[f"s0.l{lv}.extent"] for lv in range(4)] == [8, 16, 4, 0]
    assert [f[f"s0.l{lv}.kind"] for lv in range(4)] == [2, 0, 0, -1]   # vec, serial, -, none
    # the stored C[i, j]: contiguous along j; 8 floats inside j, the same 8 inside (k, j)
    # (each reused 16 times), all 32 inside (i, k, j)
    assert f["s0.store.stride_inner"] == 1 and f["s0.store.stride_vec"] == 1
    assert f["s0.store.buf_bytes"] == 128 and f["s0.store.local"] == 0
    assert [f[f"s0.store.l{lv}.bytes"] for lv in range(3)] == [32, 32, 128]
    assert [f[f"s0.store.l{lv}.reuse"] for lv in range(3)] == [1, 16, 16]
    # A[i, k]: the same element for all j (reuse 8 at level 0, stride 0), 16 floats along k
    assert f["s0.load0.stride_inner"] == 0 and f["s0.load0.reuse_depth"] == 1
    assert [f[f"s0.load0.l{lv}.bytes"] for lv in range(3)] == [4, 64, 256]
    assert [f[f"s0.load0.l{lv}.reuse"] for lv in range(3)] == [8, 8, 8]
    # B[k, j]: a row of 8 inside j, all 16 x 8 inside (k, j), reused by the 4 values of i
    assert f["s0.load1.stride_inner"] == 1 and f["s0.load1.reuse_depth"] == 0
    assert [f[f"s0.load1.l{lv}.bytes"] for lv in range(3)] == [32, 512, 512]
    assert [f[f"s0.load1.l{lv}.reuse"] for lv in range(3)] == [1, 1, 4]
    # past the outermost loop, a level repeats the whole nest's values
    assert f["s0.load1.l5.bytes"] == 512 and f["s0.load1.l5.reuse"] == 4
    # statement 1 is the init: 4 x 8 iterations, no arithmetic; no third statement
    assert f["s1.iters"] == 32 and f["s1.fops"] == 0 and f["s1.accumulate"] == 0
    assert f["s2.store.present"] == 0 and f["s2.n_loops"] == 0
    assert f["g.n_stores"] == 2 and f["g.total_flops"] == 1024 and f["g.frac_vec"] == 1
    assert f["g.frac_par"] == 0 and f["g.alloc_total"] == 0


def test_unrolled_copies_parallel_loops_and_local_buffers():
    # a 2-row register tile accumulated in a local buffer, rows unrolled, tiles in parallel:
    # for i.outer < 2 parallel:
    #   allocate C.local[2, 8]
    #   (2 unrolled copies) for j < 8 vec: C.local[r, j] = 0
    #   for k < 16: (2 unrolled copies) for j < 8 vec: C.local[r, j] += A[2*io + r, k] * B[k, j]
    #   for i.inner < 2: for j < 8 vec: C[...] = C.local[...]
    A, B, C = _matmul()
    s = lt.create_schedule(C)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=2)
    s[C].reorder(io, ii, j)
    s[C].parallel(io)
    s[C].vectorize(j)
    s[CC].compute_at(s[C], io)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    s[CC].reorder(ck, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    f = _raw(loop_nest_features(lt.lower(s, [A, B, C])))
    assert f["s0.copies"] == 2 and f["s0.store_local"] == 1 and f["s0.accumulate"] == 1
    assert f["s0.iters"] == 2 * 16 * 8 and f["s0.work_flops"] == 2 * 16 * 8 * 2 * 2
    assert f["s0.par_extent"] == 2 and f["s0.par_depth"] == 0
    assert f["s0.work_per_par_iter"] == 16 * 8 * 2
    assert f["s0.alloc_live"] == 2 * 8 * 4 and f["s0.store.buf_bytes"] == 64
    assert f["s0.store.local"] == 1 and f["s0.load0.local"] == 0       # C.local; A global
    assert f["g.alloc_total"] == 64 and f["g.alloc_max"] == 64 and f["g.frac_par"] == 1
    assert f["g.n_par_loops"] == 1
    assert f["g.n_stores"] == 2 + 2 + 1          # init and update copies, the write-back


def test_tail_loops_use_their_largest_extent():
    A, B, C = _matmul(N=10)
    s = lt.create_schedule(C)
    i, _ = s[C].op.axis
    s[C].split(i, factor=4)                      # 10 = 3 x 4 with a guarded tail
    f = _raw(loop_nest_features(lt.lower(s, [A, B, C])))
    assert f["s0.iters"] == 3 * 4 * 8 * 16
    assert np.isfinite(loop_nest_features(lt.lower(s, [A, B, C]))).all()


def test_vectors_have_one_length_and_unique_names(tmp_path):
    names = feature_names()
    assert len(names) == len(set(names)) == N_FEATURES
    mm = create_task("test_matmul", (16, 16, 16))
    rng = np.random.default_rng(0)
    vecs = [config_features(mm, i) for i in mm.config_space.sample(5, rng)]
    assert all(v.shape == (N_FEATURES,) and np.isfinite(v).all() for v in vecs)
    assert len({v.tobytes() for v in vecs}) == 5        # different configs, different nests


def test_invalid_config_gives_none():
    task = create_task("test_faulty", (8,))
    sp = task.config_space
    invalid = next(c for c in sp if c["mode"].val == "invalid")
    ok = next(c for c in sp if c["mode"].val == "ok")
    assert config_features(task, invalid) is None
    assert config_features(task, ok).shape == (N_FEATURES,)


def test_extraction_is_fast_on_the_example_matmul():
    sys.path.insert(0, EXAMPLES)
    try:
        import matmul
    finally:
        sys.path.remove(EXAMPLES)
    s, args = matmul.hand_schedule(512, 512, 512)
    func = lt.lower(s, args)
    loop_nest_features(func)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        loop_nest_features(func)
        times.append(time.perf_counter() - t0)
    # ~0.2 ms on an idle machine; the bound leaves room for a loaded shared one
    assert np.median(times) < 5e-3


def test_features_without_ir_unrolling_match_the_unrolled_nest():
    """config_features lowers with unroll=False (half the time) and counts unrolled loops as
    copies itself: every feature equals the one of the unrolled nest but two counts that
    constant folding can lower in the unrolled nest's first copy: integer ops (index
    arithmetic of the unrolled variable) and guards (a tail guard true for that copy)."""
    names = feature_names()
    keep = np.array([not n.endswith((".iops", ".guards")) for n in names])
    for n_, m_, k_, fi, fj, fk, where in [(10, 24, 16, 4, 8, 4, "ii"), (13, 17, 9, 3, 8, 2, "ki"),
                                          (8, 64, 32, 2, 16, 8, "both"), (7, 9, 5, 2, 4, 5, "ii")]:
        A, B, C = _matmul(n_, m_, k_)
        s = lt.create_schedule(C)
        CC = s.cache_write(C, "local")
        i, j = s[C].op.axis
        io, jo, ii, ji = s[C].tile(i, j, fi, fj)
        s[C].parallel(io)
        s[C].vectorize(ji)
        s[CC].compute_at(s[C], jo)
        ci, cj = s[CC].op.axis
        (ck,) = s[CC].op.reduce_axis
        ko, ki = s[CC].split(ck, factor=fk)
        s[CC].reorder(ko, ci, ki, cj)
        s[CC].vectorize(cj)
        if where in ("ii", "both"):
            s[CC].unroll(ci)
        if where in ("ki", "both"):
            s[CC].unroll(ki)
        full = loop_nest_features(lt.lower(s, [A, B, C]))
        fast = loop_nest_features(lt.lower(s, [A, B, C], unroll=False))
        diff = [(nm, a, b) for nm, a, b, k in zip(names, full, fast, keep)
                if k and not np.isclose(a, b)]
        assert not diff, (n_, m_, k_, where, diff)
        raw = _raw(fast)
        assert max(raw[f"s{k}.copies"] for k in range(3)) > 1   # unrolled copies counted


def test_a_streamed_loop_is_a_simd_loop_with_its_own_kind_code():
    """Every loop kind has a code; a streamed innermost loop counts as the vector loop (its
    length, innermost) and differs from a vectorized one only in the loop's kind code."""
    from looptune.schedule.stmt import ForKind
    from looptune.search.features import _KIND_CODE
    assert set(_KIND_CODE) == set(ForKind)
    A = lt.placeholder((6, 32), "float32", name="A")
    B = lt.compute((6, 32), lambda i, j: A[i, j] * 2.0, name="B")
    feats = []
    for how in ("vectorize", "stream"):
        s = lt.create_schedule(B)
        getattr(s[B], how)(s[B].op.axis[1])
        feats.append(_raw(loop_nest_features(lt.lower(s, [A, B]))))
    vec, streamed = feats
    assert streamed["s0.vec_len"] == vec["s0.vec_len"] == 32
    assert streamed["s0.vec_innermost"] == vec["s0.vec_innermost"] == 1
    differ = {k for k in vec if vec[k] != streamed[k]}
    assert differ and all(k.endswith(".kind") for k in differ), differ


@lt.search.template("test_features_shared_tiles")
def _shared_tiles_template(cfg, N, M, K):
    import util
    w = util.matmul(N, M, K)
    return util.shared_tiles(w), w.args


def test_features_see_the_loop_nest_the_target_compiles():
    """An OpenCL task's features come from the nest OpenCL compiles: its work-group region
    (threads beside the tiles they share) kept whole, as build keeps it, not the split
    nest a C lowering would give."""
    from looptune.backends.opencl_barriers import REGION_HOOK
    task = create_task("test_features_shared_tiles", (37, 53, 29), target="opencl")
    s, args = task.instantiate(0)
    kept = loop_nest_features(lt.lower(s, args, unroll=False, region_hook=REGION_HOOK))
    split = loop_nest_features(lt.lower(s, args, unroll=False))
    got = config_features(task, 0)
    assert np.array_equal(got, kept) and not np.array_equal(got, split)
