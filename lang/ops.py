"""Building expressions: arithmetic with numpy's dtype rules, math intrinsics, reductions."""
from __future__ import annotations

from collections.abc import Sequence

from ..errors import LangError
from . import dtype as dt
from .combiner import Combiner
from .expr import (BinKind, BinOp, Call, Cast, Const, Expr, IterKind, IterVar, Not, Reduce,
                   Select, as_expr)


def _is_scalar(x) -> bool:
    return not isinstance(x, (Expr, IterVar))


def _coerce(a, b, what: str) -> tuple[Expr, Expr]:
    """Two operands as Exprs of one dtype: weak Python scalars, then numpy promotion."""
    if _is_scalar(a) and _is_scalar(b):
        a, b = as_expr(a), as_expr(b)
    elif _is_scalar(a):
        b = as_expr(b)
        a = as_expr(a, like=b.dtype)
    elif _is_scalar(b):
        a = as_expr(a)
        b = as_expr(b, like=a.dtype)
    else:
        a, b = as_expr(a), as_expr(b)
    d = dt.promote(a.dtype, b.dtype)
    return cast(a, d), cast(b, d)


def _arith(kind: BinKind, a, b) -> Expr:
    a, b = _coerce(a, b, kind.value)
    if dt.is_bool(a.dtype):
        a, b = cast(a, "int32"), cast(b, "int32")
    return BinOp(kind, a, b)


def add(a, b): return _arith(BinKind.ADD, a, b)
def sub(a, b): return _arith(BinKind.SUB, a, b)
def mul(a, b): return _arith(BinKind.MUL, a, b)


def truediv(a, b) -> Expr:
    """``a / b``; refused on two integers (their quotient is ambiguous: use //)."""
    x, y = _coerce(a, b, "/")
    if not dt.is_float(x.dtype):
        raise LangError(f"'/' on integers ({x} / {y}, dtype {x.dtype}) is ambiguous; use '//' "
                        "for floor division or cast an operand to a float dtype with .astype()")
    return BinOp(BinKind.DIV, x, y)


def floordiv(a, b) -> Expr:
    """``a // b`` with Python's floor semantics."""
    return _arith(BinKind.FLOORDIV, a, b)


def floormod(a, b) -> Expr:
    """``a % b`` with Python's floor semantics (the sign of the result follows b)."""
    return _arith(BinKind.FLOORMOD, a, b)


def neg(a) -> Expr:
    a = as_expr(a)
    return BinOp(BinKind.SUB, Const(0, a.dtype), a)


def power(a, b) -> Expr:
    x, y = _coerce(a, b, "**")
    if dt.is_float(x.dtype):
        return Call("pow", (x, y), x.dtype)
    if isinstance(y, Const) and 0 <= y.value <= 16:
        out: Expr = Const(1, x.dtype)
        for _ in range(y.value):
            out = mul(out, x) if not (isinstance(out, Const) and out.value == 1) else x
        return out
    raise LangError(f"integer power {x} ** {y} needs a constant exponent in [0, 16]; "
                    "cast the base to a float dtype for other exponents")


def compare(kind: BinKind, a, b) -> Expr:
    x, y = _coerce(a, b, kind.value)
    return BinOp(kind, x, y)


def equal(a, b) -> Expr:
    """Elementwise ``a == b`` as a bool expression (``==`` itself compares structure)."""
    return compare(BinKind.EQ, a, b)


def not_equal(a, b) -> Expr:
    return compare(BinKind.NE, a, b)


def _as_bool(x, op: str) -> Expr:
    if isinstance(x, bool):
        raise LangError(f"'{op}' got the Python value {x}, not a condition on the data: "
                        "'==' and '!=' compare expression trees; write lt.equal(a, b) or "
                        "lt.not_equal(a, b) for an elementwise comparison")
    e = as_expr(x, like="bool") if _is_scalar(x) else as_expr(x)
    if not dt.is_bool(e.dtype):
        raise LangError(f"'{op}' needs bool expressions (comparisons); got {e} of dtype {e.dtype}")
    return e


def logical(kind: BinKind, a, b) -> Expr:
    return BinOp(kind, _as_bool(a, kind.value), _as_bool(b, kind.value))


def logical_not(a) -> Expr:
    return Not(_as_bool(a, "~"))


def all(*conds) -> Expr:  # noqa: A001 - the te spelling
    """True where every condition holds."""
    if not conds:
        return Const(True, "bool")
    out = _as_bool(conds[0], "all")
    for c in conds[1:]:
        out = logical(BinKind.AND, out, c)
    return out


