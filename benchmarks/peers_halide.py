"""Halide pipelines of the five workloads of ``benchmarks/peers.py``, with hand schedules.

Each ``build_<workload>(args, inputs, output)`` returns a zero-argument callable that runs the
JIT-compiled pipeline on the numpy arrays (wrapped as Halide buffers: numpy's last axis is
Halide's ``x``), writing ``output`` in place. The schedules follow Halide's own apps and
performance tests (the "best hand" column of the issue's table): vector widths come from the
JIT target (``natural_vector_size``), never from constants of one machine.

Needs ``pip install halide`` (Halide 21's Python bindings); ``peers.py`` reports the workload
as skipped when the import fails. ``HL_NUM_THREADS`` sets the thread pool's size.
"""
from __future__ import annotations

from collections.abc import Callable

import halide as hl
import numpy as np

_X, _Y = hl.Var("x"), hl.Var("y")


def _vec() -> int:
    return hl.get_jit_target_from_environment().natural_vector_size(hl.Float(32))


def _runner(out_func: hl.Func, output: np.ndarray) -> Callable[[], None]:
    out_func.compile_jit()
    buf = hl.Buffer(output)
    return lambda: out_func.realize(buf)


def build_sgemm(args, inputs, output) -> Callable[[], None]:
    """C = A @ B with B packed into panels of two vectors' width (computed once per call, in
    parallel) and an 8-row x 2-vector register tile accumulating over the whole of k; threads
    take column panels, so a panel stays in L2 while every row tile streams past it."""
    N, M, K = args
    a, b = (hl.Buffer(x) for x in inputs)
    v = _vec()
    tx, ty = 2 * v, 8
    xi, xo, yi, yo, k = hl.Var("xi"), hl.Var("xo"), hl.Var("yi"), hl.Var("yo"), hl.Var("k")
    r = hl.RDom([(0, K)])
    bp = hl.Func("b_packed")
    bp[xi, k, xo] = b[xo * tx + xi, k]
    prod = hl.Func("prod")
    prod[xi, _Y, xo] = hl.f32(0)
    prod[xi, _Y, xo] += a[r.x, _Y] * bp[xi, r.x, xo]
    out = hl.Func("sgemm")
    out[_X, _Y] = prod[_X % tx, _Y, _X // tx]
    out.bound(_X, 0, M).bound(_Y, 0, N)
    out.split(_X, xo, xi, tx).split(_Y, yo, yi, ty).reorder(xi, yi, yo, xo) \
        .vectorize(xi, v).unroll(xi).unroll(yi).parallel(xo)
    prod.compute_at(out, yo).vectorize(xi, v).unroll(xi).unroll(_Y)
    prod.update(0).reorder(xi, _Y, r.x).vectorize(xi, v).unroll(xi).unroll(_Y)
    bp.compute_root().parallel(xo).vectorize(xi, v)
    if M % tx or N % ty:
        raise ValueError(f"the Halide sgemm schedule needs M % {tx} == 0 and N % {ty} == 0; "
                         f"got M={M}, N={N}")
    return _runner(out, output)


def build_conv2d(args, inputs, output) -> Callable[[], None]:
    """NCHW 3x3 convolution: the padded input materialised once (parallel over channels), then
    threads take blocks of 8 output channels; a register tile of 8 channels x 2 vectors of
    columns accumulates over (c, ry, rx) with the channels unrolled."""
    N, C, _H, _W, K, KH, KW, stride, pad = args
    data, weight = (hl.Buffer(x) for x in inputs)
    v = _vec()
    c, n, k = hl.Var("c"), hl.Var("n"), hl.Var("k")
    padded = hl.Func("padded")
    padded[_X, _Y, c, n] = hl.BoundaryConditions.constant_exterior(data, 0)[_X - pad, _Y - pad,
                                                                           c, n]
    r = hl.RDom([(0, KW), (0, KH), (0, C)])
    conv = hl.Func("conv")
    conv[_X, _Y, k, n] = hl.f32(0)
    conv[_X, _Y, k, n] += padded[_X * stride + r.x, _Y * stride + r.y, r.z, n] \
        * weight[r.x, r.y, r.z, k]
    out = hl.Func("conv2d")
    out[_X, _Y, k, n] = conv[_X, _Y, k, n]
    OH, OW = output.shape[2], output.shape[3]
    out.bound(_X, 0, OW).bound(_Y, 0, OH).bound(k, 0, K).bound(n, 0, N)
    xo, xi, ko, ki = hl.Var("xo"), hl.Var("xi"), hl.Var("ko"), hl.Var("ki")
    tk = 8 if K % 8 == 0 else 1
    out.split(k, ko, ki, tk).split(_X, xo, xi, v, hl.TailStrategy.ShiftInwards) \
        .reorder(xi, ki, xo, _Y, ko, n).vectorize(xi).unroll(ki).parallel(ko)
    conv.compute_at(out, xo).vectorize(_X, v).unroll(k)
    conv.update(0).reorder(_X, k, r.x, r.y, r.z).vectorize(_X, v).unroll(k)
    padded.compute_root().parallel(c).vectorize(_X, v)
    return _runner(out, output)


def _rfactored(f: hl.Func, r: hl.RDom, v: int, at: hl.Func, at_var: hl.Var) -> None:
    """Vectorize a row reduction by ``v`` lanes of partials (rfactor), both computed per row."""
    rxo, rxi, u = hl.RVar("rxo"), hl.RVar("rxi"), hl.Var("u")
    f.compute_at(at, at_var)
    intm = f.update(0).split(r.x, rxo, rxi, v).rfactor(rxi, u)
    intm.compute_at(at, at_var).vectorize(u)
    intm.update(0).vectorize(u)


def build_softmax(args, inputs, output) -> Callable[[], None]:
    """Row softmax fused per row (Halide's "fused per row"): row max and sum vectorized through
    rfactor, the exponentials buffered per row, the output a multiply by the reciprocal."""
    N, M = args
    (x,) = (hl.Buffer(a) for a in inputs)
    v = _vec()
    r = hl.RDom([(0, M)])
    mx = hl.Func("rowmax")
    mx[_Y] = hl.f32(-np.inf)
    mx[_Y] = hl.max(mx[_Y], x[r.x, _Y])
    e = hl.Func("e")
    e[_X, _Y] = hl.exp(x[_X, _Y] - mx[_Y])
    sm = hl.Func("rowsum")
    sm[_Y] = hl.f32(0)
    sm[_Y] += e[r.x, _Y]
    out = hl.Func("softmax")
    out[_X, _Y] = e[_X, _Y] * (hl.f32(1) / sm[_Y])
    out.bound(_X, 0, M).bound(_Y, 0, N)
    out.parallel(_Y).vectorize(_X, v)
    e.compute_at(out, _Y).vectorize(_X, v)
    for f in (mx, sm):
        _rfactored(f, r, v, out, _Y)
    return _runner(out, output)


def build_layernorm(args, inputs, output, eps: float = 1e-5) -> Callable[[], None]:
    """Layer normalisation per row: two-pass mean and variance, each reduction vectorized
    through rfactor and computed per row; the output pass vectorized; rows to threads."""
    N, D = args
    x, gamma, beta = (hl.Buffer(a) for a in inputs)
    v = _vec()
    r = hl.RDom([(0, D)])
    s1 = hl.Func("rowsum")
    s1[_Y] = hl.f32(0)
    s1[_Y] += x[r.x, _Y]
    mean = s1[_Y] * hl.f32(1.0 / D)
    s2 = hl.Func("rowsq")
    s2[_Y] = hl.f32(0)
    d = x[r.x, _Y] - mean
    s2[_Y] += d * d
    rstd = hl.f32(1) / hl.sqrt(s2[_Y] * hl.f32(1.0 / D) + hl.f32(eps))
    out = hl.Func("layernorm")
    out[_X, _Y] = (x[_X, _Y] - mean) * rstd * gamma[_X] + beta[_X]
    out.bound(_X, 0, D).bound(_Y, 0, N)
    out.parallel(_Y).vectorize(_X, v)
    for f in (s1, s2):
        _rfactored(f, r, v, out, _Y)
    return _runner(out, output)


def build_blur(args, inputs, output, variant: str = "inline") -> Callable[[], None]:
    """Halide's two-stage 3x3 box blur. ``inline``: blur_x inlined into blur_y, vectorized,
    strips of 32 rows to threads (the table's best); ``tiled``: the tutorial schedule, blur_x
    computed per 256 x 32 tile of blur_y."""
    H, W = args
    (inp,) = (hl.Buffer(a) for a in inputs)
    v = _vec()
    bx = hl.Func("blur_x")
    bx[_X, _Y] = (inp[_X, _Y] + inp[_X + 1, _Y] + inp[_X + 2, _Y]) / hl.f32(3)
    by = hl.Func("blur_y")
    by[_X, _Y] = (bx[_X, _Y] + bx[_X, _Y + 1] + bx[_X, _Y + 2]) / hl.f32(3)
    by.bound(_X, 0, W).bound(_Y, 0, H)
    xi, yi, yo = hl.Var("xi"), hl.Var("yi"), hl.Var("yo")
    if variant == "inline":
        by.split(_Y, yo, yi, 32, hl.TailStrategy.GuardWithIf).parallel(yo) \
            .vectorize(_X, v, hl.TailStrategy.ShiftInwards)
    elif variant == "tiled":
        by.tile(_X, _Y, xi, yi, 256, 32, hl.TailStrategy.GuardWithIf) \
            .vectorize(xi, v).parallel(_Y)
        bx.compute_at(by, _X).vectorize(_X, v)
    else:
        raise ValueError(f"build_blur: unknown variant {variant!r}; use 'inline' or 'tiled'")
    return _runner(by, output)


BUILDERS = {"sgemm": build_sgemm, "conv2d": build_conv2d, "softmax": build_softmax,
            "layernorm": build_layernorm, "blur": build_blur}
