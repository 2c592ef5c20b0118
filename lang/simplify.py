"""The expression simplifier: constant folding, algebraic rules, canonical affine forms.

Integer index arithmetic (int32/int64) is put in a canonical affine form ``sum(c_i * t_i) + c``
so that ``io*32 + ii - io*32`` becomes ``ii``; floor division and modulo by a positive
constant split off multiples of the divisor, and range facts about loop variables remove
``//`` and ``%`` whose result is known (``(io*32 + ii) // 32 -> io`` when ``0 <= ii < 32``).
Index arithmetic is assumed not to overflow; data arithmetic keeps exact C/numpy semantics
(only constants are folded there, with numpy's wrap-around).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from . import dtype as dt
from .expr import BinKind, BinOp, Call, Cast, Const, Expr, Not, Select, Var
from .intrinsics import INTRINSICS
from .visitor import ExprMutator, ExprVisitor

Bound = tuple  # (lo, hi): inclusive ints, None where unknown

_INDEX = ("int32", "int64")


# ---- constant ranges -----------------------------------------------------------------------

class _Bounds(ExprVisitor):
    def __init__(self, ranges):
        self.ranges = ranges

    def visit(self, e):
        if not (dt.is_int(e.dtype) or dt.is_bool(e.dtype)):
            return (None, None)
        return super().visit(e)

    def visit_Const(self, e):
        return (int(e.value), int(e.value))

    def visit_Var(self, e):
        return self.ranges.get(e, (None, None))

    def visit_BinOp(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        return _BOUND_RULES.get(e.op, lambda a, b, e: (None, None))(a, b, e)

    def visit_Select(self, e):
        t, f = self.visit(e.t), self.visit(e.f)
        return (_opt(min, t[0], f[0]), _opt(max, t[1], f[1]))

    def visit_Cast(self, e):
        return self.visit(e.value) if dt.is_int(e.dtype) else (None, None)

    def visit_Not(self, e): return (0, 1)
    def visit_Call(self, e): return (None, None)
    def visit_Load(self, e): return (None, None)
    def visit_BufferLoad(self, e): return (None, None)
    def visit_Reduce(self, e): return (None, None)


def _opt(f, x, y):
    return None if x is None or y is None else f(x, y)


def _mul_bound(a, b, e):
    if None in a or None in b:
        if a[0] is not None and a[0] == a[1]:
            a, b = b, a
        if b[0] is not None and b[0] == b[1]:
            c = b[0]
            lo, hi = (_opt(lambda x, y: x * y, a[0], c), _opt(lambda x, y: x * y, a[1], c))
            return (lo, hi) if c >= 0 else (hi, lo)
        return (None, None)
    p = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
    return (min(p), max(p))


def _div_bound(a, b, e):
    if b[0] is None or b[0] != b[1] or b[0] <= 0:
        return (None, None)
    c = b[0]
    return (_opt(lambda x, y: x // y, a[0], c), _opt(lambda x, y: x // y, a[1], c))


def _mod_bound(a, b, e):
    if b[0] is None or b[0] != b[1] or b[0] <= 0:
        return (None, None)
    c = b[0]
    if a[0] is not None and a[1] is not None and a[0] >= 0 and a[1] < c:
        return a
    if a[0] is not None and a[1] is not None and a[0] // c == a[1] // c:
        return (a[0] % c, a[1] % c)
    return (0, c - 1)


def _cmp_bound(a, b, e):
    return (0, 1)


_BOUND_RULES = {
    BinKind.ADD: lambda a, b, e: (_opt(int.__add__, a[0], b[0]), _opt(int.__add__, a[1], b[1])),
    BinKind.SUB: lambda a, b, e: (_opt(int.__sub__, a[0], b[1]), _opt(int.__sub__, a[1], b[0])),
    BinKind.MUL: _mul_bound,
    BinKind.FLOORDIV: _div_bound,
    BinKind.FLOORMOD: _mod_bound,
    BinKind.MIN: lambda a, b, e: (_opt(min, a[0], b[0]),
                                  a[1] if b[1] is None else b[1] if a[1] is None
                                  else min(a[1], b[1])),
    BinKind.MAX: lambda a, b, e: (a[0] if b[0] is None else b[0] if a[0] is None
                                  else max(a[0], b[0]), _opt(max, a[1], b[1])),
    BinKind.EQ: _cmp_bound, BinKind.NE: _cmp_bound, BinKind.LT: _cmp_bound,
    BinKind.LE: _cmp_bound, BinKind.AND: _cmp_bound, BinKind.OR: _cmp_bound,
}


def const_bound(e: Expr, ranges: dict | None = None) -> Bound:
    """Inclusive constant bounds of an integer expression given ranges of its variables."""
    return _Bounds(ranges or {}).visit(e)


# ---- constant folding ----------------------------------------------------------------------

_NP_BIN = {
    BinKind.ADD: np.add, BinKind.SUB: np.subtract, BinKind.MUL: np.multiply,
    BinKind.DIV: np.true_divide, BinKind.FLOORDIV: np.floor_divide, BinKind.FLOORMOD: np.mod,
    BinKind.MIN: np.minimum, BinKind.MAX: np.maximum, BinKind.EQ: np.equal,
    BinKind.NE: np.not_equal, BinKind.LT: np.less, BinKind.LE: np.less_equal,
    BinKind.AND: np.logical_and, BinKind.OR: np.logical_or,
}

_PY_INDEX = {
    BinKind.ADD: lambda x, y: x + y, BinKind.SUB: lambda x, y: x - y,
    BinKind.MUL: lambda x, y: x * y, BinKind.FLOORDIV: lambda x, y: x // y,
    BinKind.FLOORMOD: lambda x, y: x % y, BinKind.MIN: min, BinKind.MAX: max,
    BinKind.EQ: lambda x, y: x == y, BinKind.NE: lambda x, y: x != y,
    BinKind.LT: lambda x, y: x < y, BinKind.LE: lambda x, y: x <= y,
}


def _fold(op: BinKind, a: Const, b: Const) -> Expr | None:
    if op in (BinKind.FLOORDIV, BinKind.FLOORMOD) and not dt.is_float(a.dtype) and b.value == 0:
        return None  # leave it to fail at run time as the user wrote it
    if dt.is_int(a.dtype) and a.dtype in _INDEX and op in _PY_INDEX:
        # index arithmetic in Python ints: no overflow on the way (N + f - 1 of a split)
        r = _PY_INDEX[op](int(a.value), int(b.value))
        return Const(r, "bool" if op.is_compare else a.dtype)
    with np.errstate(all="ignore"):
        r = _NP_BIN[op](np.array(a.value, a.dtype), np.array(b.value, b.dtype))
    return Const(r.item(), "bool" if op.is_compare or op.is_logical else a.dtype)


# ---- affine canonical form -----------------------------------------------------------------

def linear_terms(e: Expr) -> tuple[dict[Expr, int], int]:
    """``e`` as ({term: coefficient}, constant)."""
    if isinstance(e, Const):
        return {}, int(e.value)
    if isinstance(e, BinOp) and e.op in (BinKind.ADD, BinKind.SUB):
        ta, ca = linear_terms(e.a)
        tb, cb = linear_terms(e.b)
        s = 1 if e.op is BinKind.ADD else -1
        out = dict(ta)
        for t, k in tb.items():
            out[t] = out.get(t, 0) + s * k
        return out, ca + s * cb
    if isinstance(e, BinOp) and e.op is BinKind.MUL:
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, Const):
                t, c = linear_terms(x)
                return {k: v * y.value for k, v in t.items()}, c * y.value
    return {e: 1}, 0


def _merge_divmod(terms: dict[Expr, int]) -> tuple[dict[Expr, int], int]:
    # (x//c)*c*k + (x%c)*k -> x*k
    extra = 0
    for t, k in list(terms.items()):
        if not (isinstance(t, BinOp) and t.op is BinKind.FLOORMOD and isinstance(t.b, Const)):
            continue
        q = BinOp(BinKind.FLOORDIV, t.a, t.b)
        if t in terms and k != 0 and terms.get(q, 0) == k * t.b.value:
            del terms[q], terms[t]
            xt, xc = linear_terms(t.a)
            for u, v in xt.items():
                terms[u] = terms.get(u, 0) + k * v
            extra += k * xc
    return terms, extra


def _build(terms: dict[Expr, int], const: int, dtype: str) -> Expr:
    terms, extra = _merge_divmod(dict(terms))
    const += extra
    items = [(t, k) for t, k in terms.items() if k != 0]
    items.sort(key=lambda tk: tk[1] < 0)  # stable: positive terms first
    out: Expr | None = None
    if items and items[0][1] < 0 and const > 0:
        out, const = Const(const, dtype), 0  # c - x*k reads better than -x*k + c
    for t, k in items:
        mag = abs(k)
        term = t if mag == 1 else BinOp(BinKind.MUL, t, Const(mag, dtype))
        if out is None:
            out = term if k > 0 else BinOp(BinKind.SUB, Const(0, dtype), term) if mag != 1 \
                else BinOp(BinKind.MUL, t, Const(-1, dtype))
        else:
            out = BinOp(BinKind.ADD if k > 0 else BinKind.SUB, out, term)
    if out is None:
        return Const(const, dtype)
    if const > 0:
        return BinOp(BinKind.ADD, out, Const(const, dtype))
    if const < 0:
        return BinOp(BinKind.SUB, out, Const(-const, dtype))
    return out


# ---- binary rules --------------------------------------------------------------------------
# A rule takes the simplifier (for its ranges), the operator and the simplified operands, and
# returns the rewritten expression or None where it does not apply. @_rule(ops) lists it for
# those operators; Simplifier.binop tries an operator's rules in the order they are defined
# here, and the first that applies wins. The affine rules assume no overflow: they apply to
# index arithmetic only, never to data values (numpy wraps int32 data: X*65536//65536 is not X).

BinRule = Callable[["Simplifier", BinKind, Expr, Expr], "Expr | None"]
_BIN_RULES: list[tuple[frozenset[BinKind], BinRule]] = []


def _rule(*ops: BinKind) -> Callable[[BinRule], BinRule]:
    """Add the decorated rule for ``ops`` (every operator when none is given)."""
    def add(rule: BinRule) -> BinRule:
        _BIN_RULES.append((frozenset(ops or BinKind), rule))
        return rule
    return add


_ARITH = (BinKind.ADD, BinKind.SUB, BinKind.MUL)
_MINMAX = (BinKind.MIN, BinKind.MAX)
_LOGIC = (BinKind.AND, BinKind.OR)


@_rule()
def _fold_constants(s: Simplifier, op: BinKind, a: Expr, b: Expr) -> Expr | None:
    """c1 op c2 -> c (numpy's semantics; index dtypes in Python ints; x // 0 is left as is)."""
    if isinstance(a, Const) and isinstance(b, Const):
        return _fold(op, a, b)
    return None


@_rule(*_ARITH)
def _affine(s: Simplifier, op: BinKind, a: Expr, b: Expr) -> Expr | None:
    """index a + b, a - b, a * b -> the canonical affine form (io*32 + ii - io*32 -> ii)."""
    if _both_index(a, b):
        t, c = linear_terms(BinOp(op, a, b))
        return _build(t, c, a.dtype)
    return None


@_rule(BinKind.FLOORDIV, BinKind.FLOORMOD)
def _divmod_const(s: Simplifier, op: BinKind, a: Expr, b: Expr) -> Expr | None:
    """index (c*k*t + r) // c -> k*t + r // c ; (c*k*t + r) % c -> r % c (constant c > 0;
    the ranges then decide r // c and r % c, see Simplifier._divmod)"""
    if isinstance(b, Const) and b.value > 0 and _both_index(a, b):
        return s._divmod(op, a, b.value)
    return None


@_rule(*_MINMAX)
def _minmax_same(s: Simplifier, op: BinKind, a: Expr, b: Expr) -> Expr | None:
    """min(x, x) -> x ; max(x, x) -> x"""
    return a if a == b else None


@_rule(*_MINMAX)
def _minmax_absorb(s: Simplifier, op: BinKind, a: Expr, b: Expr) -> Expr | None:
    """index min(min(x, y), y) -> min(x, y) (either side, either operand; max alike);
    min(max(x, y), x) -> x and max(min(x, y), x) -> x (absorption)"""
    if not _both_index(a, b):
        return None
    for inner, other in ((a, b), (b, a)):
        if isinstance(inner, BinOp) and other in (inner.a, inner.b):
            if inner.op is op:
                return inner
            if inner.op in _MINMAX:
                return other
    return None


@_rule(*_MINMAX)
def _minmax_range(s: Simplifier, op: BinKind, a: Expr, b: Expr) -> Expr | None:
    """index min(a, b) -> a where a <= b over the ranges (-> b where a >= b); max alike."""
    if not _both_index(a, b):
        return None
    lo, hi = s.bound(s.binop(BinKind.SUB, a, b))
    a_le_b, a_ge_b = hi is not None and hi <= 0, lo is not None and lo >= 0
    if op is BinKind.MIN:
        return a if a_le_b else b if a_ge_b else None
    return a if a_ge_b else b if a_le_b else None


# a op b decided by the range [lo, hi] of a - b (None bounds read as -inf, +inf):
# op -> (a op b holds everywhere when, it holds nowhere when)
_DECIDE = {
    BinKind.LT: (lambda lo, hi: hi < 0, lambda lo, hi: lo >= 0),
    BinKind.LE: (lambda lo, hi: hi <= 0, lambda lo, hi: lo > 0),
    BinKind.EQ: (lambda lo, hi: lo == hi == 0, lambda lo, hi: lo > 0 or hi < 0),
    BinKind.NE: (lambda lo, hi: lo > 0 or hi < 0, lambda lo, hi: lo == hi == 0),
}


@_rule(*_DECIDE)
def _compare_range(s: Simplifier, op: BinKind, a: Expr, b: Expr) -> Expr | None:
    """index a < b (<=, ==, !=) -> True or False where the range of a - b decides it."""
    if not _both_index(a, b):
        return None
    lo, hi = s.bound(s.binop(BinKind.SUB, a, b))
    lo, hi = -math.inf if lo is None else lo, math.inf if hi is None else hi
    always, never = _DECIDE[op]
    if always(lo, hi):
        return Const(True, "bool")
    if never(lo, hi):
        return Const(False, "bool")
    return None


@_rule(*_LOGIC)
def _logic_const(s: Simplifier, op: BinKind, a: Expr, b: Expr) -> Expr | None:
    """True & y -> y ; False & y -> False ; True | y -> True ; False | y -> y (either side)"""
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Const):
            if op is BinKind.AND:
                return y if x.value else x
            return x if x.value else y
    return None


