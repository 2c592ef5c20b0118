"""Matrix multiply C = A @ B (float32).

Hand schedule: GotoBLAS's loop nest, with every size taken from the machine. The algorithm
packs A into row panels ``A_packed[i / mr, k, i % mr]`` and B into column panels
``B_packed[j / nr, k, j % nr]`` (zero-padded to whole panels), so the micro-kernel reads both
operands contiguously; the reduction is split into blocks of ``kc``: ``partial[ko, i, j]``
sums one block, and C sums the blocks (K-blocking). Loops, outer to inner:

    jc (nc columns, parallel) > ko (kc) > [pack B block kc x nc] > ic (mc rows)
      > [pack A block mc x kc] > jr (nr) > ir (mr) > micro-kernel: partial tile mr x nr
        over kc (rows unrolled, columns vectorized) > C tile += partial tile

Sizes (``blocking``): the micro-tile is ``mr`` rows x two vectors (``nr = 2 *
Target.vector_lanes``) with ``mr`` from the register count (``Target.vector_registers``):
2 * mr accumulators + 2 B vectors + a broadcast must fit: 14 x 32 on AVX-512 (32 zmm), 6 x 16
on AVX2 (16 ymm; 8 x 16 spilled: 37.5 vs 23.9 ms for 1024^3, one thread, -march=haswell on a
Zen 4). With AVX-512 the tile had 8 rows until 2026-12-02: 16 accumulators, 10 loads per 16
FMAs; 14 rows (28 accumulators, 16 loads per 28 FMAs): 17.05 -> 15.47 ms for 1024^3 on one
Ice Lake core (2-core Xeon VM, model 106; median of 20 interleaved blocks; torch 13.0-15.2).
On a 2-core Zen 4 (AMD EPYC, family 25 model 17, AVX-512 on 256-bit units) 8 rows won: a
48-trial GBT tune of the template, 1024^3, two threads, had only 8-row configs among its
fastest (9.92 ms, ``mr=8``, A in place; the best 14-row one 11.5), and fresh processes,
7 shuffled rounds: 10.12 ms tuned against 10.74 for the hand schedule; ``mr`` is a knob.
``kc`` keeps an A and a B micro-panel within a quarter of L2 (``Target.cache_bytes``),
``mc`` an A block (mc x kc) within a quarter of L2; nc splits the columns among the threads,
in equal blocks whose packed B (kc x nc) stays within a sixteenth of L3 (``B_BLOCK_L3_SHARE``):
every A block streams the whole B block from L3, and a VM shares its L3 with the host's
other cores (our reading of the figures below; 2 MiB pages for the buffers did not change
them, so not the TLB). On a 2-core Zen 3 VM (AMD EPYC, family 25 model 1, AVX2, 32 MiB L3 reported),
one thread, median of 5 interleaved rounds: 1024^3 with nc = 1024 (a 4 MiB B block, the
rule until 2026-12-02) 62.7-65.5 ms, nc = 512 (2 MiB) 37.3-37.9; 2048^3 nc = 2048 (8 MiB)
394 ms, 1024 307, 512 306. Two threads at 1024^3 already had 512 columns each.
With 1 MiB of L2, kc = K up to 1638: at 1024^3 one K block measured fastest (kc 1024: 21.6 ms,
512: 22.8, 256: 24.9 on one Zen 4 core, CPU time), K blocks start for larger K or smaller L2.
Full tiles get constant extents (tails are guarded), so the kernel is exact for any size.

Prefetch: at each step of k the micro-kernel asks the caches for the B micro-panel's row
``prefetch`` steps ahead (``s[partial].prefetch(B_packed, ki, d)``, ``PREFETCH_BYTES`` = 2 KiB
of the panel ahead: d = 16 with 32 floats a row, 32 with 16). The panel (kc x nr, 128 KiB at
kc = 1024) streams from L2 or beyond faster than the hardware prefetchers follow. Measured
paired in one process, 1024^3, on a 2-core Xeon (Emerald Rapids, AVX-512), median of 30
interleaved calls: one thread 14.78 -> 14.47 ms (d = 16; 8: 14.45), two threads 10.90 ->
10.10 ms; prefetching the A panel too was no better (14.46 one thread) and slower on two
threads (11.33). The template's ``prefetch_scale`` knob lets a tune choose (0: none).
The prefetch is ``bound="nonfaulting"``: its address has no ``min(ki + d, kc - 1)`` (the last
d steps ask for the next panel's first rows). Clamped, the address cost the AVX2 tile (12 FMAs
a step) five integer instructions a step: on a 2-core Zen 3 VM (AMD EPYC, family 25, AVX2),
1024^3, one thread, interleaved blocks: 35.4 ms clamped, 31.9 unclamped, 31.5 without. On two
threads there the prefetch still costs 6% (17.4 against 16.5 ms; the Xeon gained 8%), so a
tune on such a machine picks ``prefetch_scale`` 0.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

NAME = "matmul"
DEFAULT_ARGS = (1024, 1024, 1024)


def algorithm(N: int, M: int, K: int, dtype: str = "float32"):
    """A (N,K) @ B (K,M) -> C (N,M). Returns [A, B, C]."""
    A = lt.placeholder((N, K), dtype, name="A")
    B = lt.placeholder((K, M), dtype, name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def packed_algorithm(N: int, M: int, K: int, mr: int, nr: int, kc: int,
                     dtype: str = "float32", pack_a: bool = True):
    """A @ B through packed, zero-padded panels and K blocks of ``kc``; returns the tensors
    [A, B, A_packed, B_packed, partial, C]. ``pack_a=False``: the micro-kernel broadcasts A
    from its rows in place (A_packed is None; partial has N rows, the tail tile guarded)."""
    A = lt.placeholder((N, K), dtype, name="A")
    B = lt.placeholder((K, M), dtype, name="B")
    NB, MB, KB = _ceil(N, mr), _ceil(M, nr), _ceil(K, kc)
    Bp = lt.compute((MB, KB * kc, nr), lambda jo, k, ji: lt.if_then_else(
        lt.all(jo * nr + ji < M, k < K), B[k, jo * nr + ji], 0.0), name="B_packed")
    ki = lt.reduce_axis(kc, name="ki")
    if pack_a:
        Ap = lt.compute((NB, KB * kc, mr), lambda io, k, ii: lt.if_then_else(
            lt.all(io * mr + ii < N, k < K), A[io * mr + ii, k], 0.0), name="A_packed")
        P = lt.compute((KB, NB * mr, MB * nr), lambda ko, i, j: lt.sum(
            Ap[i // mr, ko * kc + ki, i % mr] * Bp[j // nr, ko * kc + ki, j % nr], axis=ki),
            name="partial")
    else:
        Ap = None

        def a_at(i, k):      # A in place; zero past K where the K blocks overhang it
            return A[i, k] if KB * kc == K else lt.if_then_else(k < K, A[i, lt.min(k, K - 1)],
                                                                0.0)
        P = lt.compute((KB, N, MB * nr), lambda ko, i, j: lt.sum(
            a_at(i, ko * kc + ki) * Bp[j // nr, ko * kc + ki, j % nr], axis=ki),
            name="partial")
    if KB == 1:   # one K block: C is the partial sum itself (no zeroing and adding of C)
        C = lt.compute((N, M), lambda i, j: P[0, i, j], name="C")
    else:
        ko = lt.reduce_axis(KB, name="ko")
        C = lt.compute((N, M), lambda i, j: lt.sum(P[ko, i, j], axis=ko), name="C")
    return [A, B, Ap, Bp, P, C]


PREFETCH_BYTES = 2048   # how far ahead the micro-kernel asks for its B panel (see the doc)
B_BLOCK_L3_SHARE = 16   # a packed B block (kc x nc) within 1/16 of L3 (see the doc)


def blocking(N: int, M: int, K: int, dtype: str = "float32", target: str = "c") -> dict:
    """The hand schedule's sizes for this machine: mr, nr, kc, mc, nc, the prefetch
    distance in rows of k (see the module doc) and ``pack_a`` (True: A packed).

    The template's knob ``pack_a`` offers A read in place instead (each step of k
    broadcasts mr values from mr rows of A): nothing is spent packing A, which every thread
    otherwise does for all of A (the threads split the columns). On a 2-core Zen 3 VM (AMD
    EPYC, family 25, AVX2), 1024^3, paired with numpy's OpenBLAS sgemm call by call in one
    process (25 pairs), in place took 1.035-1.08x numpy's time on one thread and 1.05x on
    two, packed 1.16-1.18x (with the clamped B prefetch; without a prefetch, or unclamped
    on one thread, packed and in place ran alike: 29.5-30.0 against 29.7 ms one thread,
    15.6 against 15.7 two). In place has no B prefetch: with the clamped one gcc spilled
    one of the 12 accumulators (15 of the 16 ymm registers in use) and the kernel ran 2.6x
    slower, unclamped it is still 7% (one thread) to 24% (two) slower; and built with
    -march=haswell (not with znver3) gcc spills 7 of the 12 FMAs' accumulators at kc = 1024
    even without it, so the hand schedule keeps A packed and a tune decides."""
    t = lt.Target.parse(target)
    item = np.dtype(dtype).itemsize
    mr, nr = t.gemm_tile(dtype)
    l2 = t.cache_bytes(2)
    kmax = max(8, l2 // 4 // (item * (mr + nr)))
    kc = _ceil(K, _ceil(K, kmax))            # equal blocks of at most kmax
    mc = max(mr, l2 // 4 // (item * kc) // mr * mr)
    per_thread = max(nr, _ceil(_ceil(M, t.threads()), nr) * nr)
    nc_max = max(nr, t.cache_bytes(3) // B_BLOCK_L3_SHARE // (item * kc) // nr * nr)
    blocks = _ceil(per_thread, nc_max)        # equal column blocks of at most nc_max
    nc = _ceil(_ceil(per_thread, blocks), nr) * nr
    prefetch = max(4, PREFETCH_BYTES // (nr * item))
    return {"mr": mr, "nr": nr, "kc": kc, "mc": min(mc, _ceil(N, mr) * mr), "nc": nc,
            "prefetch": min(prefetch, kc), "pack_a": True}


def _schedule(N, M, K, dtype, mr, nr, kc, mc, nc, prefetch=0,
              prefetch_tensors=("B_packed",), pack_a=True):
    A, B, Ap, Bp, P, C = packed_algorithm(N, M, K, mr, nr, kc, dtype, pack_a)
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    ko = s[C].op.reduce_axis        # (ko,) or () for a single K block
    jc, j1 = s[C].split(j, factor=nc)
    jr, ji = s[C].split(j1, factor=nr)
    ic, i1 = s[C].split(i, factor=mc)
    ir, ii = s[C].split(i1, factor=mr)
    s[C].reorder(jc, *ko, ic, jr, ir, ii, ji)
    s[C].parallel(jc)
    s[C].vectorize(ji)
    s[C].unroll(ii)
    s[P].compute_at(s[C], ir)             # the micro-kernel
    _, pi, pj = s[P].op.axis
    (pk,) = s[P].op.reduce_axis
    s[P].reorder(pk, pi, pj)
    s[P].unroll(pi)
    s[P].vectorize(pj)
    for name in prefetch_tensors if prefetch else ():  # the panels, `prefetch` rows of k ahead
        s[P].prefetch(s.tensor(name), pk, prefetch, bound="nonfaulting")   # no min: see doc
    s[Bp].compute_at(s[C], ko[0] if ko else jc)   # a kc x nc block of B, per thread
    s[Bp].vectorize(s[Bp].op.axis[2])
    if Ap is not None:
        s[Ap].compute_at(s[C], ic)        # an mc x kc block of A
        s[Ap].unroll(s[Ap].op.axis[2])
    return s, [A, B, C]


def hand_schedule(N: int, M: int, K: int, dtype: str = "float32", target: str = "c"):
    return _schedule(N, M, K, dtype, **blocking(N, M, K, dtype, target))


@lt.template(NAME)
def template(cfg, N: int, M: int, K: int, dtype: str = "float32"):
    """The hand schedule with its blocking as knobs, each a factor of the machine's size
    (rows of the micro-tile, kc, mc, nc, the prefetch distance; 0: none), and whether A is
    packed; the fallback config (the first value of each knob) is the hand schedule."""
    b = blocking(N, M, K, dtype)
    cfg.define_knob("mr", list(dict.fromkeys([b["mr"], 8, 12, 6, 4])))   # 6 first on AVX2
    cfg.define_knob("kc_scale", [1, 0.5, 0.25, 2])
    cfg.define_knob("mc_scale", [1, 0.5, 2, 4])
    cfg.define_knob("nc_scale", [1, 0.5, 0.25, 2])
    cfg.define_knob("prefetch_scale", [1, 0, 0.5, 2])
    cfg.define_knob("pack_a", [b["pack_a"], not b["pack_a"]])
    mr = cfg["mr"].val
    kc = max(min(8, K), min(K, int(b["kc"] * cfg["kc_scale"].val)))
    mc = min(max(mr, int(b["mc"] * cfg["mc_scale"].val) // mr * mr), _ceil(N, mr) * mr)
    nc = max(b["nr"], int(b["nc"] * cfg["nc_scale"].val) // b["nr"] * b["nr"])
    packed = cfg["pack_a"].val        # the B prefetch only with A packed (see blocking):
    pf = min(kc, int(b["prefetch"] * cfg["prefetch_scale"].val)) if packed else 0   # unread
    return _schedule(N, M, K, dtype, mr, b["nr"], kc, mc, nc, prefetch=pf,
                     pack_a=packed)


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b


def main(args=DEFAULT_ARGS) -> None:
    s, tensors = hand_schedule(*args)
    print(lt.lower(s, tensors))
    f = lt.build(s, tensors, name="matmul")
    rng = np.random.default_rng(0)
    N, M, K = args
    a = rng.random((N, K), dtype=np.float32)
    b = rng.random((K, M), dtype=np.float32)
    c = np.empty((N, M), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-4, atol=1e-3)
    t = f.time(a, b, c, number=3, repeat=7)
    tn = lt.backends.module.time_callable(lambda: np.matmul(a, b, out=c), 3, 7)
    gflop = 2 * N * M * K / 1e9
    print(f"looptune {t.median * 1e3:8.2f} ms  {gflop / t.median:6.1f} GFLOP/s")
    print(f"numpy    {tn.median * 1e3:8.2f} ms  {gflop / tn.median:6.1f} GFLOP/s")
    print(f"looptune / numpy time: {t.median / tn.median:.2f}x")


if __name__ == "__main__":
    main()
