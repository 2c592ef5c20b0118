"""Fused dense layer: D = relu(A @ B + bias) (float32), the epilogue fused into the matmul.

Hand schedule: the matmul micro-kernel of ``matmul.py`` (B packed per 64-column panel with
cache_read, an 8 x (2 vectors) register tile accumulated in a cache_write buffer with the
reduction outside the tile, rows unrolled, columns vectorized, panels spread over threads),
with the bias add and relu applied while the tile is written back: the product never
round-trips through memory, so the epilogue costs next to nothing (numpy needs three passes
over C). Tails of every tile are peeled, so the kernel is exact for any size.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

NAME = "matmul_relu"
DEFAULT_ARGS = (1024, 1024, 1024)


def algorithm(N: int, M: int, K: int, dtype: str = "float32"):
    """relu(A (N,K) @ B (K,M) + bias (M,)) -> D (N,M). Returns [A, B, bias, D]."""
    A = lt.placeholder((N, K), dtype, name="A")
    B = lt.placeholder((K, M), dtype, name="B")
    bias = lt.placeholder((M,), dtype, name="bias")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = lt.compute((N, M), lambda i, j: lt.max(C[i, j] + bias[j], 0.0), name="D")
    return [A, B, bias, D]


def _schedule(N, M, K, dtype, panel, tile_i, tile_j, par_rows):
    A, B, bias, D = algorithm(N, M, K, dtype)
    C = D.op.inputs[0]
    s = lt.create_schedule(D)
    CC = s.cache_write(C, "local")
    BB = s.cache_read(B, "local", [CC])
    s[C].compute_inline()
    i, j = s[D].op.axis
    jo, ji = s[D].split(j, factor=panel)
    io, ii = s[D].split(i, factor=tile_i)
    jio, jii = s[D].split(ji, factor=tile_j)
    s[D].reorder(jo, io, jio, ii, jii)
    s[D].vectorize(jii)
    s[D].parallel(io if par_rows else jo)
    s[CC].compute_at(s[D], jio)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    s[CC].reorder(ck, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    # the packed panel is per thread when panels are parallel, else shared by all row tiles
    s[BB].compute_at(s[D], jo)
    s[BB].vectorize(s[BB].op.axis[1])
    return s, [A, B, bias, D]


def hand_schedule(N: int, M: int, K: int, dtype: str = "float32"):
    ti, tj = lt.Target.parse("c").gemm_tile(dtype)   # 14 x 32 AVX-512, 6 x 16 AVX2
    return _schedule(N, M, K, dtype, panel=64, tile_i=ti, tile_j=tj, par_rows=False)


@lt.template(NAME)
def template(cfg, N: int, M: int, K: int, dtype: str = "float32"):
    """Panel width, register tile and which loop the threads share; fallback = hand."""
    cfg.define_knob("panel", [64, 128, 256, 32])
    ti, tj = lt.Target.parse("c").gemm_tile(dtype)   # 14 x 32 AVX-512, 6 x 16 AVX2
    cfg.define_knob("tile_i", list(dict.fromkeys([ti, 8, 12, 6, 4])))
    cfg.define_knob("tile_j", list(dict.fromkeys([tj, 32, 16, 48, 64])))
    cfg.define_knob("parallel_rows", [False, True])
    return _schedule(N, M, K, dtype, cfg["panel"].val, cfg["tile_i"].val, cfg["tile_j"].val,
                     cfg["parallel_rows"].val)



def reference(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> np.ndarray:
    return np.maximum(a @ b + bias, 0)


def main(args=DEFAULT_ARGS) -> None:
    s, tensors = hand_schedule(*args)
    print(lt.lower(s, tensors))
    f = lt.build(s, tensors, name="matmul_relu")
    rng = np.random.default_rng(0)
    N, M, K = args
    a = rng.random((N, K), dtype=np.float32) - 0.5
    b = rng.random((K, M), dtype=np.float32)
    bias = rng.random(M, dtype=np.float32) - 0.5
    d = np.empty((N, M), np.float32)
    f(a, b, bias, d)
    np.testing.assert_allclose(d, reference(a, b, bias), rtol=1e-4, atol=1e-3)
    t = f.time(a, b, bias, d, number=3, repeat=7)
    tn = lt.backends.module.time_callable(lambda: reference(a, b, bias), 3, 7)
    gflop = 2 * N * M * K / 1e9
    print(f"looptune {t.median * 1e3:8.2f} ms  {gflop / t.median:6.1f} GFLOP/s")
    print(f"numpy    {tn.median * 1e3:8.2f} ms  {gflop / tn.median:6.1f} GFLOP/s")
    print(f"looptune / numpy time: {t.median / tn.median:.2f}x")


if __name__ == "__main__":
    main()
