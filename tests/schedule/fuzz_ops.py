"""The schedule fuzzer's operators: small computations of odd sizes and their numpy references.

An operator is named by ``(name, params)`` where ``params`` is a small JSON-able dict of sizes
(and a dtype), so a case can be re-created in another process (the sanitizer runner) from its
JSON alone: ``make_op(name, params)`` builds fresh tensors every time it is called.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import looptune as lt

ODD = (5, 7, 9, 11, 13, 17, 19, 23, 29, 31, 37)


@dataclass
class FuzzOp:
    """A computation: its tensors in call order, random inputs and the numpy reference."""

    name: str
    params: dict
    inputs: list
    outputs: list
    make_data: Callable[[np.random.Generator], dict]     # input name -> array
    reference: Callable[[dict], dict]                    # output name -> float64/int array
    rtol: float = 1e-4
    atol: float = 1e-5

    @property
    def args(self) -> list:
        return self.inputs + self.outputs

    def schedule(self):
        return lt.create_schedule(self.outputs)


def _rand(rng, shape, dtype="float32", lo=-1.0, hi=1.0) -> np.ndarray:
    d = np.dtype(dtype)
    if d.kind in "iu":
        info = np.iinfo(d)
        return rng.integers(max(int(lo), info.min), min(int(hi), info.max) + 1, size=shape,
                            dtype=d)
    return rng.uniform(lo, hi, size=shape).astype(d)


def _odd(rng, lo=5, hi=37) -> int:
    return int(rng.choice([n for n in ODD if lo <= n <= hi]))


# ---- operators: each a (params drawer, builder) pair -----------------------------------------

def _matmul_params(rng):
    return {"N": _odd(rng, 5, 29), "M": _odd(rng, 5, 37), "K": _odd(rng, 5, 37),
            "dtype": str(rng.choice(["float32", "float32", "int32"]))}


def _matmul(p) -> FuzzOp:
    N, M, K, d = p["N"], p["M"], p["K"], p["dtype"]
    A = lt.placeholder((N, K), d, name="A")
    B = lt.placeholder((K, M), d, name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    lo, hi = (-8, 8) if d == "int32" else (-1, 1)
    return FuzzOp("matmul", p, [A, B], [C],
                  lambda r: {"A": _rand(r, (N, K), d, lo, hi), "B": _rand(r, (K, M), d, lo, hi)},
                  lambda x: {"C": x["A"].astype(np.float64) @ x["B"].astype(np.float64)})


def _conv2d_params(rng):
    return {"N": int(rng.integers(1, 3)), "C": int(rng.integers(1, 4)), "H": _odd(rng, 5, 13),
            "W": _odd(rng, 5, 13), "F": int(rng.integers(2, 6)), "R": 3,
            "stride": int(rng.integers(1, 3)), "pad": 1}


def _conv2d(p) -> FuzzOp:
    """NCHW conv2d; the zero padding is its own stage (an if_then_else)."""
    N, C, H, W, F, R, stride, pad = (p[k] for k in ("N", "C", "H", "W", "F", "R", "stride",
                                                    "pad"))
    X = lt.placeholder((N, C, H, W), "float32", name="X")
    Wt = lt.placeholder((F, C, R, R), "float32", name="Wt")
    Hp, Wp = H + 2 * pad, W + 2 * pad
    Ho, Wo = (Hp - R) // stride + 1, (Wp - R) // stride + 1
    Xp = lt.compute((N, C, Hp, Wp), lambda n, c, h, w: lt.if_then_else(
        lt.all(h >= pad, h < H + pad, w >= pad, w < W + pad), X[n, c, h - pad, w - pad], 0.0),
        name="Xpad")
    rc, ry, rx = (lt.reduce_axis(n, name=nm) for n, nm in ((C, "rc"), (R, "ry"), (R, "rx")))
    Y = lt.compute((N, F, Ho, Wo), lambda n, f, y, x: lt.sum(
        Xp[n, rc, y * stride + ry, x * stride + rx] * Wt[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv")

    def ref(d):
        xp = np.pad(d["X"].astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((N, F, Ho, Wo))
        for a in range(R):
            for b in range(R):
                win = xp[:, :, a:a + stride * (Ho - 1) + 1:stride,
                         b:b + stride * (Wo - 1) + 1:stride]
                out += np.einsum("nchw,fc->nfhw", win, d["Wt"][:, :, a, b].astype(np.float64))
        return {"conv": out}
    return FuzzOp("conv2d", p, [X, Wt], [Y],
                  lambda r: {"X": _rand(r, (N, C, H, W)), "Wt": _rand(r, (F, C, R, R))}, ref)


def _blur_params(rng):
    return {"H": _odd(rng), "W": _odd(rng)}


def _blur(p) -> FuzzOp:
    """Halide's two-stage 3x3 box blur (the input is 2 larger: no boundary condition)."""
    H, W = p["H"], p["W"]
    I = lt.placeholder((H + 2, W + 2), "float32", name="I")
    bx = lt.compute((H + 2, W), lambda y, x: (I[y, x] + I[y, x + 1] + I[y, x + 2]) / 3.0,
                    name="blur_x")
    by = lt.compute((H, W), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0,
                    name="blur_y")

    def ref(d):
        i = d["I"].astype(np.float64)
        x = (i[:, :-2] + i[:, 1:-1] + i[:, 2:]) / 3.0
        return {"blur_y": (x[:-2] + x[1:-1] + x[2:]) / 3.0}
    return FuzzOp("blur", p, [I], [by], lambda r: {"I": _rand(r, (H + 2, W + 2))}, ref)