@_rule(*_LOGIC)
def _logic_same(s: Simplifier, op: BinKind, a: Expr, b: Expr) -> Expr | None:
    """x & x -> x ; x | x -> x"""
    return a if a == b else None


@_rule(BinKind.MUL, BinKind.DIV, BinKind.SUB)
def _float_unit(s: Simplifier, op: BinKind, a: Expr, b: Expr) -> Expr | None:
    """float x*1 -> x ; 1*x -> x ; x/1 -> x ; x-0 -> x (not x+0: -0.0 + 0.0 is 0.0)"""
    if not dt.is_float(a.dtype):
        return None
    match op, a, b:
        case (BinKind.MUL | BinKind.DIV), _, Const(value=1.0):
            return a  # x*1 -> x ; x/1 -> x
        case BinKind.MUL, Const(value=1.0), _:
            return b  # 1*x -> x
        case BinKind.SUB, _, Const(value=0.0):
            return a  # x-0 -> x
    return None


# each operator -> its rules, in order
_RULES_FOR = {op: tuple(r for ops, r in _BIN_RULES if op in ops) for op in BinKind}


def _both_index(a: Expr, b: Expr) -> bool:
    return a.dtype in _INDEX and _is_index(a) and _is_index(b)


def _is_index(e: Expr) -> bool:
    """Integer arithmetic on variables and constants only (no loads or calls)."""
    match e:
        case Const() | Var():
            return True
        case BinOp(a=x, b=y):
            return _is_index(x) and _is_index(y)
        case Select(cond=c, t=t, f=f):
            return _is_index(t) and _is_index(f) and _is_index(c)
        case Cast(value=x) | Not(a=x):
            return _is_index(x)
    return False