def any(*conds) -> Expr:  # noqa: A001
    """True where some condition holds."""
    if not conds:
        return Const(False, "bool")
    out = _as_bool(conds[0], "any")
    for c in conds[1:]:
        out = logical(BinKind.OR, out, c)
    return out


def cast(x, dtype) -> Expr:
    d = dt.canonical(dtype)
    e = as_expr(x, like=d) if _is_scalar(x) else as_expr(x)
    return e if e.dtype == d else Cast(d, e)


def if_then_else(cond, a, b) -> Expr:
    """``a`` where ``cond`` holds, else ``b``; the side not selected is never evaluated."""
    c = _as_bool(cond, "if_then_else")
    x, y = _coerce(a, b, "if_then_else")
    return Select(c, x, y)


def _float_of(x) -> Expr:
    e = as_expr(x)
    if dt.is_float(e.dtype):
        return e
    return cast(e, "float32" if dt.itemsize(e.dtype) <= 2 else "float64")


def _unary(name: str):
    def f(x) -> Expr:
        e = _float_of(x)
        return Call(name, (e,), e.dtype)
    f.__name__ = name
    f.__doc__ = f"Elementwise {name} (integer inputs become floats, as in numpy)."
    return f


exp = _unary("exp")
log = _unary("log")
log2 = _unary("log2")
log1p = _unary("log1p")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
sin = _unary("sin")
cos = _unary("cos")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
erf = _unary("erf")
floor = _unary("floor")
ceil = _unary("ceil")
round = _unary("round")  # noqa: A001 - half to even, as numpy
trunc = _unary("trunc")


def fabs(x) -> Expr:
    e = as_expr(x)
    if dt.is_float(e.dtype):
        return Call("fabs", (e,), e.dtype)
    if dt.is_int(e.dtype) and not e.dtype.startswith("u"):
        return Select(BinOp(BinKind.LT, e, Const(0, e.dtype)), neg(e), e)
    return e


def pow(a, b) -> Expr:  # noqa: A001
    return power(_float_of(a), b)


# ---- reductions ----------------------------------------------------------------------------

def reduce(combiner: Combiner | str, expr, axis, where=None) -> Expr:
    """``expr`` reduced with ``combiner`` (a :class:`Combiner` or its name) over ``axis``, where
    ``where`` holds: ``reduce("max", X[i, k], k)`` is ``lt.max(X[i, k], axis=k)``."""
    c = Combiner.of(combiner)
    axes = tuple(axis) if isinstance(axis, Sequence) else (axis,)
    if not axes:
        raise LangError(f"lt.{c}: axis is empty; pass the lt.reduce_axis(...) to reduce")
    for a in axes:
        if not isinstance(a, IterVar) or a.kind is not IterKind.REDUCE:
            raise LangError(f"lt.{c}: axis {a!r} is not a reduction axis; create it "
                            "with lt.reduce_axis(extent, name=...)")
    src = as_expr(expr)
    if dt.is_bool(src.dtype):
        src = cast(src, "int32")
    cond = None if where is None else _as_bool(where, f"{c}(where=...)")
    return Reduce(c, src, axes, cond)


def sum(expr, axis, where=None) -> Expr:  # noqa: A001
    """Sum of ``expr`` over the reduction ``axis`` (an IterVar or a list), where ``where``."""
    return reduce(Combiner.SUM, expr, axis, where)


def prod(expr, axis, where=None) -> Expr:
    return reduce(Combiner.PROD, expr, axis, where)


def _is_axis_arg(x) -> bool:
    if isinstance(x, IterVar):
        return x.kind is IterKind.REDUCE
    return isinstance(x, (list, tuple)) and len(x) > 0 and builtins_all(
        isinstance(a, IterVar) for a in x)


def builtins_all(it) -> bool:
    for v in it:
        if not v:
            return False
    return True


def max(a, b=None, axis=None, where=None) -> Expr:  # noqa: A001
    """``max(expr, axis=k)`` reduces over k; ``max(a, b)`` is the elementwise maximum."""
    return _minmax(Combiner.MAX, a, b, axis, where)


def min(a, b=None, axis=None, where=None) -> Expr:  # noqa: A001
    """``min(expr, axis=k)`` reduces over k; ``min(a, b)`` is the elementwise minimum."""
    return _minmax(Combiner.MIN, a, b, axis, where)


def _minmax(c: Combiner, a, b, axis, where) -> Expr:
    if axis is None and b is not None and _is_axis_arg(b):
        axis, b = b, None
    if axis is not None:
        if b is not None:
            raise LangError(f"lt.{c}: give either two expressions or an expression and axis=")
        return reduce(c, a, axis, where)
    if b is None:
        raise LangError(f"lt.{c}({a}) needs a second expression or axis=")
    return _arith(c.op, a, b)
