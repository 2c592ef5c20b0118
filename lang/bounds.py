"""Static range checks of a compute's reads: ``A[i + 1]`` over the whole extent of ``i`` is a
``LangError`` when the compute is defined, not a read past the buffer at run time.

Only what can be *proved* is refused. An index is checked when its range is exact: an affine
combination of the compute's axes (``2*i + k - 1``), floor division by a positive constant
included, each axis over its whole domain or over a box cut out by the conditions that guard
the read, and each axis in at most one term (then the bounds of the range are attained, so a
range past the tensor means a read past it for some element). Sizes may be symbolic
(``lt.var``) where the difference to the tensor's extent simplifies to a constant
(``A[i + 1]`` with ``i < n`` on a tensor of extent ``n``).

Guards are followed as the generated code evaluates them: only the chosen side of
``lt.if_then_else`` runs, ``a & b`` evaluates ``b`` only where ``a`` holds (and ``a | b`` only
where ``a`` does not), and a reduction's source only where its ``where`` holds. A guard made of
comparisons of one axis with a constant narrows that axis (``lt.if_then_else(i >= 1, A[i - 1],
0)`` reads ``A`` over ``[0, n - 2]``); under any other guard the reads are not checked (their
range is not a box). Indices that load a tensor (gathers) are data-dependent and not checked
here: build with the target option ``-bounds-check`` to check them at run time.
"""
from __future__ import annotations

from ..errors import LangError
from .expr import BinKind, BinOp, Cast, Const, Expr, IterVar, Load, Not, Reduce, Select, Var
from .simplify import linear_terms, simplify
from .visitor import ExprVisitor, collect_loads

Range = tuple  # (lo Expr, hi Expr), inclusive
Env = dict     # Var -> Range; None: the reads here have no exact range (not checked)


def check_reads(name: str, body: Expr, axis: tuple[IterVar, ...]) -> None:
    """Raise ``LangError`` if ``body`` (the body of compute ``name`` over ``axis``) provably
    reads outside a tensor (see the module docstring for what is proved)."""
    env: Env = {}
    doms = list(axis) + (list(body.axis) if isinstance(body, Reduce) else [])
    for iv in doms:
        ext = simplify(iv.extent)
        if isinstance(ext, Const) and ext.value <= 0:
            return  # an empty domain reads nothing
        env[iv.var] = (simplify(iv.min), simplify(iv.min + ext - 1))
    _Reads(name).walk(body, env)


class _Reads(ExprVisitor):
    def __init__(self, name: str):
        self.name = name
        self.env: Env | None = None

    def walk(self, e: Expr, env: Env | None) -> None:
        saved, self.env = self.env, env
        self.visit(e)
        self.env = saved

    def visit_Load(self, e: Load):
        if self.env is not None:
            for d, idx in enumerate(e.indices):
                self._check(e, d, idx)
        super().visit_Load(e)

    def _check(self, ld: Load, d: int, idx: Expr) -> None:
        r = exact_range(idx, self.env)
        if r is None:
            return
        size = ld.tensor.shape[d]
        size_e = size if isinstance(size, Expr) else Const(size, "int32")
        below = simplify(r[0])
        above = simplify(r[1] - (size_e - 1))
        if not (isinstance(below, Const) and below.value < 0 or
                isinstance(above, Const) and above.value > 0):
            return
        t = ld.tensor.name
        lo, hi = simplify(r[0]), simplify(r[1])
        raise LangError(
            f"compute '{self.name}': {ld} reads outside '{t}': index {d} is {idx}, which "
            f"takes the values [{lo}, {hi}], but dimension {d} of '{t}' has extent {size} "
            f"(indices 0 to {simplify(size_e - 1)}); shrink the compute's shape, clamp the "
            f"index (lt.max/lt.min) or guard the read: lt.if_then_else(cond, {ld}, 0)")

    def visit_Select(self, e: Select):
        self.visit(e.cond)
        self.walk(e.t, narrow(self.env, e.cond))
        self.walk(e.f, narrow(self.env, Not(e.cond)))

    def visit_BinOp(self, e: BinOp):
        self.visit(e.a)
        if e.op is BinKind.AND:
            self.walk(e.b, narrow(self.env, e.a))
        elif e.op is BinKind.OR:
            self.walk(e.b, narrow(self.env, Not(e.a)))
        else:
            self.visit(e.b)

    def visit_Reduce(self, e: Reduce):
        if e.where is None:
            self.visit(e.source)
            return
        self.visit(e.where)
        self.walk(e.source, narrow(self.env, e.where))


# ---- exact ranges --------------------------------------------------------------------------

def exact_range(e: Expr, env: Env) -> Range | None:
    """The attained (lo, hi) of the integer expression ``e`` over the box ``env``, or None
    when it is not known to be attained (see the module docstring)."""
    r = _range(e, env)
    return None if r is None else (r[0], r[1])


