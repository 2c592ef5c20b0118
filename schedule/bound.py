"""Bound inference: loop extents through splits/fuses, and the regions stages must compute.

A stage's *region* is, per root axis, ``(min, extent)`` expressions in the variables of the
loops that enclose it. Root stages cover their whole shape. A stage computed at a consumer's
loop ``L`` covers the union of what every reader inside ``L`` loads from it, with the loops
nested inside ``L`` relaxed over their ranges, clipped to its shape.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..lang.expr import BinKind, BinOp, Const, Expr, IterVar, Var
from ..lang.simplify import push_minmax, simplify, upper_bound
from ..lang.visitor import ExprVisitor
from .stage import Fuse, Split, Stage

Interval = tuple  # (lo Expr, hi Expr), inclusive; None when unknown


@dataclass
class LoopNest:
    """The loops of one stage for one region: extents, root values and tail guards."""

    stage: Stage
    region: list[tuple[Expr, Expr]]              # per root axis (spatial then reduce)
    extents: dict[IterVar, Expr] = field(default_factory=dict)
    values: dict[Var, Expr] = field(default_factory=dict)    # root var -> value in leaf vars
    guards: list[Expr] = field(default_factory=list)

    @property
    def roots(self) -> list[IterVar]:
        return list(self.stage.op.axis) + list(self.stage.op.reduce_axis)


def _ceildiv(a: Expr, b: Expr) -> Expr:
    return (a + (b - 1)) // b


def loop_nest(stage: Stage, region, ranges: dict) -> LoopNest:
    """Extents of every loop of ``stage`` and each root variable's value in leaf variables."""
    nest = LoopNest(stage, region)
    ext = nest.extents
    for iv, (_, e) in zip(nest.roots, region):
        ext[iv] = e
    for rel in stage.relations:
        if isinstance(rel, Split):
            e = ext[rel.parent]
            if rel.factor is not None:
                f = Const(rel.factor, "int32")
                ext[rel.outer], ext[rel.inner] = simplify(_ceildiv(e, f), ranges), f
            else:
                p = Const(rel.nparts, "int32")
                ext[rel.outer], ext[rel.inner] = p, simplify(_ceildiv(e, p), ranges)
        else:
            ext[rel.fused] = simplify(ext[rel.outer] * ext[rel.inner], ranges)
    val: dict[IterVar, Expr] = {v: v.var for v in stage.leaf_iter_vars}
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            val[rel.parent] = val[rel.outer] * ext[rel.inner] + val[rel.inner]
            covered = simplify(ext[rel.outer] * ext[rel.inner] - ext[rel.parent], ranges)
            if not (isinstance(covered, Const) and covered.value == 0):
                nest.guards.append(val[rel.parent] < ext[rel.parent])
        elif isinstance(rel, Fuse):
            val[rel.outer] = val[rel.fused] // ext[rel.inner]
            val[rel.inner] = val[rel.fused] % ext[rel.inner]
    for iv, (mn, _) in zip(nest.roots, region):
        nest.values[iv.var] = simplify(mn + val[iv], ranges)
    return nest


# ---- symbolic intervals --------------------------------------------------------------------

