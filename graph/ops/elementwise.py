"""Elementwise and broadcasting operators: unary math (with attributes: LeakyRelu, Elu, Gelu,
...), binary arithmetic, comparisons and logic, Where, Clip, PRelu, Pow, and the variadic
Max/Min/Sum/Mean.

The shape of an operator definition (every file of graph/ops follows it): an ``infer`` from
the OpCall to output types, a numpy ``reference`` (the oracle), a ``compute`` in looptune
tensor expressions, the op pattern, registered once with :func:`register`.

Patterns: unary ops ELEMWISE; ops over several inputs ELEMWISE when every input has the
output's shape, else BROADCAST (``broadcast_pattern``). A one-element constant operand (the
2.0 of ``x * 2.0``) is written into the kernel as a constant instead of being read.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

from ..registry import OpDef, OpPattern, register
from ._util import (FLOATS, broadcast_index, broadcast_pattern, broadcast_shapes, broadcasts_to,
                    same_dtype, scalar_operand, te_name, tt)


def operand(ctx, ts, k: int, i):
    """Input ``k`` at output index ``i`` under broadcasting; a one-element constant input is
    its value (the kernel then needs no argument for it)."""
    c = ctx.consts[k] if k < len(ctx.consts) else None
    T = ts[k]
    if c is not None and c.size == 1:
        return lt.const(c.reshape(-1)[0].item(), T.dtype if T is not None else c.dtype.name)
    return T[broadcast_index(T.shape, ctx.out_types[0].shape, i)]

# ---- unary -------------------------------------------------------------------------------------


def _unary(name: str, np_fn, te_fn, kinds=FLOATS, doc: str = "") -> OpDef:
    def infer(ctx):
        return [tt(ctx.in_types[0].shape, same_dtype(ctx, kinds))]

    def reference(ctx, xs):
        return [np.asarray(np_fn(xs[0])).astype(xs[0].dtype)]

    def compute(ctx, ts):
        X = ts[0]
        return [lt.compute(X.shape, lambda *i: te_fn(X[i]), name=te_name(ctx))]

    return register(OpDef(name, OpPattern.ELEMWISE, infer, reference, compute,
                          doc=doc or f"Elementwise {name} (ONNX semantics)."))


def _erf_np(x):
    from math import erf
    return np.vectorize(erf, otypes=[x.dtype])(x) if x.size else x


_NUM = FLOATS + ("int8", "int16", "int32", "int64")
_unary("Relu", lambda x: np.maximum(x, 0), lambda v: lt.max(v, lt.const(0, v.dtype)), _NUM)
_unary("Sigmoid", lambda x: 1 / (1 + np.exp(-x)), lt.sigmoid)
_unary("Tanh", np.tanh, lt.tanh)
_unary("Exp", np.exp, lt.exp)
_unary("Log", np.log, lt.log)
_unary("Sqrt", np.sqrt, lt.sqrt)
_unary("Erf", _erf_np, lt.erf)
_unary("Neg", np.negative, lambda v: -v, _NUM)
_unary("Abs", np.abs, abs, _NUM)
_unary("Reciprocal", lambda x: 1 / x, lambda v: lt.const(1, v.dtype) / v)

# ---- binary with broadcasting -----------------------------------------------------------------


def _binary(name: str, np_fn, te_fn, kinds=_NUM) -> OpDef:
    def infer(ctx):
        d = same_dtype(ctx, kinds)
        return [tt(broadcast_shapes(ctx, [t.shape for t in ctx.in_types]), d)]

    def reference(ctx, xs):
        return [np.asarray(np_fn(xs[0], xs[1])).astype(ctx.out_types[0].dtype)]

    def compute(ctx, ts):
        shape = ctx.out_types[0].shape
        return [lt.compute(shape, lambda *i: te_fn(operand(ctx, ts, 0, i),
                                                   operand(ctx, ts, 1, i)), name=te_name(ctx))]

    return register(OpDef(name, broadcast_pattern, infer, reference, compute, inputs=(2, 2),
                          doc=f"Elementwise {name} of two inputs with numpy broadcasting."))


def _div_np(a, b):
    """ONNX Div: true division for floats; for integers C's, truncating toward zero (and 0
    where the divisor is 0, as numpy, instead of a trap)."""
    if a.dtype.kind == "f":
        return a / b
    a, b = np.broadcast_arrays(a, b)
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe)
    q = np.where((a < 0) != (safe < 0), -q, q) if a.dtype.kind == "i" else q
    return np.where(b == 0, 0, q)


def _div_te(a, b):
    if a.dtype.startswith("float"):
        return a / b
    zero = lt.const(0, a.dtype)
    q = a // b                                   # floor; truncation differs when signs do
    if not a.dtype.startswith("u"):
        inexact = lt.not_equal(a - q * b, zero) & lt.not_equal(a < zero, b < zero)
        q = lt.if_then_else(inexact, q + 1, q)
    return lt.if_then_else(lt.equal(b, zero), zero, q)


_UINTS = ("uint8", "uint16", "uint32", "uint64")
_NUMU = _NUM + _UINTS
_binary("Add", np.add, lambda a, b: a + b, _NUMU)
_binary("Sub", np.subtract, lambda a, b: a - b, _NUMU)
_binary("Mul", np.multiply, lambda a, b: a * b, _NUMU)
_binary("Div", _div_np, _div_te, _NUMU)


# ---- unary with attributes -------------------------------------------------------------------


def _unary_attrs(name: str, attrs: dict, np_fn, te_fn, kinds=FLOATS, doc: str = "",
                 check=None) -> OpDef:
    """A unary op whose functions also take the node's attributes: ``np_fn(x, a)``,
    ``te_fn(v, a)`` (``v`` an expression of the input's dtype); ``check(ctx)`` validates the
    attributes."""
    def infer(ctx):
        if check is not None:
            check(ctx)
        return [tt(ctx.in_types[0].shape, same_dtype(ctx, kinds))]

    def reference(ctx, xs):
        x = xs[0]
        acc = x.astype(np.float64) if x.dtype.kind == "f" else x
        return [np.asarray(np_fn(acc, ctx.attrs)).astype(x.dtype)]

    def compute(ctx, ts):
        X = ts[0]
        return [lt.compute(X.shape, lambda *i: te_fn(X[i], ctx.attrs), name=te_name(ctx))]

    return register(OpDef(name, OpPattern.ELEMWISE, infer, reference, compute, attrs=attrs,
                          doc=doc or f"Elementwise {name} (ONNX semantics and defaults)."))


def _c(v, x):
    """The Python number ``x`` as a constant of ``v``'s dtype."""
    return lt.const(x, v.dtype)


_unary_attrs("LeakyRelu", {"alpha": 0.01}, lambda x, a: np.where(x < 0, a["alpha"] * x, x),
             lambda v, a: lt.if_then_else(v < _c(v, 0), v * a["alpha"], v))
_unary_attrs("Elu", {"alpha": 1.0}, lambda x, a: np.where(x < 0, a["alpha"] * np.expm1(x), x),
             lambda v, a: lt.if_then_else(v < _c(v, 0), (lt.exp(v) - 1.0) * a["alpha"], v))
_unary_attrs("Selu", {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
             lambda x, a: a["gamma"] * np.where(x <= 0, a["alpha"] * np.expm1(x), x),
             lambda v, a: lt.if_then_else(v <= _c(v, 0), (lt.exp(v) - 1.0) * a["alpha"], v)
             * a["gamma"])
_unary_attrs("HardSigmoid", {"alpha": 0.2, "beta": 0.5},
             lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0, 1),
             lambda v, a: lt.min(lt.max(v * a["alpha"] + a["beta"], _c(v, 0)), _c(v, 1)))
_unary_attrs("HardSwish", {}, lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1),
             lambda v, a: v * lt.min(lt.max(v * (1 / 6) + 0.5, _c(v, 0)), _c(v, 1)))
