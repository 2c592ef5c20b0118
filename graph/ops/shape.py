"""Operators that move data without arithmetic: Transpose, Reshape, Flatten, Squeeze,
Unsqueeze, Concat, Split, Expand.

Each is INJECTIVE (Split: TUPLE when it has several outputs): every output element reads one
computed index of an input. They are real stages, not aliases, so a fused kernel can contain
them (the auto scheduler inlines them into their readers): a reshape's index is // and %
arithmetic over groups of dimensions (see ``reshape_index``), a concat's a chain of selects.
Shapes, axes and splits are compile-time: attributes, or constant inputs in newer opsets.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

from ...errors import GraphError
from ..registry import REQUIRED, OpDef, OpPattern, register
from ._util import (broadcast_index, broadcast_shapes, ints_arg, norm_axes, norm_axis,
                    reshape_index, same_dtype, te_name, tt)


def _dtype(ctx) -> str:
    return ctx.in_types[0].dtype


def _copy(ctx, X, index):
    shape = ctx.out_types[0].shape
    return [lt.compute(shape, lambda *i: X[tuple(index(i))], name=te_name(ctx))]


# ---- Transpose -------------------------------------------------------------------------------

def _perm(ctx) -> list[int]:
    r = len(ctx.in_types[0].shape)
    p = ctx.attrs["perm"]
    perm = list(range(r))[::-1] if p is None else [int(v) for v in p]
    if sorted(perm) != list(range(r)):
        raise ctx.error(f"perm={perm} is not a permutation of the {r} axes 0..{r - 1}")
    return perm


def _transpose_compute(ctx, ts):
    perm = _perm(ctx)

    def index(i):
        idx = [None] * len(perm)
        for d, p in enumerate(perm):
            idx[p] = i[d]
        return idx
    return _copy(ctx, ts[0], index)


register(OpDef(
    "Transpose", OpPattern.INJECTIVE,
    lambda ctx: [tt([ctx.in_types[0].shape[p] for p in _perm(ctx)], _dtype(ctx))],
    lambda ctx, xs: [np.transpose(xs[0], _perm(ctx)).copy()], _transpose_compute,
    attrs={"perm": None}, doc="Permute the axes (default: reverse them)."))


# ---- Reshape, Flatten, Squeeze, Unsqueeze: one row-major copy ---------------------------------

def _reshape_infer(ctx):
    shape = ctx.in_types[0].shape
    want = ints_arg(ctx, "shape", 1, "shape")
    if want is None:
        raise ctx.error("the target shape is missing: give it as input 1 (a constant int64 "
                        "tensor) or as the attribute 'shape'")
    allowzero = ctx.attrs["allowzero"]
    out = []
    for d, s in enumerate(want):
        if s == 0 and not allowzero:
            if d >= len(shape):
                raise ctx.error(f"shape {want}: entry {d} is 0 (copy the input's dimension) "
                                f"but the input {list(shape)} has only {len(shape)} axes")
            s = shape[d]
        elif s < -1:
            raise ctx.error(f"shape {want}: entry {d} is {s}; entries are >= -1")
        out.append(s)
    size = int(np.prod(shape))
    if out.count(-1) > 1:
        raise ctx.error(f"shape {want} has more than one -1 (at most one size is inferred)")
    if -1 in out:
        rest = int(np.prod([s for s in out if s != -1]))
        if rest == 0 or size % rest:
            raise ctx.error(f"cannot reshape {list(shape)} ({size} elements) to {want}: "
                            f"{size} is not a multiple of {rest}")
        out[out.index(-1)] = size // rest
    if int(np.prod(out)) != size:
        raise ctx.error(f"cannot reshape {list(shape)} ({size} elements) to {out} "
                        f"({int(np.prod(out))} elements)")
    return [tt(out, _dtype(ctx))]


def _reshape_like(ctx, ts):
    X = ts[0]
    shape = ctx.out_types[0].shape
    return _copy(ctx, X, lambda i: reshape_index(X.shape, shape, i))


def _reshape_ref(ctx, xs):
    return [np.reshape(xs[0], ctx.out_types[0].shape).copy()]


register(OpDef(
    "Reshape", OpPattern.INJECTIVE, _reshape_infer, _reshape_ref, _reshape_like,
    attrs={"allowzero": 0, "shape": None}, inputs=(1, 2), const_inputs=(1,),
    doc="Row-major reshape (0 copies a dimension unless allowzero, -1 is inferred)."))


def _flatten_infer(ctx):
    shape = ctx.in_types[0].shape
    r = len(shape)
    a = ctx.attrs["axis"]
    if not -r <= a <= r:
        raise ctx.error(f"axis={a} is out of range for a rank-{r} input (allowed {-r}..{r})")
    a = a + r if a < 0 else a
    return [tt((int(np.prod(shape[:a])), int(np.prod(shape[a:]))), _dtype(ctx))]


register(OpDef(
    "Flatten", OpPattern.INJECTIVE, _flatten_infer, _reshape_ref, _reshape_like,
    attrs={"axis": 1}, doc="Reshape to 2-D: axes before `axis` and from `axis` on."))


def _squeeze_axes(ctx) -> list[int]:
    shape = ctx.in_types[0].shape
    axes = ints_arg(ctx, "axes", 1, "axes")
    if axes is None:
        return [d for d, n in enumerate(shape) if n == 1]
    axes = norm_axes(ctx, axes, len(shape))
    bad = [a for a in axes if shape[a] != 1]
    if bad:
        raise ctx.error(f"cannot squeeze axes {bad} of shape {list(shape)}: their size is not 1")
    return axes


register(OpDef(
    "Squeeze", OpPattern.INJECTIVE,
    lambda ctx: [tt([n for d, n in enumerate(ctx.in_types[0].shape)
                     if d not in _squeeze_axes(ctx)], _dtype(ctx))],
    _reshape_ref, _reshape_like, attrs={"axes": None}, inputs=(1, 2), const_inputs=(1,),
    doc="Remove axes of size 1 (the listed ones, or all)."))


def _unsqueeze_infer(ctx):
    shape = ctx.in_types[0].shape
    axes = ints_arg(ctx, "axes", 1, "axes")
    if not axes:
        raise ctx.error("axes are missing: give them as input 1 (a constant int64 tensor) or "
                        "as the attribute 'axes'")
    r = len(shape) + len(axes)
    axes = norm_axes(ctx, axes, r)
    it = iter(shape)
    return [tt([1 if d in axes else next(it) for d in range(r)], _dtype(ctx))]


register(OpDef(
    "Unsqueeze", OpPattern.INJECTIVE, _unsqueeze_infer, _reshape_ref, _reshape_like,
    attrs={"axes": None}, inputs=(1, 2), const_inputs=(1,),
    doc="Insert axes of size 1 at the listed positions of the output."))


# ---- Concat, Split -----------------------------------------------------------------------

def _concat_infer(ctx):
    d = same_dtype(ctx)
    shapes = [t.shape for t in ctx.in_types]
    r = len(shapes[0])
    if r == 0:
        raise ctx.error("cannot concatenate scalars (rank 0); Unsqueeze them first")
    a = norm_axis(ctx, ctx.attrs["axis"], r)
    for k, s in enumerate(shapes[1:], 1):
        if len(s) != r or any(s[i] != shapes[0][i] for i in range(r) if i != a):
            raise ctx.error(f"input {k} has shape {list(s)}; every input must match input 0 "
                            f"{list(shapes[0])} except along axis {a}")
    out = list(shapes[0])
    out[a] = sum(s[a] for s in shapes)
    return [tt(out, d)]


def _concat_compute(ctx, ts):
    a = norm_axis(ctx, ctx.attrs["axis"], len(ts[0].shape))
    offs = np.cumsum([0] + [t.shape[a] for t in ts]).tolist()

    def at(k, i):
        T = ts[k]
        return T[tuple(v - offs[k] if d == a and offs[k] else v for d, v in enumerate(i))]

    def body(*i):
        v = at(len(ts) - 1, i)
        for k in range(len(ts) - 2, -1, -1):
            v = lt.if_then_else(i[a] < offs[k + 1], at(k, i), v)
        return v
    return [lt.compute(ctx.out_types[0].shape, body, name=te_name(ctx))]


register(OpDef(
    "Concat", OpPattern.INJECTIVE, _concat_infer,
    lambda ctx, xs: [np.concatenate(xs, axis=ctx.attrs["axis"])], _concat_compute,
    attrs={"axis": REQUIRED}, inputs=(1, 1 << 30), doc="Join inputs along `axis`."))


def _split_sizes(ctx) -> list[int]:
    shape = ctx.in_types[0].shape
    a = norm_axis(ctx, ctx.attrs["axis"], len(shape))
    n_out = len(ctx.node.outputs)
    split = ints_arg(ctx, "split", 1, "split")
    num = ctx.attrs["num_outputs"]
    if split is not None and num is not None:
        raise ctx.error("both split and num_outputs are given; give one of them")
    if split is not None:
        if len(split) != n_out or sum(split) != shape[a] or min(split) < 0:
            raise ctx.error(f"split={split} must have one size >= 0 per output ({n_out}) "
                            f"summing to the size of axis {a} ({shape[a]})")
        return split
    if num is not None and num != n_out:
        raise ctx.error(f"num_outputs={num} but the node has {n_out} outputs")
    if num is None and shape[a] % n_out:
        raise ctx.error(f"axis {a} of size {shape[a]} does not split into {n_out} equal parts; "
                        "give split sizes (input 1) or num_outputs")
    part = -(-shape[a] // n_out)
    sizes = [min(part, shape[a] - k * part) for k in range(n_out)]
    if min(sizes) < 1:
        raise ctx.error(f"axis {a} of size {shape[a]} does not split into {n_out} parts of "
                        f"{part} (the last part would be empty)")
    return sizes


def _split_infer(ctx):
    shape = ctx.in_types[0].shape
    a = norm_axis(ctx, ctx.attrs["axis"], len(shape))
    return [tt(shape[:a] + (s,) + shape[a + 1:], _dtype(ctx)) for s in _split_sizes(ctx)]


def _split_reference(ctx, xs):
    a = norm_axis(ctx, ctx.attrs["axis"], xs[0].ndim)
    offs = np.cumsum([0] + _split_sizes(ctx)).tolist()
    return [np.take(xs[0], range(o, e), axis=a) for o, e in zip(offs, offs[1:])]


def _split_compute(ctx, ts):
    X = ts[0]
    a = norm_axis(ctx, ctx.attrs["axis"], len(X.shape))
    offs = np.cumsum([0] + _split_sizes(ctx)).tolist()
    outs = []
    for k, t in enumerate(ctx.out_types):
        def index(i, o=offs[k]):
            return tuple(v + o if d == a and o else v for d, v in enumerate(i))
        outs.append(lt.compute(t.shape, lambda *i, index=index: X[index(i)],
                               name=te_name(ctx, str(k))))
    return outs


def _split_outputs(attrs: dict, n_inputs: int) -> int:
    if attrs.get("num_outputs") is not None:
        return int(attrs["num_outputs"])
    if attrs.get("split") is not None:
        return len(attrs["split"])
    raise GraphError("g.op('Split'): the number of outputs is not known from the attributes; "
                     "pass outputs=n (or num_outputs=n, or split=[sizes])")


register(OpDef(
    "Split", lambda ctx: OpPattern.TUPLE if len(ctx.node.outputs) > 1 else OpPattern.INJECTIVE,
    _split_infer, _split_reference, _split_compute,
    attrs={"axis": 0, "num_outputs": None, "split": None}, inputs=(1, 2),
    outputs=_split_outputs, const_inputs=(1,),
    doc="Cut along `axis` into parts (split sizes, num_outputs, or equal parts)."))


# ---- Expand ------------------------------------------------------------------------------

def _expand_infer(ctx):
    want = ctx.const(1, "shape").reshape(-1).tolist()
    if min(want, default=1) < 1:
        raise ctx.error(f"shape {want} must hold positive sizes")
    return [tt(broadcast_shapes(ctx, [ctx.in_types[0].shape, tuple(want)]), _dtype(ctx))]


def _expand_compute(ctx, ts):
    X = ts[0]
    shape = ctx.out_types[0].shape
    return _copy(ctx, X, lambda i: broadcast_index(X.shape, shape, i))


register(OpDef(
    "Expand", OpPattern.BROADCAST, _expand_infer,
    lambda ctx, xs: [np.broadcast_to(xs[0], ctx.out_types[0].shape).copy()], _expand_compute,
    inputs=(2, 2), const_inputs=(1,), doc="Broadcast to a shape (numpy rules)."))
