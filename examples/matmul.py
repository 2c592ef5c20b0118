"""Matrix multiply C = A @ B (float32).

Hand schedule: a register-tiled micro-kernel. C is tiled 8x16; the 8x16 tile accumulates in
a local buffer (cache_write) attached at the tile loop, the reduction runs outside the tile so
that each A element is broadcast against two 8-lane vectors of B, the tile's rows are unrolled
and its columns vectorized, and the row tiles are spread over threads. The 8x16 float
accumulators fit the 16 AVX2 registers; full tiles get constant extents (tails are peeled).
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


def hand_schedule(N: int, M: int, K: int, dtype: str = "float32"):
    A, B, C = algorithm(N, M, K, dtype)
    s = lt.create_schedule(C)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    s[CC].reorder(ck, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]


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
