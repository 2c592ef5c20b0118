"""Type and bookkeeping operators: Cast, CastLike, Identity, Dropout (inference), Constant,
Shape, Size.

Cast/CastLike/Identity/Dropout are ELEMWISE (as TVM registers cast and copy): a fused kernel
absorbs them. Constant, Shape and Size read no data; their kernels write values known when
the graph is built (a chain of selects over the flat index, for up to ``SMALL`` elements);
constant folding normally replaces them first. Pattern INJECTIVE.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

from ...lang import dtype as dt
from ..registry import REQUIRED, OpDef, OpPattern, register
from ._util import te_name, tt

# ONNX TensorProto element types looptune computes with (onnx.helper, when installed, names
# the others in errors; the table keeps onnx an optional dependency).
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
               13: "uint64"}
SMALL = 64


def onnx_dtype(ctx, to) -> str:
    """numpy's name of Cast's ``to`` (an ONNX element type, or a dtype name such as
    'float32' when a graph is built in Python)."""
    if isinstance(to, str):
        if to in dt.SUPPORTED:
            return to
        raise ctx.error(f"to={to!r} is not a supported dtype ({', '.join(dt.SUPPORTED)})")
    if isinstance(to, int) and to in ONNX_DTYPES:
        return ONNX_DTYPES[to]
    name = f"element type {to!r}"
    try:
        from onnx import TensorProto
        name = TensorProto.DataType.Name(to)
    except (ImportError, ValueError, TypeError):
        pass
    raise ctx.error(f"to={to!r} ({name}) is not supported; supported ONNX types: "
                    + ", ".join(f"{k} ({v})" for k, v in ONNX_DTYPES.items()))


def _copy(ctx, ts, dtype=None):
    X = ts[0]
    if dtype is None or dtype == X.dtype:
        return [lt.compute(X.shape, lambda *i: X[i], name=te_name(ctx))]
    return [lt.compute(X.shape, lambda *i: lt.cast(X[i], dtype), name=te_name(ctx))]


def _cast_to(ctx) -> str:
    if ctx.node.op_type == "CastLike":
        return ctx.in_types[1].dtype
    return onnx_dtype(ctx, ctx.attrs["to"])


register(OpDef(
    "Cast", OpPattern.ELEMWISE,
    lambda ctx: [tt(ctx.in_types[0].shape, _cast_to(ctx))],
    lambda ctx, xs: [xs[0].astype(_cast_to(ctx))],
    lambda ctx, ts: _copy(ctx, ts, _cast_to(ctx)),
    attrs={"round_mode": "up", "saturate": 1, "to": REQUIRED},
    doc="Convert the dtype (C conversion: float to int truncates toward zero)."))
register(OpDef(
    "CastLike", OpPattern.ELEMWISE,
    lambda ctx: [tt(ctx.in_types[0].shape, _cast_to(ctx))],
    lambda ctx, xs: [xs[0].astype(_cast_to(ctx))],
    lambda ctx, ts: _copy(ctx, ts, _cast_to(ctx)),
    attrs={"round_mode": "up", "saturate": 1}, inputs=(2, 2),
    doc="Cast to the dtype of input 1."))
register(OpDef(
    "Identity", OpPattern.ELEMWISE, lambda ctx: [ctx.in_types[0]],
    lambda ctx, xs: [xs[0].copy()], _copy, doc="A copy."))


# ---- Dropout -----------------------------------------------------------------------------

def _dropout_infer(ctx):
    if ctx.has_input(2):
        mode = ctx.const(2, "training_mode")
        if mode.size != 1:
            raise ctx.error(f"training_mode (input 2) must be a scalar; got shape "
                            f"{list(mode.shape)}")
        if bool(mode.reshape(-1)[0]):
            raise ctx.error("training_mode=True is not supported (inference only: Dropout "
                            "is a copy)")
    if ctx.has_input(1) and ctx.in_types[1].size != 1:
        raise ctx.error(f"ratio (input 1) must be a scalar; got shape "
                        f"{list(ctx.in_types[1].shape)}")
    x = ctx.in_types[0]
    return [x, tt(x.shape, "bool")][:max(1, len(ctx.node.outputs))]


def _dropout_compute(ctx, ts):
    outs = _copy(ctx, ts)
    if len(ctx.node.outputs) > 1:
        mask = lt.compute(ts[0].shape, lambda *i: lt.const(True, "bool"),
                          name=te_name(ctx, "mask")) if ctx.node.outputs[1] else None
        outs.append(mask)
    return outs


register(OpDef(
    "Dropout", OpPattern.ELEMWISE, _dropout_infer,
    lambda ctx, xs: [xs[0].copy(), np.ones(xs[0].shape, bool)], _dropout_compute,
    attrs={"seed": None}, inputs=(1, 3), const_inputs=(2,),
    doc="Inference dropout: a copy; the mask output is all true."))


# ---- values known when the graph is built --------------------------------------------------

_CONSTANT_ATTRS = ("value", "value_float", "value_floats", "value_int", "value_ints")


def _constant_value(ctx) -> np.ndarray:
    given = [k for k in _CONSTANT_ATTRS if ctx.attrs[k] is not None]
    if len(given) != 1:
        raise ctx.error(f"give exactly one of {', '.join(_CONSTANT_ATTRS)}; got "
                        f"{', '.join(given) or 'none'}")
    k = given[0]
    v = ctx.attrs[k]
    if k in ("value_float", "value_floats"):
        return np.asarray(v, dtype="float32")
    if k in ("value_int", "value_ints"):
        return np.asarray(v, dtype="int64")
    arr = np.asarray(v)      # a frozen attribute: nested tuples of Python numbers
    if arr.dtype == np.float64:
        arr = arr.astype("float32")
    if arr.dtype.name not in dt.SUPPORTED:
        raise ctx.error(f"value has dtype {arr.dtype}, which is not supported")
    return arr


def _table_compute(ctx, values: np.ndarray):
    """A kernel writing ``values`` (known now): selects over the flat index."""
    if values.size > SMALL:
        raise ctx.error(f"a kernel for a {values.size}-element constant is not generated (at "
                        f"most {SMALL}); fold it into a graph constant first "
                        "(lt.graph.optimize's constant folding)")
    shape, d = values.shape, values.dtype.name
    flat = values.reshape(-1).tolist()

    def body(*i):
        f = 0
        for v, n in zip(i, shape):
            f = f * n + v if not isinstance(f, int) or f else v
        out = lt.const(flat[-1], d)
        for k in range(len(flat) - 2, -1, -1):
            out = lt.if_then_else(lt.equal(f, k), lt.const(flat[k], d), out)
        return out
    return [lt.compute(shape, body, name=te_name(ctx))]


register(OpDef(
    "Constant", OpPattern.INJECTIVE,
    lambda ctx: [tt(_constant_value(ctx).shape, _constant_value(ctx).dtype.name)],
    lambda ctx, xs: [_constant_value(ctx)],
    lambda ctx, ts: _table_compute(ctx, _constant_value(ctx)),
    attrs={k: None for k in _CONSTANT_ATTRS}, inputs=(0, 0),
    doc="A value from its attribute (value: float32/int64/bool when built in Python; "
        "value_float(s): float32; value_int(s): int64)."))


def _shape_value(ctx) -> np.ndarray:
    shape = ctx.in_types[0].shape
    r = len(shape)
    start, end = ctx.attrs["start"], ctx.attrs["end"]
    lo, hi, _ = slice(start, r if end is None else end).indices(r)
    return np.asarray(shape[lo:hi], dtype="int64")


register(OpDef(
    "Shape", OpPattern.INJECTIVE,
    lambda ctx: [tt(_shape_value(ctx).shape, "int64")],
    lambda ctx, xs: [_shape_value(ctx)],
    lambda ctx, ts: _table_compute(ctx, _shape_value(ctx)),
    attrs={"end": None, "start": 0}, doc="The input's shape (int64), from start to end."))
register(OpDef(
    "Size", OpPattern.INJECTIVE, lambda ctx: [tt((), "int64")],
    lambda ctx, xs: [np.asarray(ctx.in_types[0].size, dtype="int64")],
    lambda ctx, ts: _table_compute(ctx, np.asarray(ctx.in_types[0].size, dtype="int64")),
    doc="The input's number of elements (int64 scalar)."))

