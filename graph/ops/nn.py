"""Neural-network operators: Conv, Gemm, MatMul, BatchNormalization, LayerNormalization,
Softmax, LogSoftmax.

Conv, Gemm and MatMul are contractions written as ONE reduction whose body multiplies two
loads (the form the auto scheduler tiles), with padding as a separate injective stage before
it and bias / alpha / beta as an elementwise stage after it (an epilogue the scheduler fuses
into the tiles): OUT_ELEMWISE_FUSABLE, as in TVM. BatchNormalization (inference) is one
broadcast expression per element. LayerNormalization, Softmax and LogSoftmax are multi-stage
(row statistics, then an elementwise pass): OPAQUE, each its own kernel, as TVM marks softmax;
their inputs are not fused into them, and the auto scheduler's row sketch takes the kernel.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

from ..registry import OpDef, OpPattern, register
from ._util import (broadcast_index, broadcast_shapes, broadcasts_to, check_rank, int_list,
                    norm_axis, pad_const, pad_types, refuse_extra_outputs, same_dtype, te_name,
                    tt)
from ._window import window

DOT_FLOATS = ("float16", "float32", "float64")
MATMUL_DTYPES = DOT_FLOATS + ("int32", "int64", "uint32", "uint64")


def _acc(v):
    """A float16 operand widened: contractions accumulate float16 in float32."""
    return lt.cast(v, "float32") if v.dtype == "float16" else v


def _narrow(ctx, T, name_suffix: str = ""):
    """``T`` cast back to the node's dtype, as a final elementwise stage, where it differs."""
    d = ctx.out_types[0].dtype
    if T.dtype == d:
        return T
    return lt.compute(T.shape, lambda *i: lt.cast(T[i], d), name=te_name(ctx, name_suffix))


def _np_acc(x: np.ndarray) -> np.ndarray:
    """The array in a wide type for reference arithmetic (the result is cast back)."""
    return x.astype(np.float64) if x.dtype.kind == "f" else x


# ---- Conv --------------------------------------------------------------------------------------

def _conv_window(ctx):
    xs, ws = ctx.in_types[0].shape, ctx.in_types[1].shape
    kernel = list(ws[2:])
    ks = ctx.attrs["kernel_shape"]
    if ks is not None and int_list(ctx, "kernel_shape", ks) != kernel:
        raise ctx.error(f"kernel_shape={list(ks)} does not match the weight's spatial shape "
                        f"{kernel}")
    return window(ctx, xs[2:], kernel)


def _conv_infer(ctx):
    d = same_dtype(ctx, DOT_FLOATS)
    r = check_rank(ctx, 0, 3, 99, "X: N x C x spatial...")
    check_rank(ctx, 1, r, r, f"W: M x C/group x kernel..., rank {r} like X")
    xs, ws = ctx.in_types[0].shape, ctx.in_types[1].shape
    g = ctx.attrs["group"]
    if not isinstance(g, int) or g < 1 or xs[1] % g or ws[0] % g:
        raise ctx.error(f"group={g} must be a positive int dividing the input channels "
                        f"({xs[1]}) and the output channels ({ws[0]})")
    if ws[1] * g != xs[1]:
        raise ctx.error(f"the weight has {ws[1]} input channels per group; X has {xs[1]} "
                        f"channels in {g} group(s), so it needs {xs[1] // g}")
    if ctx.has_input(2) and ctx.in_types[2].shape != (ws[0],):
        raise ctx.error(f"the bias (input 2) must have shape [{ws[0]}] (one per output "
                        f"channel); got {list(ctx.in_types[2].shape)}")
    w = _conv_window(ctx)
    return [tt((xs[0], ws[0], *w.out), d)]


