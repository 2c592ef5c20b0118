"""Helpers shared by operator definitions: broadcasting, dtype checks, names, axes."""
from __future__ import annotations

import re

import numpy as np

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