_unary_attrs("Softplus", {}, lambda x, a: np.logaddexp(0, x),
             lambda v, a: lt.max(v, _c(v, 0)) + lt.log1p(lt.exp(-abs(v))))
_unary_attrs("Softsign", {}, lambda x, a: x / (1 + np.abs(x)), lambda v, a: v / (abs(v) + 1.0))
_unary_attrs("Floor", {}, lambda x, a: np.floor(x), lambda v, a: lt.floor(v))
_unary_attrs("Ceil", {}, lambda x, a: np.ceil(x), lambda v, a: lt.ceil(v))
_unary_attrs("Round", {}, lambda x, a: np.round(x), lambda v, a: lt.round(v))
_unary_attrs("Sin", {}, lambda x, a: np.sin(x), lambda v, a: lt.sin(v))
_unary_attrs("Cos", {}, lambda x, a: np.cos(x), lambda v, a: lt.cos(v))
_unary_attrs("Sign", {}, lambda x, a: np.sign(x),
             lambda v, a: lt.if_then_else(v > _c(v, 0), _c(v, 1),
                                          lt.if_then_else(v < _c(v, 0), _c(v, -1), _c(v, 0))),
             _NUM)


def _gelu_np(x, a):
    if a["approximate"] == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf_np(x / np.sqrt(2)))


