"""Shared test helpers: guarded differential runs against numpy, workloads, a tiny evaluator.

Every differential check builds the schedule, runs it on arrays that sit inside larger
buffers whose margins hold canaries (NaN for floats, the dtype's maximum for integers), fills
the outputs with canaries too, and then checks (1) the outputs against numpy, (2) that every
output element was written and (3) that nothing outside the arrays was written.
"""
from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import looptune as lt
from looptune.lang.expr import BinKind, BinOp, Cast, Const, Not, Select, Var
from looptune.report import make_arrays

RTOL, ATOL = 1e-4, 1e-5
GUARD = 16   # canary elements on each side of every array handed to a compiled function

# Built modules are kept alive for the whole session. Collecting a module that had used OpenMP
# once unloaded libgomp under its live worker threads and crashed the process (fixed in the
# core; test_build_run.py::test_parallel_module_can_be_garbage_collected checks it in a
# subprocess): should it come back, it fails that one test instead of killing the session.
ALIVE: list = []


# ---- arrays ------------------------------------------------------------------------------

def rand(rng: np.random.Generator, shape, dtype="float32", lo=-1.0, hi=1.0) -> np.ndarray:
    """Uniform random values in [lo, hi] (integers: inclusive, clipped to the dtype)."""
    d = np.dtype(dtype)
    if d.kind in "iu":
        info = np.iinfo(d)
        return rng.integers(max(int(lo), info.min), min(int(hi), info.max) + 1, size=shape,
                            dtype=d)
    return rng.uniform(lo, hi, size=shape).astype(d)


def canary(dtype):
    d = np.dtype(dtype)
    if d.kind == "f":
        return np.nan
    if d.kind == "b":
        return True
    return np.iinfo(d).max


def guarded(shape, dtype, fill=None, margin=GUARD) -> tuple[np.ndarray, np.ndarray]:
    """(buffer, array): a C-contiguous ``array`` inside ``buffer`` with ``margin`` canaries on
    each side (``margin=0``: an exact-size allocation, for ASan's redzones to border)."""
    n = int(np.prod(shape, dtype=np.int64))
    buf = np.full(n + 2 * margin, canary(dtype), dtype=dtype)
    arr = buf[margin:margin + n].reshape(shape)
    if fill is not None:
        arr[...] = fill
    return buf, arr


def margins_intact(buf: np.ndarray) -> bool:
    """Whether the canary margins of a ``guarded`` buffer are untouched."""
    want = np.full(GUARD, canary(buf.dtype), dtype=buf.dtype)
    return (np.array_equal(buf[:GUARD], want, equal_nan=buf.dtype.kind == "f")
            and np.array_equal(buf[-GUARD:], want, equal_nan=buf.dtype.kind == "f"))


def describe(s) -> str:
    steps = "\n".join(f"  {st}" for st in s.steps) or "  (default schedule)"
    return f"schedule steps:\n{steps}"


def run_check(s, args, inputs: dict, expected: dict, rtol=RTOL, atol=ATOL, f=None):
    """Build ``s`` (unless ``f`` is given), run it on ``inputs`` (by tensor name) and compare
    the outputs with ``expected`` (by tensor name). Returns the built function."""
    f = f if f is not None else lt.build(s, args)
    ALIVE.append(f)
    bufs, arrays = [], []
    for t in args:
        if t.name in inputs:
            a = np.asarray(inputs[t.name])
            buf, arr = guarded(a.shape, t.dtype, a)
        else:
            want = expected[t.name]
            buf, arr = guarded(want.shape, t.dtype)
        bufs.append(buf)
        arrays.append(arr)
    f(*arrays)
    ctx = describe(s) if s is not None else ""
    for t, buf, arr in zip(args, bufs, arrays):
        assert margins_intact(buf), f"'{t.name}': memory outside the array was written\n{ctx}"
        if t.name in inputs:
            assert np.array_equal(arr, inputs[t.name], equal_nan=True), \
                f"input '{t.name}' was modified\n{ctx}"
            continue
        want = expected[t.name]
        if arr.dtype.kind == "f":
            np.testing.assert_allclose(arr, want, rtol=rtol, atol=atol,
                                       err_msg=f"output '{t.name}'\n{ctx}")
        else:
            np.testing.assert_array_equal(arr, want, err_msg=f"output '{t.name}'\n{ctx}")
    return f