class _Interval(ExprVisitor):
    """Symbolic inclusive bounds of an integer expression; variables in ``env`` range over
    their (lo, hi), others are fixed. Returns None where no bound is known."""

    def __init__(self, env: dict[Var, Interval]):
        self.env = env

    def visit_Const(self, e):
        return (e, e)

    def visit_Var(self, e):
        return self.env.get(e, (e, e))

    def visit_Cast(self, e):
        return self.visit(e.value) if e.dtype.startswith("int") else None

    def visit_BinOp(self, e):
        a = self.visit(e.a)
        b = self.visit(e.b)
        if a is None or b is None:
            return None
        op = e.op
        if op is BinKind.ADD:
            return (a[0] + b[0], a[1] + b[1])
        if op is BinKind.SUB:
            return (a[0] - b[1], a[1] - b[0])
        if op is BinKind.MUL:
            return _mul(a, b)
        if op in (BinKind.FLOORDIV, BinKind.FLOORMOD) and isinstance(e.b, Const) \
                and e.b.value > 0:
            c = e.b.value
            if op is BinKind.FLOORDIV:
                return (a[0] // c, a[1] // c)
            if a[0] == a[1]:
                return (a[0] % c, a[0] % c)
            return (Const(0, e.dtype), Const(c - 1, e.dtype))
        if op is BinKind.MIN:
            return (_min(a[0], b[0]), _min(a[1], b[1]))
        if op is BinKind.MAX:
            return (_max(a[0], b[0]), _max(a[1], b[1]))
        return None

    def visit_Select(self, e):
        t, f = self.visit(e.t), self.visit(e.f)
        if t is None or f is None:
            return None
        return (_min(t[0], f[0]), _max(t[1], f[1]))

    def visit_Load(self, e): return None
    def visit_BufferLoad(self, e): return None
    def visit_Call(self, e): return None
    def visit_Not(self, e): return None
    def visit_Reduce(self, e): return None


def _min(a: Expr, b: Expr) -> Expr:
    return BinOp(BinKind.MIN, a, b)


def _max(a: Expr, b: Expr) -> Expr:
    return BinOp(BinKind.MAX, a, b)


def _mul(a: Interval, b: Interval) -> Interval | None:
    for x, y in ((a, b), (b, a)):
        if isinstance(y[0], Const) and y[0] == y[1]:
            c = y[0]
            return (x[0] * c, x[1] * c) if c.value >= 0 else (x[1] * c, x[0] * c)
    return None


def interval(e: Expr, env: dict[Var, Interval], ranges: dict | None = None) -> Interval | None:
    """Bounds of ``e`` with the variables of ``env`` relaxed, simplified."""
    r = _Interval(env).visit(e)
    if r is None:
        return None
    return (simplify(r[0], ranges), simplify(r[1], ranges))


def relax_leaves(nest: LoopNest, leaves, env: dict, ranges: dict) -> None:
    """Add ``leaves`` of ``nest`` to ``env``, each over ``[0, extent - 1]``."""
    for leaf in leaves:
        ext = nest.extents[leaf]
        ub = upper_bound(ext, ranges)
        if ub is not None:
            hi: Expr = Const(ub - 1, "int32")
        else:
            iv = interval(ext - 1, env, ranges)
            hi = iv[1] if iv is not None else ext - 1
        env[leaf.var] = (Const(0, "int32"), hi)


def root_intervals(nest: LoopNest, env: dict, ranges: dict) -> dict[Var, Interval]:
    """Each root variable's bounds with relaxed leaves, clipped to the stage's region."""
    out = {}
    for iv, (mn, ext) in zip(nest.roots, nest.region):
        r = interval(nest.values[iv.var], env, ranges)
        dom_lo = interval(mn, env, ranges)
        dom_hi = interval(mn + ext - 1, env, ranges)
        if r is None:
            r = (dom_lo[0], dom_hi[1])
        else:
            r = (simplify(_max(r[0], dom_lo[0]), ranges), simplify(_min(r[1], dom_hi[1]), ranges))
        out[iv.var] = r
    return out


def union_bounds(shape, accesses: list[tuple[Expr, ...]], env: dict, ranges: dict):
    """The inclusive (lo, hi) per dimension of a tensor of ``shape`` covering ``accesses``,
    clipped to the tensor."""
    bounds = []
    for d, size in enumerate(shape):
        size_e = size if isinstance(size, Expr) else Const(size, "int32")
        lo = hi = None
        for idx in accesses:
            r = interval(idx[d], env, ranges)
            if r is None:
                lo, hi = Const(0, "int32"), size_e - 1
                break
            lo = r[0] if lo is None else simplify(_min(lo, r[0]), ranges)
            hi = r[1] if hi is None else simplify(_max(hi, r[1]), ranges)
        bounds.append((simplify(_max(lo, Const(0, "int32")), ranges),
                       simplify(_min(hi, size_e - 1), ranges)))
    return bounds


def bounds_region(bounds, ranges: dict):
    """(min, extent) per dimension of inclusive ``bounds``."""
    return [(lo, simplify(push_minmax(simplify(hi - lo + 1, ranges)), ranges))
            for lo, hi in bounds]


def union_region(shape, accesses: list[tuple[Expr, ...]], env: dict, ranges: dict):
    """The (min, extent) per dimension of a tensor of ``shape`` covering ``accesses``."""
    return bounds_region(union_bounds(shape, accesses, env, ranges), ranges)