def _gelu_te(v, a):
    if a["approximate"] == "tanh":
        return v * 0.5 * (lt.tanh((v + v * v * v * 0.044715) * float(np.sqrt(2 / np.pi))) + 1.0)
    return v * 0.5 * (lt.erf(v * float(1 / np.sqrt(2))) + 1.0)


def _gelu_check(ctx):
    if ctx.attrs["approximate"] not in ("none", "tanh"):
        raise ctx.error(f"approximate={ctx.attrs['approximate']!r} must be 'none' or 'tanh'")


_unary_attrs("Gelu", {"approximate": "none"}, _gelu_np, _gelu_te,
             doc="x * Phi(x) (erf), or the tanh approximation.", check=_gelu_check)

# ---- Clip ----------------------------------------------------------------------------------


def _clip_bounds(ctx):
    """(min, max) each as ("attr", value), ("input", k) or None."""
    out = []
    for k, name in ((1, "min"), (2, "max")):
        a = ctx.attrs[name]
        if ctx.has_input(k):
            if a is not None:
                raise ctx.error(f"{name} is given both as attribute and as input {k}")
            out.append(("input", k))
        else:
            out.append(None if a is None else ("attr", a))
    return out


def _clip_infer(ctx):
    d = same_dtype(ctx, _NUM)
    for k, what in ((1, "min"), (2, "max")):
        if ctx.has_input(k) and ctx.in_types[k].size != 1:
            raise ctx.error(f"input {k} ({what}) must be a scalar; got shape "
                            f"{list(ctx.in_types[k].shape)}")
    _clip_bounds(ctx)
    return [tt(ctx.in_types[0].shape, d)]


def _clip_reference(ctx, xs):
    x = xs[0]
    lo, hi = (xs[b[1]].reshape(-1)[0] if b and b[0] == "input" else (b[1] if b else None)
              for b in _clip_bounds(ctx))
    y = x if lo is None else np.maximum(x, np.asarray(lo).astype(x.dtype))
    y = y if hi is None else np.minimum(y, np.asarray(hi).astype(x.dtype))
    return [np.asarray(y).astype(x.dtype)]


def _clip_compute(ctx, ts):
    X = ts[0]
    bounds = []
    for b in _clip_bounds(ctx):
        if b is None:
            bounds.append(None)
        elif b[0] == "attr":
            bounds.append(lt.const(b[1], X.dtype))
        else:
            bounds.append(scalar_operand(ctx, b[1], ts[b[1]], X.dtype))

    def body(*i):
        v = X[i]
        v = v if bounds[0] is None else lt.max(v, bounds[0])
        return v if bounds[1] is None else lt.min(v, bounds[1])
    return [lt.compute(X.shape, body, name=te_name(ctx))]


def _clip_pattern(ctx) -> OpPattern:
    runtime = any(ctx.has_input(k) and ctx.consts[k] is None for k in (1, 2))
    return OpPattern.BROADCAST if runtime else OpPattern.ELEMWISE


register(OpDef("Clip", _clip_pattern, _clip_infer, _clip_reference, _clip_compute,
               attrs={"max": None, "min": None}, inputs=(1, 3),
               doc="Clamp to [min, max] (attributes, or scalar inputs; either may be absent)."))

# ---- comparisons, logic, select ------------------------------------------------------------


def _broadcast_op(name: str, n_in: tuple[int, int], infer_dtype, np_fn, te_fn,
                  doc: str = "") -> OpDef:
    """An op over broadcast inputs: ``te_fn(*exprs)`` / ``np_fn(*arrays)``."""
    def infer(ctx):
        d = infer_dtype(ctx)
        return [tt(broadcast_shapes(ctx, [t.shape for t in ctx.in_types]), d)]

    def reference(ctx, xs):
        return [np.asarray(np_fn(*xs)).astype(ctx.out_types[0].dtype)]

    def compute(ctx, ts):
        shape = ctx.out_types[0].shape
        return [lt.compute(shape, lambda *i: te_fn(*(operand(ctx, ts, k, i)
                                                     for k in range(len(ts)))),
                           name=te_name(ctx))]

    return register(OpDef(name, broadcast_pattern, infer, reference, compute, inputs=n_in,
                          doc=doc or f"Elementwise {name} with numpy broadcasting."))


