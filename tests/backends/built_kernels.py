"""Small built functions shared by the backend tests (export_library, DLPack): an elementwise
``Z = f(X) * scale + Y`` over a symbolic length and a tiled matmul with odd sizes."""
from __future__ import annotations

from collections.abc import Callable

import looptune as lt


def built_axpy(name: str = "vadd", scale: float = 2.0, *, unary: Callable | None = None,
               factor: int = 8, n=None, parallel: bool = True):
    """``Z[i] = unary(X[i]) * scale + Y[i]`` (``X[i]`` when ``unary`` is None) over ``n``
    (a symbolic ``n`` unless given), split by ``factor`` with the inner loop vectorized (a tail
    when ``n`` is not a multiple) and the outer loop parallel unless ``parallel=False``."""
    n = lt.var("n") if n is None else n
    X = lt.placeholder((n,), name="X")
    Y = lt.placeholder((n,), name="Y")
    Z = lt.compute((n,), lambda i: (X[i] if unary is None else unary(X[i])) * scale + Y[i],
                   name="Z")
    s = lt.create_schedule(Z)
    xo, xi = s[Z].split(Z.op.axis[0], factor=factor)
    s[Z].vectorize(xi)
    if parallel:
        s[Z].parallel(xo)
    return lt.build(s, [X, Y, Z], name=name)


def built_matmul(N: int = 13, M: int = 21, K: int = 7, vectorize: bool = True):
    """``C = A @ B`` named ``mm``, tiled 4 x 8 (tails at the default odd sizes), the tile's
    columns vectorized unless ``vectorize=False``."""
    A = lt.placeholder((N, K), name="A")
    B = lt.placeholder((K, M), name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = lt.create_schedule(C)
    _, _, _, ji = s[C].tile(*C.op.axis, 4, 8)
    if vectorize:
        s[C].vectorize(ji)
    return lt.build(s, [A, B, C], name="mm")