def check_outputs(s, tensors, want, seed: int = 1) -> None:
    """Build ``s`` over ``tensors``, run it on the seeded arrays of ``report.make_arrays``
    (outputs filled with NaN first) and compare each output with ``want(*inputs)`` (a tuple
    for several outputs; outputs beyond it are not compared) at rtol = atol = 1e-4."""
    inputs, outs, args = make_arrays(tensors, seed)
    for o in outs:
        o.fill(np.nan)
    lt.build(s, tensors)(*args)
    wants = want(*inputs)
    wants = wants if isinstance(wants, tuple) else (wants,)
    for got, w in zip(outs, wants):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-4)


def pick_config(space, values: dict):
    """The config of ``space`` with these knob values (the first choice of the others)."""
    names = list(space.knobs)
    vec = [0] * len(names)
    for n, v in values.items():
        vec[names.index(n)] = space.knobs[n].values.index(v)
    return space.get(space.index_of(vec))


# ---- workloads -----------------------------------------------------------------------------

@dataclass
class Workload:
    """A computation, its inputs' generator and its numpy reference."""

    name: str
    inputs: list
    outputs: list
    t: dict                                    # every tensor by name
    make_data: Callable[[np.random.Generator], dict]
    reference: Callable[[dict], dict]
    tol: dict = field(default_factory=lambda: {"rtol": RTOL, "atol": ATOL})
    params: dict = field(default_factory=dict)  # set by the fuzzer: the builder's arguments

    @property
    def args(self) -> list:
        return self.inputs + self.outputs

    def __getitem__(self, name: str):
        return self.t[name]

    def schedule(self):
        return lt.create_schedule(self.outputs)

    def check(self, s, seed: int = 0):
        data = self.make_data(np.random.default_rng(seed))
        return run_check(s, self.args, data, self.reference(data), **self.tol)


def workload(name, inputs, outputs, others, make_data, reference, **tol) -> Workload:
    """A Workload; ``others`` are its intermediate tensors, ``tol`` overrides rtol/atol."""
    ts = {x.name: x for x in [*inputs, *others, *outputs]}
    return Workload(name, list(inputs), list(outputs), ts, make_data, reference,
                    {"rtol": RTOL, "atol": ATOL, **tol})


def matmul(N=37, M=53, K=101, dtype="float32") -> Workload:
    """C = A @ B; integer dtypes draw inputs from [-8, 8] (exact products)."""
    A = lt.placeholder((N, K), dtype, name="A")
    B = lt.placeholder((K, M), dtype, name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    lo, hi = (-8, 8) if np.dtype(dtype).kind in "iu" else (-1.0, 1.0)
    return workload("matmul", [A, B], [C], [],
                    lambda r: {"A": rand(r, (N, K), dtype, lo, hi),
                               "B": rand(r, (K, M), dtype, lo, hi)},
                    lambda d: {"C": d["A"].astype(np.float64) @ d["B"].astype(np.float64)})


def matmul_scaled(N=37, M=53, K=29) -> Workload:
    """C = (2*A + 1) @ B with the scaling as its own stage P (for compute_at/inline)."""
    A = lt.placeholder((N, K), "float32", name="A")
    B = lt.placeholder((K, M), "float32", name="B")
    P = lt.compute((N, K), lambda i, k: A[i, k] * 2.0 + 1.0, name="P")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(P[i, k] * B[k, j], axis=k), name="C")
    return workload("matmul_scaled", [A, B], [C], [P],
                    lambda r: {"A": rand(r, (N, K)), "B": rand(r, (K, M))},
                    lambda d: {"C": (2.0 * d["A"].astype(np.float64) + 1.0) @ d["B"]})