def _conv_reference(ctx, xs):
    x, wt, b = xs[0], xs[1], xs[2] if len(xs) > 2 else None
    w = _conv_window(ctx)
    g = ctx.attrs["group"]
    nd = x.ndim - 2
    xp = np.pad(_np_acc(x), [(0, 0), (0, 0), *zip(w.begin, w.end)])
    N, M, cig = x.shape[0], wt.shape[0], wt.shape[1]
    out = np.zeros((N, M, *w.out))
    for gi in range(g):
        xg = xp[:, gi * cig:(gi + 1) * cig]
        wg = _np_acc(wt[gi * (M // g):(gi + 1) * (M // g)])
        for tap in np.ndindex(*w.kernel):
            sl = tuple(slice(t * dl, t * dl + (o - 1) * s + 1, s)
                       for t, dl, o, s in zip(tap, w.dilations, w.out, w.strides))
            patch = xg[(slice(None), slice(None), *sl)]            # N, cig, out...
            wk = wg[(slice(None), slice(None), *tap)]               # Mg, cig
            out[:, gi * (M // g):(gi + 1) * (M // g)] += np.einsum("nc...,mc->nm...", patch, wk)
    if b is not None:
        out += b.reshape((1, M) + (1,) * nd)
    return [out.astype(x.dtype)]


def _conv_compute(ctx, ts):
    X, W, B = ts[0], ts[1], ts[2] if len(ts) > 2 else None
    w = _conv_window(ctx)
    g = ctx.attrs["group"]
    M, cig = W.shape[0], W.shape[1]
    mog = M // g
    P = pad_const(X, (0, 0, *w.begin), (0, 0, *w.end), 0, te_name(ctx, "pad"))
    rc = lt.reduce_axis(cig, name="rc") if cig > 1 else None
    rk = [lt.reduce_axis(k, name=f"r{d}") if k > 1 else None for d, k in enumerate(w.kernel)]
    axes = [a for a in (rc, *rk) if a is not None]

    def body(*i):
        n, m, o = i[0], i[1], i[2:]
        c = 0 if g == 1 else (m // mog) * cig
        c = c + rc if rc is not None else c
        xi = [_tap(o[d], w.strides[d], rk[d], w.dilations[d]) for d in range(len(o))]
        wi = (m, 0 if rc is None else rc, *(r if r is not None else 0 for r in rk))
        v = _acc(P[(n, c, *xi)]) * _acc(W[wi])
        return lt.sum(v, axis=axes) if axes else v

    shape = ctx.out_types[0].shape
    f16 = X.dtype == "float16"
    C = lt.compute(shape, body, name=te_name(ctx, "conv" if B is not None or f16 else ""))
    if B is None:
        return [_narrow(ctx, C)]
    Y = lt.compute(shape, lambda *i: C[i] + _acc(B[i[1]]), name=te_name(ctx, "bias" if f16 else ""))
    return [_narrow(ctx, Y)]


def _tap(o, stride: int, r, dil: int):
    """The input coordinate of output ``o`` and kernel tap ``r`` (before padding)."""
    e = o * stride if stride != 1 else o
    if r is None:
        return e
    return e + (r * dil if dil != 1 else r)


register(OpDef(
    "Conv", OpPattern.OUT_ELEMWISE_FUSABLE, _conv_infer, _conv_reference, _conv_compute,
    attrs={"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
           "pads": None, "strides": None},
    inputs=(2, 3),
    doc="N-d convolution (1-D, 2-D, 3-D...): groups incl. depthwise, strides, pads, dilations, "
        "auto_pad, optional bias."))


# ---- Gemm and MatMul -----------------------------------------------------------------------

def _gemm_dims(ctx):
    sa, sb = ctx.in_types[0].shape, ctx.in_types[1].shape
    ta, tb = ctx.attrs["transA"], ctx.attrs["transB"]
    M, K = (sa[1], sa[0]) if ta else sa
    K2, N = (sb[1], sb[0]) if tb else sb
    return M, K, K2, N


def _gemm_infer(ctx):
    d = same_dtype(ctx, MATMUL_DTYPES)
    check_rank(ctx, 0, 2, what="A")
    check_rank(ctx, 1, 2, what="B")
    M, K, K2, N = _gemm_dims(ctx)
    if K != K2:
        raise ctx.error(f"A{' (transposed)' if ctx.attrs['transA'] else ''} is {M}x{K} and "
                        f"B{' (transposed)' if ctx.attrs['transB'] else ''} is {K2}x{N}: the "
                        "inner sizes differ")
    if ctx.has_input(2):
        sc = ctx.in_types[2].shape
        if not broadcasts_to(sc, (M, N)):
            raise ctx.error(f"C (input 2) of shape {list(sc)} does not broadcast to the "
                            f"output [{M}, {N}]")
    return [tt((M, N), d)]


def _gemm_reference(ctx, xs):
    a, b = _np_acc(xs[0]), _np_acc(xs[1])
    a = a.T if ctx.attrs["transA"] else a
    b = b.T if ctx.attrs["transB"] else b
    y = ctx.attrs["alpha"] * (a @ b)
    if len(xs) > 2 and xs[2] is not None:
        y = y + ctx.attrs["beta"] * _np_acc(xs[2])
    return [np.asarray(y).astype(xs[0].dtype)]


def _gemm_compute(ctx, ts):
    A, B = ts[0], ts[1]
    C = ts[2] if len(ts) > 2 else None
    M, K, _, N = _gemm_dims(ctx)
    ta, tb = ctx.attrs["transA"], ctx.attrs["transB"]
    alpha, beta = ctx.attrs["alpha"], ctx.attrs["beta"]
    k = lt.reduce_axis(K, name="k")
    f16 = A.dtype == "float16"
    epilogue = alpha != 1.0 or (C is not None and beta != 0.0)
    P = lt.compute((M, N), lambda i, j: lt.sum(_acc(A[k, i] if ta else A[i, k]) *
                                               _acc(B[j, k] if tb else B[k, j]), axis=k),
                   name=te_name(ctx, "mm" if epilogue or f16 else ""))
    if not epilogue:
        return [_narrow(ctx, P)]

    def body(i, j):
        v = P[i, j] if alpha == 1.0 else P[i, j] * alpha
        if C is None or beta == 0.0:
            return v
        c = _acc(C[broadcast_index(C.shape, (M, N), (i, j))])
        return v + (c if beta == 1.0 else c * beta)

    return [_narrow(ctx, lt.compute((M, N), body, name=te_name(ctx, "ab" if f16 else "")))]


register(OpDef(
    "Gemm", OpPattern.OUT_ELEMWISE_FUSABLE, _gemm_infer, _gemm_reference, _gemm_compute,
    attrs={"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}, inputs=(2, 3),
    doc="Y = alpha * A' B' + beta * C (A', B' optionally transposed; C broadcast)."))


def _matmul_shapes(ctx):
    sa, sb = ctx.in_types[0].shape, ctx.in_types[1].shape
    a2 = (1, *sa) if len(sa) == 1 else sa
    b2 = (*sb, 1) if len(sb) == 1 else sb
    return sa, sb, a2, b2


def _matmul_infer(ctx):
    d = same_dtype(ctx, MATMUL_DTYPES)
    for k in (0, 1):
        check_rank(ctx, k, 1, 99, "A" if k == 0 else "B")
    sa, sb, a2, b2 = _matmul_shapes(ctx)
    if a2[-1] != b2[-2]:
        raise ctx.error(f"shapes {list(sa)} and {list(sb)} do not multiply: A has {a2[-1]} "
                        f"columns, B has {b2[-2]} rows")
    batch = broadcast_shapes(ctx, [a2[:-2], b2[:-2]])
    out = batch + (() if len(sa) == 1 else (a2[-2],)) + (() if len(sb) == 1 else (b2[-1],))
    return [tt(out, d)]


def _matmul_reference(ctx, xs):
    return [np.asarray(np.matmul(_np_acc(xs[0]), _np_acc(xs[1]))).astype(xs[0].dtype)]


def _matmul_compute(ctx, ts):
    A, B = ts
    sa, sb, a2, b2 = _matmul_shapes(ctx)
    batch = broadcast_shapes(ctx, [a2[:-2], b2[:-2]])
    nb = len(batch)
    k = lt.reduce_axis(a2[-1], name="k")

    def body(*o):
        i = 0 if len(sa) == 1 else o[nb]
        j = 0 if len(sb) == 1 else o[-1]
        ai = (k,) if len(sa) == 1 else (*broadcast_index(sa[:-2], batch, o[:nb]), i, k)
        bi = (k,) if len(sb) == 1 else (*broadcast_index(sb[:-2], batch, o[:nb]), k, j)
        return lt.sum(_acc(A[ai]) * _acc(B[bi]), axis=k)

    f16 = A.dtype == "float16"
    return [_narrow(ctx, lt.compute(ctx.out_types[0].shape, body,
                                    name=te_name(ctx, "mm" if f16 else "")))]


register(OpDef(
    "MatMul", OpPattern.OUT_ELEMWISE_FUSABLE, _matmul_infer, _matmul_reference, _matmul_compute,
    inputs=(2, 2), doc="numpy's matmul: batched, batch dimensions broadcast, 1-D operands."))


# ---- normalizations --------------------------------------------------------------------------

def _bn_infer(ctx):
    d = same_dtype(ctx, ("float16",) + DOT_FLOATS)
    if ctx.attrs["training_mode"]:
        raise ctx.error("training_mode=1 is not supported (inference only: the running mean "
                        "and variance are inputs, never updated)")
    refuse_extra_outputs(ctx, ("running_mean", "running_var"),
                         "they only exist in training mode")
    xs = ctx.in_types[0].shape
    check_rank(ctx, 0, 2, 99, "X: N x C x ...")
    for k, what in enumerate(("scale", "B", "input_mean", "input_var"), 1):
        if ctx.in_types[k].shape != (xs[1],):
            raise ctx.error(f"input {k} ({what}) must have shape [{xs[1]}] (one per channel of "
                            f"X); got {list(ctx.in_types[k].shape)}")
    return pad_types(ctx, [tt(xs, d)])


def _bn_reference(ctx, xs):
    x, scale, b, mean, var = (_np_acc(a) for a in xs[:5])
    shp = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(shp)) / np.sqrt(var.reshape(shp) + ctx.attrs["epsilon"])
    return [(y * scale.reshape(shp) + b.reshape(shp)).astype(xs[0].dtype)]


def _bn_compute(ctx, ts):
    X, S, B, Mn, V = ts[:5]
    eps = ctx.attrs["epsilon"]
    return [lt.compute(X.shape, lambda *i: (X[i] - Mn[i[1]]) * (S[i[1]] / lt.sqrt(V[i[1]] + eps))
                       + B[i[1]], name=te_name(ctx))]


register(OpDef(
    "BatchNormalization", OpPattern.BROADCAST, _bn_infer, _bn_reference, _bn_compute,
    attrs={"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0}, inputs=(5, 5), outputs=1,
    doc="Inference batch normalization over axis 1 (the Y output only)."))


def _ln_axis(ctx) -> int:
    return norm_axis(ctx, ctx.attrs["axis"], len(ctx.in_types[0].shape))


def _ln_infer(ctx):
    d = same_dtype(ctx, ("float16",) + DOT_FLOATS)
    xs = ctx.in_types[0].shape
    check_rank(ctx, 0, 1, 99, "X")
    a = _ln_axis(ctx)
    for k, what in ((1, "Scale"), (2, "B")):
        if ctx.has_input(k):
            s = ctx.in_types[k].shape
            if len(s) > len(xs) - a or not broadcasts_to(s, xs):
                raise ctx.error(f"input {k} ({what}) of shape {list(s)} does not broadcast to "
                                f"the normalized shape {list(xs[a:])}")
    stat = tt(xs[:a] + (1,) * (len(xs) - a), d)
    return [tt(xs, d), stat, stat][:max(1, len(ctx.node.outputs))]


def _ln_reference(ctx, xs):
    x = _np_acc(xs[0])
    a = _ln_axis(ctx)
    axes = tuple(range(a, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + ctx.attrs["epsilon"])
    y = (x - mean) * inv * _np_acc(xs[1])
    if len(xs) > 2 and xs[2] is not None:
        y = y + _np_acc(xs[2])
    d = xs[0].dtype
    return [y.astype(d), mean.astype(d), inv.astype(d)]


def _ln_compute(ctx, ts):
    X, S = ts[0], ts[1]
    B = ts[2] if len(ts) > 2 else None
    shape, a, eps = X.shape, _ln_axis(ctx), ctx.attrs["epsilon"]
    outer, inner = shape[:a], shape[a:]
    n = int(np.prod(inner))

    def red(k):
        return [lt.reduce_axis(s, name=f"{k}{d}") for d, s in enumerate(inner)]

    k1, k2 = red("k"), red("j")
    T = lt.compute(outer, lambda *o: lt.sum(X[(*o, *k1)], axis=k1), name=te_name(ctx, "sum"))
    Mn = lt.compute(outer, lambda *o: T[o] * (1.0 / n), name=te_name(ctx, "mean"))

    def sq(o, k):
        dev = X[(*o, *k)] - Mn[o]
        return dev * dev
    V = lt.compute(outer, lambda *o: lt.sum(sq(o, k2), axis=k2), name=te_name(ctx, "sqsum"))
    R = lt.compute(outer, lambda *o: lt.rsqrt(V[o] * (1.0 / n) + eps), name=te_name(ctx, "rstd"))

    def body(*i):
        o = i[:a]
        y = (X[i] - Mn[o]) * R[o] * S[broadcast_index(S.shape, shape, i)]
        return y + B[broadcast_index(B.shape, shape, i)] if B is not None else y

    outs = [lt.compute(shape, body, name=te_name(ctx))]
    stat_shape = outer + (1,) * len(inner)
    for k, T in ((1, Mn), (2, R)):
        if len(ctx.node.outputs) > k and ctx.node.outputs[k]:
            outs.append(lt.compute(stat_shape, lambda *i, T=T: T[i[:a]],
                                   name=te_name(ctx, ("mean", "invstd")[k - 1] + "_out")))
        elif len(ctx.node.outputs) > k:
            outs.append(None)
    return outs


register(OpDef(
    "LayerNormalization", OpPattern.OPAQUE, _ln_infer, _ln_reference, _ln_compute,
    attrs={"axis": -1, "epsilon": 1e-5, "stash_type": 1}, inputs=(2, 3),
    outputs=lambda attrs, n: 1,
    doc="Normalization over axes [axis, rank); optional Mean and InvStdDev outputs."))


# ---- Softmax, LogSoftmax -----------------------------------------------------------------

def _softmax_infer(ctx):
    d = same_dtype(ctx, ("float16",) + DOT_FLOATS)
    check_rank(ctx, 0, 1, 99, "input")
    norm_axis(ctx, ctx.attrs["axis"], len(ctx.in_types[0].shape))
    return [tt(ctx.in_types[0].shape, d)]


def _softmax_np(ctx, x, log: bool):
    a = ctx.attrs["axis"]
    xd = _np_acc(x)
    z = xd - xd.max(axis=a, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=a, keepdims=True)
    return (z - np.log(s) if log else e / s).astype(x.dtype)


def _row_stats(ctx, X, log: bool):
    """The max over the axis and the sum of exp(x - max); with ``log`` the exponentials are
    only inside the sum, else a stage of their own (the output divides them)."""
    shape, a = X.shape, norm_axis(ctx, ctx.attrs["axis"], len(X.shape))
    outer = shape[:a] + shape[a + 1:]
    k1, k2 = lt.reduce_axis(shape[a], name="k"), lt.reduce_axis(shape[a], name="j")

    def at(o, k):
        return (*o[:a], k, *o[a:])
    Mx = lt.compute(outer, lambda *o: lt.max(X[at(o, k1)], axis=k1), name=te_name(ctx, "max"))
    E = None
    if log:
        S = lt.compute(outer, lambda *o: lt.sum(lt.exp(X[at(o, k2)] - Mx[o]), axis=k2),
                       name=te_name(ctx, "sum"))
    else:
        E = lt.compute(shape, lambda *i: lt.exp(X[i] - Mx[i[:a] + i[a + 1:]]),
                       name=te_name(ctx, "exp"))
        S = lt.compute(outer, lambda *o: lt.sum(E[at(o, k2)], axis=k2), name=te_name(ctx, "sum"))
    return a, Mx, E, S


def _softmax_compute(ctx, ts):
    X = ts[0]
    a, _, E, S = _row_stats(ctx, X, log=False)
    return [lt.compute(X.shape, lambda *i: E[i] / S[i[:a] + i[a + 1:]], name=te_name(ctx))]


def _logsoftmax_compute(ctx, ts):
    X = ts[0]
    a, Mx, _, S = _row_stats(ctx, X, log=True)
    return [lt.compute(X.shape, lambda *i: X[i] - Mx[i[:a] + i[a + 1:]] -
                       lt.log(S[i[:a] + i[a + 1:]]), name=te_name(ctx))]


register(OpDef(
    "Softmax", OpPattern.OPAQUE, _softmax_infer,
    lambda ctx, xs: [_softmax_np(ctx, xs[0], log=False)], _softmax_compute,
    attrs={"axis": -1}, doc="Softmax over one axis (opset 13 semantics)."))
register(OpDef(
    "LogSoftmax", OpPattern.OPAQUE, _softmax_infer,
    lambda ctx, xs: [_softmax_np(ctx, xs[0], log=True)], _logsoftmax_compute,
    attrs={"axis": -1}, doc="log(Softmax) over one axis, computed stably (opset 13)."))