def _rows_params(rng):
    return {"N": _odd(rng), "M": _odd(rng)}


def _softmax(p) -> FuzzOp:
    """Row softmax in 4 stages: row max, exp(x - max), row sum, divide."""
    N, M = p["N"], p["M"]
    X = lt.placeholder((N, M), "float32", name="X")
    k1 = lt.reduce_axis(M, name="k1")
    mx = lt.compute((N,), lambda i: lt.max(X[i, k1], axis=k1), name="rowmax")
    ex = lt.compute((N, M), lambda i, j: lt.exp(X[i, j] - mx[i]), name="expx")
    k2 = lt.reduce_axis(M, name="k2")
    sm = lt.compute((N,), lambda i: lt.sum(ex[i, k2], axis=k2), name="rowsum")
    out = lt.compute((N, M), lambda i, j: ex[i, j] / sm[i], name="softmax")

    def ref(d):
        x = d["X"].astype(np.float64)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return {"softmax": e / e.sum(axis=1, keepdims=True)}
    return FuzzOp("softmax", p, [X], [out], lambda r: {"X": _rand(r, (N, M), lo=-5, hi=5)}, ref)


def _layernorm(p) -> FuzzOp:
    """Row layernorm: sum, centre, sum of squares, normalise with gamma/beta (4 stages)."""
    N, M, eps = p["N"], p["M"], 1e-5
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
    return FuzzOp("layernorm", p, [X, g, b], [out],
                  lambda r: {"X": _rand(r, (N, M), lo=-2, hi=2), "gamma": _rand(r, (M,)),
                             "beta": _rand(r, (M,))}, ref, atol=1e-4)


def _pool_params(rng):
    return {"N": int(rng.integers(1, 3)), "C": int(rng.integers(1, 4)), "H": _odd(rng, 5, 23),
            "W": _odd(rng, 5, 23), "dtype": str(rng.choice(["float32", "int32"]))}