def _range(e: Expr, env: Env):
    """(lo, hi, axes used) or None."""
    terms, c = linear_terms(e)
    lo: Expr = Const(c, "int32")
    hi: Expr = Const(c, "int32")
    used: set = set()
    for atom, k in terms.items():
        r = _atom(atom, env)
        if r is None or r[2] & used:
            return None
        used |= r[2]
        a, b = (r[0], r[1]) if k > 0 else (r[1], r[0])
        lo, hi = lo + a * k, hi + b * k
    return simplify(lo), simplify(hi), used


def _atom(e: Expr, env: Env):
    if isinstance(e, Var):
        return (*env[e], {e}) if e in env else (e, e, set())   # a size: one fixed value
    if isinstance(e, Cast) and e.dtype.startswith(("int", "uint")) and \
            e.value.dtype.startswith(("int", "uint")):
        return _range(e.value, env)
    if isinstance(e, BinOp) and e.op is BinKind.FLOORDIV and isinstance(e.b, Const) and \
            e.b.value > 0:
        r = _range(e.a, env)   # floor(x / c) is monotone: it attains its bounds where x does
        return None if r is None else (simplify(r[0] // e.b), simplify(r[1] // e.b), r[2])
    return None


# ---- narrowing by guards -------------------------------------------------------------------

def narrow(env: Env | None, cond: Expr) -> Env | None:
    """``env`` restricted to where ``cond`` holds, or None when that is not a box."""
    if env is None:
        return None
    out = dict(env)
    for c in _conjuncts(cond):
        c = simplify(c)
        if isinstance(c, Const):
            if c.value:
                continue
            return None              # never true: nothing here runs
        if not _narrow_one(out, c):
            return None
    return out


def _conjuncts(c: Expr) -> list[Expr]:
    if isinstance(c, BinOp) and c.op is BinKind.AND:
        return _conjuncts(c.a) + _conjuncts(c.b)
    if isinstance(c, Not):
        inner = c.a
        if isinstance(inner, Not):
            return _conjuncts(inner.a)
        if isinstance(inner, BinOp) and inner.op is BinKind.OR:   # !(a | b) -> !a & !b
            return _conjuncts(Not(inner.a)) + _conjuncts(Not(inner.b))
        if isinstance(inner, BinOp) and inner.op is BinKind.LT:   # !(a < b) -> b <= a
            return [BinOp(BinKind.LE, inner.b, inner.a)]
        if isinstance(inner, BinOp) and inner.op is BinKind.LE:   # !(a <= b) -> b < a
            return [BinOp(BinKind.LT, inner.b, inner.a)]
    return [c]


def _narrow_one(env: Env, c: Expr) -> bool:
    """Narrow ``env`` in place by ``a < b``, ``a <= b`` or ``a == b`` in one axis; False when
    ``c`` is anything else (or the new bound cannot be compared with the old one)."""
    if not (isinstance(c, BinOp) and c.op in (BinKind.LT, BinKind.LE, BinKind.EQ)) or \
            not c.a.dtype.startswith(("int", "uint")) or collect_loads(c):
        return False
    terms, k0 = linear_terms(simplify(c.a - c.b))
    axes = [t for t in terms if t in env and terms[t] != 0]
    if len(axes) != 1 or any(not isinstance(t, Var) for t in terms if terms[t] != 0):
        return False
    v = axes[0]
    k = terms[v]
    rest: Expr = Const(k0, "int32")
    for t, m in terms.items():
        if t is not v:
            rest = rest + t * m
    rest = simplify(rest)
    # k*v + rest < 0 (<= 0, == 0)
    slack = 1 if c.op is BinKind.LT else 0
    lo, hi = env[v]
    if k > 0:                                 # v <= floor((-rest - slack) / k)
        new_hi = simplify((Const(0, "int32") - rest - slack) // k)
        new_lo = simplify((Const(0, "int32") - rest + k - 1) // k) if c.op is BinKind.EQ \
            else None
    else:                                     # v >= ceil((rest + slack) / -k)
        m = -k
        new_lo = simplify((rest + slack + m - 1) // m)
        new_hi = simplify(rest // m) if c.op is BinKind.EQ else None
    if new_hi is not None:
        hi = _tighter(hi, new_hi, min)
    if new_lo is not None and hi is not None:
        lo = _tighter(lo, new_lo, max)
    if lo is None or hi is None:
        return False
    gap = simplify(hi - lo)
    if isinstance(gap, Const) and gap.value < 0:
        return False                          # empty: this side never runs
    env[v] = (lo, hi)
    return True


def _tighter(old: Expr, new: Expr, pick) -> Expr | None:
    d = simplify(new - old)
    if not isinstance(d, Const):
        return None
    return new if pick(d.value, 0) == d.value and d.value != 0 else old