def chain(N=37, M=53) -> Workload:
    """An elementwise chain with a broadcast bias: B1 -> B2 -> D (D also reads A)."""
    A = lt.placeholder((N, M), "float32", name="A")
    bias = lt.placeholder((M,), "float32", name="bias")
    B1 = lt.compute((N, M), lambda i, j: A[i, j] * 2.0 + bias[j], name="B1")
    B2 = lt.compute((N, M), lambda i, j: lt.exp(B1[i, j] * 0.25), name="B2")
    D = lt.compute((N, M), lambda i, j: B2[i, j] - A[i, j], name="D")

    def ref(d):
        a = d["A"].astype(np.float64)
        return {"D": np.exp((a * 2.0 + d["bias"]) * 0.25) - a}
    return workload("chain", [A, bias], [D], [B1, B2],
                    lambda r: {"A": rand(r, (N, M)), "bias": rand(r, (M,))}, ref)


def blur(H=37, W=53) -> Workload:
    """Halide's two-stage 3x3 box blur: blur_x then blur_y (no boundary: input is larger)."""
    In = lt.placeholder((H + 2, W + 2), "float32", name="I")
    bx = lt.compute((H + 2, W), lambda y, x: (In[y, x] + In[y, x + 1] + In[y, x + 2]) / 3.0,
                    name="blur_x")
    by = lt.compute((H, W), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0,
                    name="blur_y")

    def ref(d):
        i = d["I"].astype(np.float64)
        x = (i[:, :-2] + i[:, 1:-1] + i[:, 2:]) / 3.0
        return {"blur_y": (x[:-2] + x[1:-1] + x[2:]) / 3.0}
    return workload("blur", [In], [by], [bx], lambda r: {"I": rand(r, (H + 2, W + 2))}, ref)


def softmax(N=37, M=53) -> Workload:
    """Row softmax in 4 stages: row max, exp(x - max), row sum, divide."""
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
    return workload("softmax", [X], [out], [mx, ex, sm],
                    lambda r: {"X": rand(r, (N, M), lo=-5.0, hi=5.0)}, ref)