def _maxpool(p) -> FuzzOp:
    """2x2 max pooling with stride 2 (odd sizes drop the last row/column)."""
    N, C, H, W, d = p["N"], p["C"], p["H"], p["W"], p["dtype"]
    X = lt.placeholder((N, C, H, W), d, name="X")
    ry, rx = lt.reduce_axis(2, name="ry"), lt.reduce_axis(2, name="rx")
    Y = lt.compute((N, C, H // 2, W // 2), lambda n, c, y, x: lt.max(
        X[n, c, y * 2 + ry, x * 2 + rx], axis=[ry, rx]), name="maxpool")

    def ref(x):
        v = x["X"][:, :, :H // 2 * 2, :W // 2 * 2].reshape(N, C, H // 2, 2, W // 2, 2)
        return {"maxpool": v.max(axis=(3, 5))}
    return FuzzOp("maxpool", p, [X], [Y], lambda r: {"X": _rand(r, (N, C, H, W), d, -100, 100)},
                  ref)


def _avgpool_params(rng):
    return {k: v for k, v in _pool_params(rng).items() if k != "dtype"}


def _avgpool(p) -> FuzzOp:
    """2x2 average pooling with stride 2: a window-sum stage, then a scaling stage."""
    N, C, H, W = p["N"], p["C"], p["H"], p["W"]
    X = lt.placeholder((N, C, H, W), "float32", name="X")
    ry, rx = lt.reduce_axis(2, name="ry"), lt.reduce_axis(2, name="rx")
    S = lt.compute((N, C, H // 2, W // 2), lambda n, c, y, x: lt.sum(
        X[n, c, y * 2 + ry, x * 2 + rx], axis=[ry, rx]), name="winsum")
    Y = lt.compute(S.shape, lambda n, c, y, x: S[n, c, y, x] * 0.25, name="avgpool")

    def ref(x):
        v = x["X"].astype(np.float64)[:, :, :H // 2 * 2, :W // 2 * 2]
        return {"avgpool": v.reshape(N, C, H // 2, 2, W // 2, 2).mean(axis=(3, 5))}
    return FuzzOp("avgpool", p, [X], [Y], lambda r: {"X": _rand(r, (N, C, H, W))}, ref)


def _transpose_params(rng):
    return {"N": _odd(rng), "M": _odd(rng),
            "dtype": str(rng.choice(["float32", "int16", "uint8", "float64"]))}


def _transpose(p) -> FuzzOp:
    N, M, d = p["N"], p["M"], p["dtype"]
    A = lt.placeholder((N, M), d, name="A")
    T = lt.compute((M, N), lambda i, j: A[j, i], name="T")
    return FuzzOp("transpose", p, [A], [T], lambda r: {"A": _rand(r, (N, M), d, -100, 200)},
                  lambda x: {"T": x["A"].T.copy()})


def _chain(p) -> FuzzOp:
    """Three elementwise stages with a broadcast bias: B1 -> B2 -> D (D also reads A)."""
    N, M = p["N"], p["M"]
    A = lt.placeholder((N, M), "float32", name="A")
    bias = lt.placeholder((M,), "float32", name="bias")
    B1 = lt.compute((N, M), lambda i, j: A[i, j] * 2.0 + bias[j], name="B1")
    B2 = lt.compute((N, M), lambda i, j: lt.exp(B1[i, j] * 0.25), name="B2")
    D = lt.compute((N, M), lambda i, j: B2[i, j] - A[i, j], name="D")

    def ref(d):
        a = d["A"].astype(np.float64)
        return {"D": np.exp((a * 2.0 + d["bias"]) * 0.25) - a}
    return FuzzOp("chain", p, [A, bias], [D],
                  lambda r: {"A": _rand(r, (N, M)), "bias": _rand(r, (M,))}, ref)


def _chain_int(p) -> FuzzOp:
    """The chain on int32 with floor // and % of negative values (exact comparison)."""
    N, M = p["N"], p["M"]
    A = lt.placeholder((N, M), "int32", name="A")
    bias = lt.placeholder((M,), "int32", name="bias")
    B1 = lt.compute((N, M), lambda i, j: A[i, j] * 3 - bias[j], name="B1")
    B2 = lt.compute((N, M), lambda i, j: B1[i, j] // 4 + B1[i, j] % 7, name="B2")
    D = lt.compute((N, M), lambda i, j: lt.max(B2[i, j], A[i, j]) - B1[i, j], name="D")

    def ref(d):
        a, b = d["A"].astype(np.int64), d["bias"].astype(np.int64)
        b1 = a * 3 - b
        return {"D": np.maximum(b1 // 4 + b1 % 7, a) - b1}
    return FuzzOp("chain_int", p, [A, bias], [D],
                  lambda r: {"A": _rand(r, (N, M), "int32", -50, 50),
                             "bias": _rand(r, (M,), "int32", -50, 50)}, ref)


OPS: dict[str, tuple[Callable, Callable]] = {
    "matmul": (_matmul_params, _matmul),
    "conv2d": (_conv2d_params, _conv2d),
    "blur": (_blur_params, _blur),
    "softmax": (_rows_params, _softmax),
    "layernorm": (_rows_params, _layernorm),
    "maxpool": (_pool_params, _maxpool),
    "avgpool": (_avgpool_params, _avgpool),
    "transpose": (_transpose_params, _transpose),
    "chain": (_rows_params, _chain),
    "chain_int": (_rows_params, _chain_int),
}
OP_NAMES = tuple(OPS)


def draw_params(name: str, rng: np.random.Generator) -> dict:
    """Random small odd sizes (and dtype) for operator ``name``."""
    return OPS[name][0](rng)


def make_op(name: str, params: dict) -> FuzzOp:
    """Fresh tensors for operator ``name`` with ``params``."""
    return OPS[name][1](params)


# ---- running a built function against the reference ------------------------------------------

GUARD = 16   # canary elements on each side of every array in guarded runs


def _canary(dtype):
    d = np.dtype(dtype)
    return np.nan if d.kind == "f" else np.iinfo(d).max


def _margins_intact(buf: np.ndarray) -> bool:
    want = np.full(GUARD, _canary(buf.dtype), dtype=buf.dtype)
    nan = buf.dtype.kind == "f"
    return (np.array_equal(buf[:GUARD], want, equal_nan=nan)
            and np.array_equal(buf[-GUARD:], want, equal_nan=nan))


def _array(shape, dtype, fill, guard: bool):
    """(buffer, array): with ``guard``, ``array`` sits inside canary margins of ``buffer``;
    without, it is an exact-size allocation (so ASan's redzones border it)."""
    if not guard:
        arr = np.full(shape, _canary(dtype), dtype=dtype)
        if fill is not None:
            arr[...] = fill
        return arr, arr
    n = int(np.prod(shape, dtype=np.int64))
    buf = np.full(n + 2 * GUARD, _canary(dtype), dtype=dtype)
    arr = buf[GUARD:GUARD + n].reshape(shape)
    if fill is not None:
        arr[...] = fill
    return buf, arr


def run_and_compare(f, op: FuzzOp, data_seed: int, guard: bool = True) -> str | None:
    """Run ``f`` on random inputs (outputs prefilled with canaries); None when every output
    matches the reference, else what went wrong."""
    data = op.make_data(np.random.default_rng(data_seed))
    want = op.reference(data)
    bufs, arrays = [], []
    for t in op.args:
        shape = data[t.name].shape if t.name in data else want[t.name].shape
        buf, arr = _array(shape, t.dtype, data.get(t.name), guard)
        bufs.append(buf)
        arrays.append(arr)
    f(*arrays)
    problems = []
    for t, buf, arr in zip(op.args, bufs, arrays):
        if guard and not _margins_intact(buf):
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
        bad = ~np.isclose(got, want, rtol=op.rtol, atol=op.atol)
    else:
        bad = got.astype(np.int64) != want.astype(np.int64)
    if not bad.any():
        return None
    idx = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)[:5]]
    shown = ", ".join(f"{ix}: got {got[ix]!r} want {want[ix]!r}" for ix in idx)
    return f"{int(bad.sum())} of {bad.size} elements differ (shape {got.shape}); first: {shown}"
