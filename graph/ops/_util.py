"""Helpers shared by operator definitions: broadcasting, dtype checks, names, axes."""
from __future__ import annotations

import re

import numpy as np

import looptune as lt

from ...lang import dtype as dt
from ..ir import TensorType
from ..registry import OpCall, OpPattern

FLOATS = ("float16", "float32", "float64")


def te_name(ctx: OpCall, suffix: str = "") -> str:
    """A readable stage name for a node's tensor (non-word characters folded to '_'; the
    code generators sanitize every name again)."""
    base = re.sub(r"\W", "_", ctx.name) or "t"
    if base[0].isdigit():
        base = "t_" + base
    return base + (f"_{suffix}" if suffix else "")


def broadcast_shapes(ctx: OpCall, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """numpy's (ONNX's multidirectional) broadcast of ``shapes``; a GraphError naming the
    node and the shapes when they do not broadcast."""
    ndim = max(len(s) for s in shapes)
    out = []
    for d in range(ndim):
        sizes = {s[len(s) - ndim + d] for s in shapes if len(s) - ndim + d >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ctx.error(f"input shapes {', '.join(str(list(s)) for s in shapes)} do not "
                            f"broadcast (dimension {d} from the left: sizes {sorted(sizes)})")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to exactly ``target`` (ONNX's unidirectional rule)."""
    if len(shape) > len(target):
        return False
    off = len(target) - len(shape)
    return all(s in (1, target[d + off]) for d, s in enumerate(shape))


def broadcast_index(in_shape: tuple[int, ...], out_shape: tuple[int, ...], idx) -> tuple:
    """The index into an input of ``in_shape`` for output index ``idx`` under broadcasting."""
    off = len(out_shape) - len(in_shape)
    return tuple(0 if in_shape[d] == 1 and out_shape[d + off] != 1 else idx[d + off]
                 for d in range(len(in_shape)))


def same_dtype(ctx: OpCall, kinds=None) -> str:
    """The one dtype of all present inputs (ONNX ops do not promote); ``kinds`` limits it
    ("float" or a tuple of dtypes)."""
    dts = {t.dtype for t in ctx.in_types if t is not None}
    if len(dts) > 1:
        raise ctx.error(f"inputs have different dtypes {sorted(dts)}; ONNX operators do not "
                        "promote: insert a Cast")
    d = dts.pop()
    allowed = FLOATS if kinds == "float" else kinds
    if allowed and d not in allowed:
        raise ctx.error(f"dtype {d} is not supported (supported: {', '.join(allowed)})")
    return d


def norm_axis(ctx: OpCall, axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` in [0, ndim) (negative counts from the end), or a GraphError."""
    if not -ndim <= axis < ndim:
        raise ctx.error(f"{what}={axis} is out of range for a rank-{ndim} input "
                        f"(allowed {-ndim}..{ndim - 1})")
    return axis % ndim


def broadcast_pattern(ctx: OpCall) -> OpPattern:
    """ELEMWISE when every input has the output's shape, else BROADCAST."""
    out = ctx.out_types[0].shape if ctx.out_types else None
    if out is not None and all(t is None or t.shape == out for t in ctx.in_types):
        return OpPattern.ELEMWISE
    return OpPattern.BROADCAST


def tt(shape, dtype: str) -> TensorType:
    return TensorType(tuple(int(s) for s in shape), dtype)


def np_dtype(d: str) -> np.dtype:
    return np.dtype(d)


def is_float(d: str) -> bool:
    return dt.is_float(d)


# ---- attributes that moved to inputs, axes, extra outputs ------------------------------------

def ints_arg(ctx: OpCall, attr: str, k: int, what: str) -> list[int] | None:
    """An int list given either as attribute ``attr`` (older opsets) or as constant input ``k``
    (newer opsets); None when neither is given. A GraphError when both are."""
    a = ctx.attrs.get(attr)
    if ctx.has_input(k):
        if a is not None:
            raise ctx.error(f"{what} is given both as attribute '{attr}' and as input {k}; "
                            "give one of them")
        v = ctx.const(k, what)
        if v.dtype.kind not in "iu":
            raise ctx.error(f"input {k} ({what}) must hold integers; got dtype {v.dtype}")
        return [int(x) for x in v.reshape(-1)]
    if a is None:
        return None
    return int_list(ctx, attr, a)


def int_list(ctx: OpCall, attr: str, value) -> list[int]:
    """Attribute ``attr`` as a list of ints (a single int counts as a list of one)."""
    vals = value if isinstance(value, (tuple, list)) else (value,)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals):
        raise ctx.error(f"attribute {attr}={value!r} must be a list of ints")
    return [int(v) for v in vals]


def norm_axes(ctx: OpCall, axes, ndim: int, what: str = "axes") -> list[int]:
    """``axes`` each in [0, ndim), without repeats, or a GraphError naming them."""
    out = [norm_axis(ctx, a, ndim, f"{what} entry") for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(f"{what}={list(axes)} names an axis twice (rank {ndim})")
    return out


def refuse_extra_outputs(ctx: OpCall, names: tuple[str, ...], why: str) -> None:
    """A GraphError when the node asks for an output past the first one (``names`` are the
    ONNX names of outputs 1, 2, ...); omitted ("") outputs are fine."""
    for k, o in enumerate(ctx.node.outputs[1:], 1):
        if o:
            name = names[k - 1] if k - 1 < len(names) else f"#{k}"
            raise ctx.error(f"output {k} ({name}, '{o}') is not supported: {why}; remove it "
                            "from the node's outputs")


def pad_types(ctx: OpCall, types: list[TensorType]) -> list[TensorType]:
    """``types`` repeated to cover every output slot of the node (omitted outputs still take
    a slot; their type is never used)."""
    n = max(len(ctx.node.outputs), 1)
    return types + [types[0]] * (n - len(types))


def check_rank(ctx: OpCall, k: int, lo: int, hi: int | None = None, what: str = "") -> int:
    """The rank of input ``k``, which must be in [lo, hi]."""
    r = len(ctx.in_types[k].shape)
    hi = lo if hi is None else hi
    if not lo <= r <= hi:
        want = f"{lo}" if lo == hi else (f"at least {lo}" if hi > 64 else f"{lo} to {hi}")
        raise ctx.error(f"input {k}{' (' + what + ')' if what else ''} must have rank {want}; "
                        f"got shape {list(ctx.in_types[k].shape)}")
    return r


def scalar_input(ctx: OpCall, k: int, what: str) -> None:
    """Check that input ``k`` (when present) holds one element of the first input's dtype."""
    t = ctx.in_types[k] if ctx.has_input(k) else None
    if t is None:
        return
    if t.size != 1:
        raise ctx.error(f"input {k} ({what}) must be a scalar (one element); got shape "
                        f"{list(t.shape)}")
    if t.dtype != ctx.in_types[0].dtype:
        raise ctx.error(f"input {k} ({what}) has dtype {t.dtype}; input 0 has "
                        f"{ctx.in_types[0].dtype}, and ONNX does not promote: insert a Cast")


def scalar_operand(ctx: OpCall, k: int, T, dtype: str):
    """Input ``k`` (one element) inside a compute body: its value as a constant where the graph
    holds it, so the kernel needs no argument for it, else a load of the tensor."""
    v = ctx.consts[k] if k < len(ctx.consts) else None
    if v is not None:
        return lt.const(v.reshape(-1)[0].item(), dtype)
    return T[(0,) * T.ndim]


# ---- tensor-expression building blocks -----------------------------------------------------

def pad_const(X, begin, end, value, name: str):
    """``X`` padded by ``begin``/``end`` (>= 0) elements per axis with the constant ``value``,
    as its own injective stage (the auto scheduler inlines it into the reader), or ``X``
    itself when no axis is padded."""
    if not any(begin) and not any(end):
        return X
    shape = tuple(n + b + e for n, b, e in zip(X.shape, begin, end))
    fill = lt.const(value, X.dtype)

    def body(*i):
        conds = []
        for iv, n, b, e in zip(i, X.shape, begin, end):
            if b:
                conds.append(iv >= b)
            if e:
                conds.append(iv < b + n)
        src = X[tuple(iv - b if b else iv for iv, b in zip(i, begin))]
        return lt.if_then_else(lt.all(*conds), src, fill)

    return lt.compute(shape, body, name=name)


def reshape_index(in_shape, out_shape, i) -> list:
    """The index into a tensor of ``in_shape`` holding element ``i`` of its row-major reshape
    to ``out_shape``. Dimensions of size 1 index 0; the others are matched in groups of equal
    products, so the // and % arithmetic stays inside a group (a reshape that only inserts or
    removes 1s, or splits one axis, stays cheap)."""
    ins = [d for d, n in enumerate(in_shape) if n != 1]
    outs = [d for d, n in enumerate(out_shape) if n != 1]
    idx: list = [0] * len(in_shape)
    a = b = 0
    while a < len(ins):
        ga, gb = [ins[a]], [outs[b]]
        pa, pb = in_shape[ins[a]], out_shape[outs[b]]
        a, b = a + 1, b + 1
        while pa != pb:
            if pa < pb:
                ga.append(ins[a])
                pa, a = pa * in_shape[ins[a]], a + 1
            else:
                gb.append(outs[b])
                pb, b = pb * out_shape[outs[b]], b + 1
        flat = i[gb[0]]
        for d in gb[1:]:
            flat = flat * out_shape[d] + i[d]
        stride = 1
        for d in reversed(ga):
            q = flat if stride == 1 else flat // stride
            idx[d] = q if d == ga[0] else q % in_shape[d]
            stride *= in_shape[d]
    return idx