def conv2d(N=2, C=3, H=17, W=19, F=5, R=3, stride=2, pad=1) -> Workload:
    """NCHW conv2d with zero padding (a padded stage via if_then_else) and a stride."""
    X = lt.placeholder((N, C, H, W), "float32", name="X")
    Wt = lt.placeholder((F, C, R, R), "float32", name="Wt")
    Hp, Wp = H + 2 * pad, W + 2 * pad
    Ho, Wo = (Hp - R) // stride + 1, (Wp - R) // stride + 1
    Xp = lt.compute((N, C, Hp, Wp), lambda n, c, h, w: lt.if_then_else(
        lt.all(h >= pad, h < H + pad, w >= pad, w < W + pad), X[n, c, h - pad, w - pad], 0.0),
        name="Xpad")
    rc = lt.reduce_axis(C, name="rc")
    ry = lt.reduce_axis(R, name="ry")
    rx = lt.reduce_axis(R, name="rx")
    Y = lt.compute((N, F, Ho, Wo), lambda n, f, y, x: lt.sum(
        Xp[n, rc, y * stride + ry, x * stride + rx] * Wt[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv")

    def ref(d):
        xp = np.pad(d["X"].astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        out = np.zeros((N, F, Ho, Wo))
        for a in range(R):
            for b in range(R):
                win = xp[:, :, a:a + stride * Ho:stride, b:b + stride * Wo:stride]
                out += np.einsum("nchw,fc->nfhw", win, d["Wt"][:, :, a, b].astype(np.float64))
        return {"conv": out}
    return workload("conv2d", [X, Wt], [Y], [Xp],
                    lambda r: {"X": rand(r, (N, C, H, W)), "Wt": rand(r, (F, C, R, R))}, ref)


# ---- integer expressions: a reference evaluator and a random generator ----------------------

_EVAL = {
    BinKind.ADD: operator.add, BinKind.SUB: operator.sub, BinKind.MUL: operator.mul,
    BinKind.FLOORDIV: operator.floordiv, BinKind.FLOORMOD: operator.mod,
    BinKind.MIN: min, BinKind.MAX: max, BinKind.EQ: operator.eq, BinKind.NE: operator.ne,
    BinKind.LT: operator.lt, BinKind.LE: operator.le,
    BinKind.AND: lambda a, b: a and b, BinKind.OR: lambda a, b: a or b,
}


def eval_int(e, env: dict):
    """Evaluate an integer/bool expression with Python semantics (floor // and %)."""
    match e:
        case Const(value=v):
            return v
        case Var():
            return env[e]
        case BinOp(op=op, a=a, b=b):
            return _EVAL[op](eval_int(a, env), eval_int(b, env))
        case Select(cond=c, t=t, f=f):
            return eval_int(t, env) if eval_int(c, env) else eval_int(f, env)
        case Not(a=a):
            return not eval_int(a, env)
        case Cast(dtype=d, value=v):
            x = eval_int(v, env)
            return bool(x) if d == "bool" else int(x)
    raise TypeError(f"eval_int: no case for {type(e).__name__}: {e}")


def random_int_expr(rng: np.random.Generator, leaves: list, depth: int = 4):
    """A random int32 expression over ``leaves`` (Vars) with + - * // % min max and
    constants; divisors are nonzero constants (mostly positive)."""
    if depth <= 0 or rng.random() < 0.2:
        if rng.random() < 0.7:
            return leaves[rng.integers(len(leaves))]
        return lt.const(int(rng.integers(-8, 9)), "int32")
    a = random_int_expr(rng, leaves, depth - 1)
    op = rng.choice(["+", "-", "*c", "*", "//", "%", "min", "max", "+c"])
    c = int(rng.integers(1, 10)) * (1 if rng.random() < 0.85 else -1)
    if op == "+":
        return a + random_int_expr(rng, leaves, depth - 1)
    if op == "-":
        return a - random_int_expr(rng, leaves, depth - 1)
    if op == "+c":
        return a + int(rng.integers(-40, 41))
    if op == "*c":
        return a * c
    if op == "*":
        return a * random_int_expr(rng, leaves, depth - 2)
    if op == "//":
        return a // c
    if op == "%":
        return a % c
    return getattr(lt, str(op))(a, random_int_expr(rng, leaves, depth - 1))


def shared_tiles(w: Workload):
    """matmul with A and B staged in shared tiles per 8 x 8 work-group, C accumulated in a
    local tile per work-item (the opencl tests' and the cli's)."""
    A, B, C = w["A"], w["B"], w["C"]
    s = w.schedule()
    AS, BS = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    by, bx, ty, tx = s[C].tile(i, j, 8, 8)
    for v, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"),
                   (tx, "threadIdx.x")):
        s[C].bind(v, tag)
    s[CL].compute_at(s[C], bx)
    ci, cj = s[CL].op.axis
    ko, _ = s[CL].split(s[CL].op.reduce_axis[0], factor=8)
    s[CL].reorder(ko, ci, cj)
    s[CL].bind(ci, "threadIdx.y")
    s[CL].bind(cj, "threadIdx.x")
    for X in (AS, BS):
        s[X].compute_at(s[CL], ko)
        a0, a1 = s[X].op.axis
        s[X].bind(a0, "threadIdx.y")
        s[X].bind(a1, "threadIdx.x")
    return s


def prefetches(src: str, name: str) -> bool:
    """Whether generated C prefetches buffer ``name``: a row of a few lines inline
    (``(uintptr_t)name + ...``, c_codegen.visit_Prefetch), a longer one through the helper."""
    return f"= (uintptr_t){name} + " in src or f"lt_prefetch((uintptr_t){name}, " in src
