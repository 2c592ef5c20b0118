"""Halide pipelines of the five workloads of ``benchmarks/peers.py``, with hand schedules and
scheduled by Halide's Adams2019 auto scheduler.

Each ``build_<workload>(args, inputs, output, variant=...)`` returns a zero-argument callable
that runs the JIT-compiled pipeline on the numpy arrays (wrapped as Halide buffers: numpy's
last axis is Halide's ``x``), writing ``output`` in place. Variants:

* ``hand`` (blur: ``inline`` or ``tiled``): the schedules follow Halide's own apps and
  performance tests (the "best hand" column of the issue's table); vector widths come from the
  JIT target (``natural_vector_size``), never from constants of one machine.
* ``adams2019``: the same algorithm with no schedule, scheduled by the Adams2019 plugin of the
  halide wheel (``lib64/libautoschedule_adams2019.so`` next to the package) with
  ``parallelism`` = ``HL_NUM_THREADS`` (peers.py sets it to ``--threads``; default: all CPUs)
  and its built-in cost model. Estimates: the output's real extents (``set_estimates``); the
  inputs are concrete ``hl.Buffer`` objects, as in the hand schedules, so Halide knows their sizes
  (estimates exist only for ``ImageParam`` inputs). sgemm's algorithm is the plain
  ``C(x, y) = sum_k A(k, y) * B(x, k)``: the hand schedule's packed-B panel Func is a
  scheduling decision written into the algorithm, so the auto scheduler does not get it.

Needs ``pip install halide`` (Halide 21's Python bindings); ``peers.py`` reports the workload
as skipped when the import fails. ``HL_NUM_THREADS`` sets the thread pool's size.
"""
from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path

import halide as hl
import numpy as np

_X, _Y = hl.Var("x"), hl.Var("y")
HAND, ADAMS = "hand", "adams2019"
PLUGINS = {ADAMS: ("Adams2019", "libautoschedule_adams2019.so")}


def _vec() -> int:
    return hl.get_jit_target_from_environment().natural_vector_size(hl.Float(32))


def _runner(out_func: hl.Func, output: np.ndarray) -> Callable[[], None]:
    out_func.compile_jit()
    buf = hl.Buffer(output)
    return lambda: out_func.realize(buf)


def _check_variant(workload: str, variant: str, hand: tuple[str, ...] = (HAND,)) -> None:
    if variant not in (*hand, ADAMS):
        raise ValueError(f"build_{workload}: unknown variant {variant!r}; use one of "
                         f"{', '.join(map(repr, (*hand, ADAMS)))}")


def plugin_path(variant: str = ADAMS) -> Path:
    """The auto scheduler plugin of the halide wheel; FileNotFoundError naming where it was
    looked for when the wheel lacks it."""
    name = PLUGINS[variant][1]
    pkg = Path(hl.__file__).resolve().parent
    tried = [pkg / d / name for d in ("lib64", "lib")]
    for p in tried:
        if p.is_file():
            return p
    raise FileNotFoundError(f"the {PLUGINS[variant][0]} auto scheduler plugin {name} is not in "
                            f"the halide package ({', '.join(map(str, tried))}); install a "
                            "halide wheel that ships it (pip install 'halide>=19')")


@functools.cache
def _load_plugin(variant: str) -> str:
    hl.load_plugin(str(plugin_path(variant)))
    return PLUGINS[variant][0]


def auto_threads() -> int:
    """The ``parallelism`` given to the auto scheduler: ``HL_NUM_THREADS``, else all CPUs."""
    return int(os.environ.get("HL_NUM_THREADS") or os.cpu_count() or 1)


def _autoscheduled(out: hl.Func, output: np.ndarray,
                   variant: str = ADAMS) -> Callable[[], None]:
    """Schedule the unscheduled pipeline ending in ``out`` with the auto scheduler, given the
    output's extents as estimates, and JIT-compile it."""
    name = _load_plugin(variant)
    out.set_estimates([hl.Range(0, n) for n in reversed(output.shape)])
    target = hl.get_jit_target_from_environment()
    t0 = time.perf_counter()
    hl.Pipeline(out).apply_autoscheduler(
        target, hl.AutoschedulerParams(name, {"parallelism": str(auto_threads())}))
    t1 = time.perf_counter()
    run = _runner(out, output)
    run.note = (f"{name} scheduled in {t1 - t0:.1f} s, JIT-compiled in "
                f"{time.perf_counter() - t1:.1f} s")
    return run


