"""Batched matrix multiply C[b] = A[b] @ B[b] (float32): (Bt, N, K) x (Bt, K, M) -> (Bt, N, M).

Hand schedule: each batch is the matmul micro-kernel of ``matmul.py``. The batch and the
128-column panels are fused into one parallel loop (Bt x M/128 independent jobs, plenty for
the threads even when one matrix is small); each job packs its K x 128 panel of B[b] into a
contiguous local buffer (cache_read at the fused loop) and sweeps 8 x (2 vectors) register
tiles of C (cache_write at the tile loop, reduction outside the tile, rows unrolled, columns
vectorized) down the rows. 128 rather than matmul.py's 64 columns: at K = 256 a 64-column
panel is exactly 64 KB and lands on the stack, where gcc stops keeping the tile in registers
(4x slower; reported). Tails are peeled, so any size is exact.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

NAME = "batch_matmul"
DEFAULT_ARGS = (8, 256, 256, 256)


def algorithm(Bt: int, N: int, M: int, K: int, dtype: str = "float32"):
    """A (Bt,N,K) @ B (Bt,K,M) -> C (Bt,N,M). Returns [A, B, C]."""
    A = lt.placeholder((Bt, N, K), dtype, name="A")
    B = lt.placeholder((Bt, K, M), dtype, name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((Bt, N, M), lambda b, i, j: lt.sum(A[b, i, k] * B[b, k, j], axis=k),
                   name="C")
    return [A, B, C]


def _schedule(Bt, N, M, K, dtype, panel, tile_i, tile_j):
    A, B, C = algorithm(Bt, N, M, K, dtype)
    s = lt.create_schedule(C)
    CC = s.cache_write(C, "local")
    BB = s.cache_read(B, "local", [CC])
    b, i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=panel)
    io, ii = s[C].split(i, factor=tile_i)
    jio, jii = s[C].split(ji, factor=tile_j)
    s[C].reorder(b, jo, io, jio, ii, jii)
    job = s[C].fuse(b, jo)
    s[C].vectorize(jii)
    s[C].parallel(job)
    s[CC].compute_at(s[C], jio)
    _, ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    s[CC].reorder(ck, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    s[BB].compute_at(s[C], job)
    s[BB].vectorize(s[BB].op.axis[2])
    return s, [A, B, C]


def hand_schedule(Bt: int, N: int, M: int, K: int, dtype: str = "float32"):
    ti, tj = lt.Target.parse("c").gemm_tile(dtype)   # 14 x 32 AVX-512, 6 x 16 AVX2
    return _schedule(Bt, N, M, K, dtype, panel=128, tile_i=ti, tile_j=tj)


@lt.template(NAME)
def template(cfg, Bt: int, N: int, M: int, K: int, dtype: str = "float32"):
    """Panel width and register tile; the fallback config is the hand schedule."""
    cfg.define_knob("panel", [128, 64, 256, 32])
    ti, tj = lt.Target.parse("c").gemm_tile(dtype)   # 14 x 32 AVX-512, 6 x 16 AVX2
    cfg.define_knob("tile_i", list(dict.fromkeys([ti, 8, 12, 6, 4])))
    cfg.define_knob("tile_j", list(dict.fromkeys([tj, 32, 16, 48, 64])))
    return _schedule(Bt, N, M, K, dtype, cfg["panel"].val, cfg["tile_i"].val,
                     cfg["tile_j"].val)


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b


def main(args=DEFAULT_ARGS) -> None:
    s, tensors = hand_schedule(*args)
    print(lt.lower(s, tensors))
    f = lt.build(s, tensors, name="batch_matmul")
    rng = np.random.default_rng(0)
    Bt, N, M, K = args
    a = rng.random((Bt, N, K), dtype=np.float32)
    b = rng.random((Bt, K, M), dtype=np.float32)
    c = np.empty((Bt, N, M), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-4, atol=1e-3)
    t = f.time(a, b, c, number=5, repeat=7)
    tn = lt.backends.module.time_callable(lambda: np.matmul(a, b, out=c), 5, 7)
    gflop = 2 * Bt * N * M * K / 1e9
    print(f"looptune {t.median * 1e3:8.2f} ms  {gflop / t.median:6.1f} GFLOP/s")
    print(f"numpy    {tn.median * 1e3:8.2f} ms  {gflop / tn.median:6.1f} GFLOP/s")
    print(f"looptune / numpy time: {t.median / tn.median:.2f}x")


if __name__ == "__main__":
    main()