# ---- the rewriter --------------------------------------------------------------------------

class Simplifier(ExprMutator):
    """Bottom-up rewriting; ``ranges`` maps loop variables to inclusive constant bounds."""

    def __init__(self, ranges: dict | None = None):
        self.ranges = ranges or {}

    def bound(self, e: Expr) -> Bound:
        return const_bound(e, self.ranges)

    def visit_BinOp(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        return self.binop(e.op, a, b, e if a is e.a and b is e.b else None)

    def binop(self, op: BinKind, a: Expr, b: Expr, same: Expr | None = None) -> Expr:
        """``a op b`` of simplified operands, rewritten by the first rule that applies
        (``same``: the unchanged node, returned where none does)."""
        for rule in _RULES_FOR[op]:
            r = rule(self, op, a, b)
            if r is not None:
                return r
        return same if same is not None else BinOp(op, a, b)

    def _divmod(self, op: BinKind, a: Expr, c: int) -> Expr:
        """``a // c`` or ``a % c`` of an index expression and a constant ``c > 0``."""
        d = a.dtype
        if c == 1:
            return a if op is BinKind.FLOORDIV else Const(0, d)  # x // 1 -> x ; x % 1 -> 0
        # (c*k*t + r) // c -> k*t + r // c ; (c*k*t + r) % c -> r % c
        terms, const = linear_terms(a)
        quot = {t: k // c for t, k in terms.items() if k % c == 0}
        rest_terms = {t: k for t, k in terms.items() if k % c != 0}
        quot_const, rest_const = divmod(const, c)
        rest = _build(rest_terms, rest_const, d)
        if op is BinKind.FLOORMOD:
            return self._mod(rest, c)
        qt, qc = linear_terms(self._div(rest, c))
        for t, k in qt.items():
            quot[t] = quot.get(t, 0) + k
        return _build(quot, quot_const + qc, d)

    def _mod(self, x: Expr, c: int) -> Expr:
        lo, hi = self.bound(x)
        if lo is not None and hi is not None and 0 <= lo and hi < c:
            return x  # x % c -> x when 0 <= x < c
        match x:
            case BinOp(op=BinKind.FLOORMOD, a=y, b=Const(value=k)) if k % c == 0:
                x = y  # (y % (k*c)) % c -> y % c
        return BinOp(BinKind.FLOORMOD, x, Const(c, x.dtype))

    def _div(self, x: Expr, c: int) -> Expr:
        d = x.dtype
        lo, hi = self.bound(x)
        if lo is not None and hi is not None and lo // c == hi // c:
            return Const(lo // c, d)  # x // c -> q when x // c is q over x's range
        match x:
            case BinOp(op=BinKind.FLOORDIV, a=y, b=Const(value=k)) if k > 0:
                return BinOp(BinKind.FLOORDIV, y, Const(k * c, d))  # (y // k) // c -> y // (k*c)
        return BinOp(BinKind.FLOORDIV, x, Const(c, d))

    def visit_Not(self, e):
        a = self.visit(e.a)
        match a:
            case Const(value=v):
                return Const(not v, "bool")  # !True -> False ; !False -> True
            case Not(a=x):
                return x  # !!x -> x
        return e if a is e.a else Not(a)

    def visit_Select(self, e):
        c, t, f = self.visit(e.cond), self.visit(e.t), self.visit(e.f)
        if isinstance(c, Const):
            return t if c.value else f  # select(True, t, f) -> t ; select(False, t, f) -> f
        if t == f:
            return t  # select(c, x, x) -> x
        return e if c is e.cond and t is e.t and f is e.f else Select(c, t, f)

    def visit_Cast(self, e):
        v = self.visit(e.value)
        if v.dtype == e.dtype:
            return v  # T(x: T) -> x
        if isinstance(v, Const):
            with np.errstate(all="ignore"):  # T(c) -> c converted as numpy does (wrapping)
                return Const(np.array(v.value, v.dtype).astype(e.dtype).item(), e.dtype)
        return e if v is e.value else Cast(e.dtype, v)

    def visit_Call(self, e):
        args = tuple(self.visit(a) for a in e.args)
        if all(isinstance(x, Const) for x in args):
            # f(c) -> its value by the intrinsic's numpy function, where that is finite
            r = INTRINSICS[e.name].fold(*(np.array(x.value, x.dtype) for x in args))
            if math.isfinite(float(r)):
                return Const(r.item(), e.dtype)
        return e if all(x is y for x, y in zip(args, e.args)) else Call(e.name, args, e.dtype)


def simplify(e: Expr, ranges: dict | None = None) -> Expr:
    """Simplify ``e``; ``ranges`` maps Vars to inclusive (lo, hi) ints known to hold."""
    return Simplifier(ranges).visit(e)


class _PushMinMax(ExprMutator):
    """``min(a, b) + c -> min(a + c, b + c)``: exposes constant extents of bound regions."""

    def visit_BinOp(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        if e.op in (BinKind.ADD, BinKind.SUB) and a.dtype in _INDEX:
            if isinstance(a, BinOp) and a.op in (BinKind.MIN, BinKind.MAX):
                return BinOp(a.op, self.visit(BinOp(e.op, a.a, b)),
                             self.visit(BinOp(e.op, a.b, b)))
            if isinstance(b, BinOp) and b.op in (BinKind.MIN, BinKind.MAX):
                flip = {BinKind.MIN: BinKind.MAX, BinKind.MAX: BinKind.MIN}
                op = b.op if e.op is BinKind.ADD else flip[b.op]
                return BinOp(op, self.visit(BinOp(e.op, a, b.a)), self.visit(BinOp(e.op, a, b.b)))
        return e if a is e.a and b is e.b else BinOp(e.op, a, b)


def push_minmax(e: Expr) -> Expr:
    """Move additions into min/max: ``min(a, b) - c -> min(a - c, b - c)``."""
    return _PushMinMax().visit(e)


def upper_bound(e: Expr, ranges: dict | None = None) -> int | None:
    """A constant upper bound of an integer expression, or None if there is none."""
    pushed = simplify(_PushMinMax().visit(simplify(e, ranges)), ranges)
    return const_bound(pushed, ranges)[1]
