"""The schedule fuzzer's operators: small computations of odd sizes and their numpy references.

An operator is named by ``(name, params)`` where ``params`` is a small JSON-able dict of sizes
(and a dtype), so a case can be re-created in another process (the sanitizer runner) from its
JSON alone: ``make_op(name, params)`` builds fresh tensors every time it is called.

The operators are ``util.Workload``s: matmul, conv2d, blur, softmax and chain are util's own
builders called with the drawn ``params`` as keyword arguments; the others are defined here.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

import looptune as lt

# tests/ (for ``util``): the sanitizer runner imports this module without the conftest
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from util import (
    GUARD,
    Workload,
    blur,
    chain,
    conv2d,
    guarded,
    margins_intact,
    matmul,
    rand,
    softmax,
    workload,
)

ODD = (5, 7, 9, 11, 13, 17, 19, 23, 29, 31, 37)

FuzzOp = Workload   # a fuzz operator: its tensors in call order, random inputs, numpy reference


def _odd(rng, lo=5, hi=37) -> int:
    return int(rng.choice([n for n in ODD if lo <= n <= hi]))


# ---- operators: each a (params drawer, builder) pair -----------------------------------------

def _matmul_params(rng):
    return {"N": _odd(rng, 5, 29), "M": _odd(rng, 5, 37), "K": _odd(rng, 5, 37),
            "dtype": str(rng.choice(["float32", "float32", "int32"]))}


def _conv2d_params(rng):
    return {"N": int(rng.integers(1, 3)), "C": int(rng.integers(1, 4)), "H": _odd(rng, 5, 13),
            "W": _odd(rng, 5, 13), "F": int(rng.integers(2, 6)), "R": 3,
            "stride": int(rng.integers(1, 3)), "pad": 1}


def _blur_params(rng):
    return {"H": _odd(rng), "W": _odd(rng)}


def _rows_params(rng):
    return {"N": _odd(rng), "M": _odd(rng)}


def _layernorm(N, M) -> FuzzOp:
    """Row layernorm: sum, centre, sum of squares, normalise with gamma/beta (4 stages)."""
    eps = 1e-5
    X = lt.placeholder((N, M), "float32", name="X")
    g = lt.placeholder((M,), "float32", name="gamma")
    b = lt.placeholder((M,), "float32", name="beta")
    k1 = lt.reduce_axis(M, name="k1")
    s1 = lt.compute((N,), lambda i: lt.sum(X[i, k1], axis=k1), name="rsum")
    xc = lt.compute((N, M), lambda i, j: X[i, j] - s1[i] * (1.0 / M), name="xc")
    k2 = lt.reduce_axis(M, name="k2")
    s2 = lt.compute((N,), lambda i: lt.sum(xc[i, k2] * xc[i, k2], axis=k2), name="rsq")
    out = lt.compute((N, M), lambda i, j: xc[i, j] * lt.rsqrt(s2[i] * (1.0 / M) + eps) * g[j]
                     + b[j], name="ln")

    def ref(d):
        x = d["X"].astype(np.float64)
        c = x - x.mean(axis=1, keepdims=True)
        v = (c * c).mean(axis=1, keepdims=True)
        return {"ln": c / np.sqrt(v + eps) * d["gamma"] + d["beta"]}
    return workload("layernorm", [X, g, b], [out], [s1, xc, s2],
                    lambda r: {"X": rand(r, (N, M), lo=-2, hi=2), "gamma": rand(r, (M,)),
                               "beta": rand(r, (M,))}, ref, atol=1e-4)


def _pool_params(rng):
    return {"N": int(rng.integers(1, 3)), "C": int(rng.integers(1, 4)), "H": _odd(rng, 5, 23),
            "W": _odd(rng, 5, 23), "dtype": str(rng.choice(["float32", "int32"]))}


def _maxpool(N, C, H, W, dtype) -> FuzzOp:
    """2x2 max pooling with stride 2 (odd sizes drop the last row/column)."""
    X = lt.placeholder((N, C, H, W), dtype, name="X")
    ry, rx = lt.reduce_axis(2, name="ry"), lt.reduce_axis(2, name="rx")
    Y = lt.compute((N, C, H // 2, W // 2), lambda n, c, y, x: lt.max(
        X[n, c, y * 2 + ry, x * 2 + rx], axis=[ry, rx]), name="maxpool")

    def ref(x):
        v = x["X"][:, :, :H // 2 * 2, :W // 2 * 2].reshape(N, C, H // 2, 2, W // 2, 2)
        return {"maxpool": v.max(axis=(3, 5))}
    return workload("maxpool", [X], [Y], [],
                    lambda r: {"X": rand(r, (N, C, H, W), dtype, -100, 100)}, ref)


def _avgpool_params(rng):
    return {k: v for k, v in _pool_params(rng).items() if k != "dtype"}


def _avgpool(N, C, H, W) -> FuzzOp:
    """2x2 average pooling with stride 2: a window-sum stage, then a scaling stage."""
    X = lt.placeholder((N, C, H, W), "float32", name="X")
    ry, rx = lt.reduce_axis(2, name="ry"), lt.reduce_axis(2, name="rx")
    S = lt.compute((N, C, H // 2, W // 2), lambda n, c, y, x: lt.sum(
        X[n, c, y * 2 + ry, x * 2 + rx], axis=[ry, rx]), name="winsum")
    Y = lt.compute(S.shape, lambda n, c, y, x: S[n, c, y, x] * 0.25, name="avgpool")

    def ref(x):
        v = x["X"].astype(np.float64)[:, :, :H // 2 * 2, :W // 2 * 2]
        return {"avgpool": v.reshape(N, C, H // 2, 2, W // 2, 2).mean(axis=(3, 5))}
    return workload("avgpool", [X], [Y], [S], lambda r: {"X": rand(r, (N, C, H, W))}, ref)


def _transpose_params(rng):
    return {"N": _odd(rng), "M": _odd(rng),
            "dtype": str(rng.choice(["float32", "int16", "uint8", "float64"]))}


def _transpose(N, M, dtype) -> FuzzOp:
    A = lt.placeholder((N, M), dtype, name="A")
    T = lt.compute((M, N), lambda i, j: A[j, i], name="T")
    return workload("transpose", [A], [T], [], lambda r: {"A": rand(r, (N, M), dtype, -100, 200)},
                    lambda x: {"T": x["A"].T.copy()})


def _chain_int(N, M) -> FuzzOp:
    """The chain on int32 with floor // and % of negative values (exact comparison)."""
    A = lt.placeholder((N, M), "int32", name="A")
    bias = lt.placeholder((M,), "int32", name="bias")
    B1 = lt.compute((N, M), lambda i, j: A[i, j] * 3 - bias[j], name="B1")
    B2 = lt.compute((N, M), lambda i, j: B1[i, j] // 4 + B1[i, j] % 7, name="B2")
    D = lt.compute((N, M), lambda i, j: lt.max(B2[i, j], A[i, j]) - B1[i, j], name="D")

    def ref(d):
        a, b = d["A"].astype(np.int64), d["bias"].astype(np.int64)
        b1 = a * 3 - b
        return {"D": np.maximum(b1 // 4 + b1 % 7, a) - b1}
    return workload("chain_int", [A, bias], [D], [B1, B2],
                    lambda r: {"A": rand(r, (N, M), "int32", -50, 50),
                               "bias": rand(r, (M,), "int32", -50, 50)}, ref)


# name -> (params drawer, builder called with the params as keyword arguments)
OPS: dict[str, tuple[Callable, Callable[..., FuzzOp]]] = {
    "matmul": (_matmul_params, matmul),
    "conv2d": (_conv2d_params, conv2d),
    "blur": (_blur_params, blur),
    "softmax": (_rows_params, softmax),
    "layernorm": (_rows_params, _layernorm),
    "maxpool": (_pool_params, _maxpool),
    "avgpool": (_avgpool_params, _avgpool),
    "transpose": (_transpose_params, _transpose),
    "chain": (_rows_params, chain),
    "chain_int": (_rows_params, _chain_int),
}
OP_NAMES = tuple(OPS)


def draw_params(name: str, rng: np.random.Generator) -> dict:
    """Random small odd sizes (and dtype) for operator ``name``."""
    return OPS[name][0](rng)


def make_op(name: str, params: dict) -> FuzzOp:
    """Fresh tensors for operator ``name`` with ``params``."""
    op = OPS[name][1](**params)
    op.params = params
    return op


# ---- running a built function against the reference ------------------------------------------

def run_and_compare(f, op: FuzzOp, data_seed: int, guard: bool = True) -> str | None:
    """Run ``f`` on random inputs (outputs prefilled with canaries); None when every output
    matches the reference, else what went wrong. Without ``guard`` the arrays are exact-size
    allocations (so ASan's redzones border them) and the margins are not checked."""
    data = op.make_data(np.random.default_rng(data_seed))
    want = op.reference(data)
    bufs, arrays = [], []
    for t in op.args:
        shape = data[t.name].shape if t.name in data else want[t.name].shape
        buf, arr = guarded(shape, t.dtype, data.get(t.name), GUARD if guard else 0)
        bufs.append(buf)
        arrays.append(arr)
    f(*arrays)
    problems = []
    for t, buf, arr in zip(op.args, bufs, arrays):
        if guard and not margins_intact(buf):
            problems.append(f"'{t.name}': memory outside the array was written")
        if t.name in data:
            if not np.array_equal(arr, data[t.name], equal_nan=True):
                problems.append(f"input '{t.name}' was modified")
            continue
        msg = _compare(arr, want[t.name], op)
        if msg:
            problems.append(f"output '{t.name}': {msg}")
    return "\n".join(problems) or None


def _compare(got: np.ndarray, want: np.ndarray, op: FuzzOp) -> str | None:
    if got.dtype.kind == "f":
        bad = ~np.isclose(got, want, **op.tol)
    else:
        bad = got.astype(np.int64) != want.astype(np.int64)
    if not bad.any():
        return None
    idx = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)[:5]]
    shown = ", ".join(f"{ix}: got {got[ix]!r} want {want[ix]!r}" for ix in idx)
    return f"{int(bad.sum())} of {bad.size} elements differ (shape {got.shape}); first: {shown}"