def build_sgemm(args, inputs, output, variant: str = HAND) -> Callable[[], None]:
    """C = A @ B with B packed into panels of two vectors' width (computed once per call, in
    parallel) and an 8-row x 2-vector register tile accumulating over the whole of k; threads
    take column panels, so a panel stays in L2 while every row tile streams past it. Adams2019
    gets the plain sum over k (module docstring)."""
    _check_variant("sgemm", variant)
    N, M, K = args
    a, b = (hl.Buffer(x) for x in inputs)
    if variant == ADAMS:
        r = hl.RDom([(0, K)])
        c = hl.Func("sgemm")
        c[_X, _Y] = hl.f32(0)
        c[_X, _Y] += a[r.x, _Y] * b[_X, r.x]
        return _autoscheduled(c, output)
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


def build_conv2d(args, inputs, output, variant: str = HAND) -> Callable[[], None]:
    """NCHW 3x3 convolution: the padded input materialised once (parallel over channels), then
    threads take blocks of 8 output channels; a register tile of 8 channels x 2 vectors of
    columns accumulates over (c, ry, rx) with the channels unrolled."""
    _check_variant("conv2d", variant)
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
    if variant == ADAMS:
        return _autoscheduled(out, output)
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


def build_softmax(args, inputs, output, variant: str = HAND) -> Callable[[], None]:
    """Row softmax fused per row (Halide's "fused per row"): row max and sum vectorized through
    rfactor, the exponentials buffered per row, the output a multiply by the reciprocal."""
    _check_variant("softmax", variant)
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
    if variant == ADAMS:
        return _autoscheduled(out, output)
    out.bound(_X, 0, M).bound(_Y, 0, N)
    out.parallel(_Y).vectorize(_X, v)
    e.compute_at(out, _Y).vectorize(_X, v)
    for f in (mx, sm):
        _rfactored(f, r, v, out, _Y)
    return _runner(out, output)


def build_layernorm(args, inputs, output, eps: float = 1e-5,
                    variant: str = HAND) -> Callable[[], None]:
    """Layer normalisation per row: two-pass mean and variance, each reduction vectorized
    through rfactor and computed per row; the output pass vectorized; rows to threads."""
    _check_variant("layernorm", variant)
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
    if variant == ADAMS:
        return _autoscheduled(out, output)
    out.bound(_X, 0, D).bound(_Y, 0, N)
    out.parallel(_Y).vectorize(_X, v)
    for f in (s1, s2):
        _rfactored(f, r, v, out, _Y)
    return _runner(out, output)


def build_blur(args, inputs, output, variant: str = "inline") -> Callable[[], None]:
    """Halide's two-stage 3x3 box blur. ``inline``: blur_x inlined into blur_y, vectorized,
    strips of 32 rows to threads (the table's best); ``tiled``: the tutorial schedule, blur_x
    computed per 256 x 32 tile of blur_y; ``adams2019``: scheduled by Adams2019."""
    _check_variant("blur", variant, ("inline", "tiled"))
    H, W = args
    (inp,) = (hl.Buffer(a) for a in inputs)
    v = _vec()
    bx = hl.Func("blur_x")
    bx[_X, _Y] = (inp[_X, _Y] + inp[_X + 1, _Y] + inp[_X + 2, _Y]) / hl.f32(3)
    by = hl.Func("blur_y")
    by[_X, _Y] = (bx[_X, _Y] + bx[_X, _Y + 1] + bx[_X, _Y + 2]) / hl.f32(3)
    if variant == ADAMS:
        return _autoscheduled(by, output)
    by.bound(_X, 0, W).bound(_Y, 0, H)
    xi, yi, yo = hl.Var("xi"), hl.Var("yi"), hl.Var("yo")
    if variant == "inline":
        by.split(_Y, yo, yi, 32, hl.TailStrategy.GuardWithIf).parallel(yo) \
            .vectorize(_X, v, hl.TailStrategy.ShiftInwards)
    else:
        by.tile(_X, _Y, xi, yi, 256, 32, hl.TailStrategy.GuardWithIf) \
            .vectorize(xi, v).parallel(_Y)
        bx.compute_at(by, _X).vectorize(_X, v)
    return _runner(by, output)


BUILDERS = {"sgemm": build_sgemm, "conv2d": build_conv2d, "softmax": build_softmax,
            "layernorm": build_layernorm, "blur": build_blur}