def _bool_out(kinds):
    def f(ctx):
        same_dtype(ctx, kinds)
        return "bool"
    return f


_ALL = _NUM + _UINTS + ("bool",)
_broadcast_op("Equal", (2, 2), _bool_out(_ALL), np.equal, lt.equal)
_broadcast_op("Less", (2, 2), _bool_out(_NUMU), np.less, lambda a, b: a < b)
_broadcast_op("Greater", (2, 2), _bool_out(_NUMU), np.greater, lambda a, b: a > b)
_broadcast_op("LessOrEqual", (2, 2), _bool_out(_NUMU), np.less_equal, lambda a, b: a <= b)
_broadcast_op("GreaterOrEqual", (2, 2), _bool_out(_NUMU), np.greater_equal, lambda a, b: a >= b)
_broadcast_op("And", (2, 2), _bool_out(("bool",)), np.logical_and, lambda a, b: a & b)
_broadcast_op("Or", (2, 2), _bool_out(("bool",)), np.logical_or, lambda a, b: a | b)
_broadcast_op("Xor", (2, 2), _bool_out(("bool",)), np.logical_xor, lt.not_equal)
_unary("Not", np.logical_not, lambda v: ~v, ("bool",))


def _where_dtype(ctx):
    c, x, y = ctx.in_types
    if c.dtype != "bool":
        raise ctx.error(f"the condition (input 0) must be bool; got {c.dtype}")
    if x.dtype != y.dtype:
        raise ctx.error(f"inputs 1 and 2 have dtypes {x.dtype} and {y.dtype}; ONNX does not "
                        "promote: insert a Cast")
    return x.dtype


_broadcast_op("Where", (3, 3), _where_dtype, np.where, lt.if_then_else,
              doc="Select elementwise by a bool condition (inputs broadcast).")


def _prelu_dtype(ctx):
    x, s = ctx.in_types
    if not broadcasts_to(s.shape, x.shape):
        raise ctx.error(f"slope (input 1) of shape {list(s.shape)} must broadcast to X's "
                        f"shape {list(x.shape)}")
    return same_dtype(ctx, FLOATS + ("int32", "int64"))


_broadcast_op("PRelu", (2, 2), _prelu_dtype, lambda x, s: np.where(x < 0, s * x, x),
              lambda v, s: lt.if_then_else(v < _c(v, 0), v * s, v))

# ---- variadic ------------------------------------------------------------------------------


def _fold(fn):
    def f(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out
    return f


_VAR = (1, 1 << 30)
_broadcast_op("Max", _VAR, lambda ctx: same_dtype(ctx, _NUMU), _fold(np.maximum), _fold(lt.max),
              doc="Elementwise maximum of any number of broadcast inputs.")
_broadcast_op("Min", _VAR, lambda ctx: same_dtype(ctx, _NUMU), _fold(np.minimum), _fold(lt.min),
              doc="Elementwise minimum of any number of broadcast inputs.")
_broadcast_op("Sum", _VAR, lambda ctx: same_dtype(ctx, _NUMU), _fold(np.add),
              _fold(lambda a, b: a + b), doc="Elementwise sum of broadcast inputs.")
_broadcast_op("Mean", _VAR, lambda ctx: same_dtype(ctx, FLOATS),
              lambda *xs: _fold(np.add)(*xs) / len(xs),
              lambda *vs: _fold(lambda a, b: a + b)(*vs) / float(len(vs)),
              doc="Elementwise mean of broadcast inputs.")


def _pow_dtype(ctx):
    x, y = ctx.in_types
    if x.dtype not in FLOATS:
        raise ctx.error(f"the base (input 0) has dtype {x.dtype}; supported: {', '.join(FLOATS)}")
    if y.dtype not in _NUM:
        raise ctx.error(f"the exponent (input 1) has dtype {y.dtype}; supported: "
                        f"{', '.join(_NUM)}")
    return x.dtype


_broadcast_op("Pow", (2, 2), _pow_dtype, lambda x, y: np.power(x, y.astype(x.dtype)),
              lambda a, b: lt.pow(a, lt.cast(b, a.dtype)),
              doc="x ** y (the exponent may have another numeric dtype, as ONNX allows).")
