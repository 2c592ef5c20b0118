"""Tail partitioning: split a loop's iterations into full tiles and the rest.

    for io in [0, 3):                         for io in [0, 3):
      for ii in [0, min(4, 10 - io*4)):  ->     if 4 <= 10 - io*4:
        C[io*4 + ii] = 0.0f                       for ii in [0, 4):       # constant: unrolls,
                                                    C[io*4 + ii] = 0.0f   # vectorizes
                                                else:
                                                  for ii in [0, 10 - io*4):
                                                    C[io*4 + ii] = 0.0f

The candidates are ``min(c, e)``/``max(c, e)`` with ``c`` constant and guards ``if cond``, in
the variables of the loops and lets around them only, outside prefetch addresses. Both
branches hold a copy of the body, its lets included (the same Vars: they are in different
scopes). A target may keep some bodies whole (``region_hook``): a GPU target's work-group
regions, whose barriers every work-item must reach, are never duplicated.
"""
from __future__ import annotations

from typing import Protocol

from ...lang.expr import BinKind, BinOp, Const, Expr, Var
from ...lang.simplify import linear_terms
from ...lang.visitor import ExprMutator, ExprVisitor, collect_vars
from ..stmt import EMPTY, For, IfThenElse, Stmt, StmtMutator, StmtVisitor


class RegionHook(Protocol):
    """What a target tells the statement passes about regions it runs as one unit."""

    def keeps_whole(self, body: Stmt) -> bool:
        """True where loop body ``body`` must not be duplicated (partitioned)."""
        ...


# target kind -> its hook; a backend registers its own (lower(target=...) looks it up here)
REGION_HOOKS: dict[str, RegionHook] = {}


def register_region_hook(kind: str, hook: RegionHook) -> None:
    """Make ``hook`` what ``lower(..., target=<kind>)`` tells the passes."""
    REGION_HOOKS[kind] = hook


MAX_TAIL_CONDS = 3           # candidates per loop
MAX_PARTITION_DEPTH = 3      # at most 2**3 versions of a loop body
MAX_PARTITION_SIZE = 400     # statements; larger bodies keep their guards


class _Candidates(ExprVisitor):
    """min(c, e)/max(c, e) with c constant and e in ``allowed`` vars only."""

    def __init__(self, allowed: set, var: Var):
        self.allowed, self.var = allowed, var
        self.found: dict[Expr, Expr] = {}   # the min/max node -> condition under which it is c

    def visit_BinOp(self, e):
        super().visit_BinOp(e)
        if e.op not in (BinKind.MIN, BinKind.MAX) or e.a.dtype not in ("int32", "int64"):
            return
        for c, x in ((e.a, e.b), (e.b, e.a)):
            if isinstance(c, Const) and self._ok(x):
                self.found[e] = BinOp(BinKind.LE, c, x) if e.op is BinKind.MIN else \
                    BinOp(BinKind.LE, x, c)

    def _ok(self, x: Expr) -> bool:
        vs = collect_vars(x)
        return self.var in vs and vs <= self.allowed


class _CollectTails(StmtVisitor):
    def __init__(self, allowed: set, var: Var):
        self.cands = _Candidates(allowed, var)
        self.conds: dict[Expr, None] = {}

    def visit_expr(self, e):
        self.cands.visit(e)

    def visit_IfThenElse(self, s):
        vs = collect_vars(s.cond)
        if self.cands.var in vs and vs <= self.cands.allowed and s.orelse is None:
            self.conds[s.cond] = None
        super().visit_IfThenElse(s)

    def visit_Prefetch(self, s):
        """A prefetch's clamp (``min(k + d, extent - 1)``: the last iterations fetch the last
        row again) is no tail: splitting the loop on it copied a micro-kernel's whole body
        into a branch for the last ``d`` iterations, and gcc then kept the 6 x 16 AVX2
        sgemm tile's accumulators in memory (24 of 40 FMAs read the stack at 256^3)."""


class _ReplaceExpr(StmtMutator):
    def __init__(self, table: dict[Expr, Expr]):
        self.table = table

    def visit_expr(self, e):
        return _Replace(self.table).visit(e)

    def visit_IfThenElse(self, s):
        if s.cond in self.table:
            return self.visit(s.then) if self.table[s.cond].value else (
                self.visit(s.orelse) if s.orelse is not None else EMPTY)
        return super().visit_IfThenElse(s)


class _Replace(ExprMutator):
    def __init__(self, table):
        self.table = table

    def visit(self, e):
        r = self.table.get(e)
        return r if r is not None else super().visit(e)


class _Partition(StmtMutator):
    """Split each loop's iterations into the steady state (tails' min() and guards known)
    and the rest: ``for io: body(min(4, N - io*4))`` -> ``for io: if N - io*4 >= 4:
    body(4) else: body(min(...))`` so that full tiles get constant extents (unrolling and
    vectorization) and no guards."""

    def __init__(self, hook: RegionHook | None):
        self.hook = hook
        self.bound: set = set()
        self.depth = 0   # partitioned loops enclosing the current one

    def visit_LetStmt(self, s):
        self.bound.add(s.var)
        out = super().visit_LetStmt(s)
        self.bound.discard(s.var)
        return out

    def visit_For(self, s):
        self.bound.add(s.var)
        col = _CollectTails(set(self.bound), s.var)
        col.visit(s.body)
        tails = list(col.cands.found.items())[:MAX_TAIL_CONDS]
        conds = list(col.conds)[:MAX_TAIL_CONDS]
        split = bool(tails or conds) and self.depth < MAX_PARTITION_DEPTH and \
            _size(s.body) <= MAX_PARTITION_SIZE and \
            not (self.hook is not None and self.hook.keeps_whole(s.body))
        self.depth += split
        body = self.visit(s.body)
        self.depth -= split
        self.bound.discard(s.var)
        if split:
            table = {m: _const_side(m) for m, _ in tails}
            table.update({c: Const(True, "bool") for c in conds})
            cond = None
            for c in [_full_tiles(c, s.var) for _, c in tails] + conds:
                cond = c if cond is None else BinOp(BinKind.AND, cond, c)
            fast = _ReplaceExpr(table).visit(body)
            if len(table) == 1:  # the other branch knows that one condition is false
                (m, _), = table.items()
                slow_v = _other_side(m) if isinstance(m, BinOp) and m.op in (
                    BinKind.MIN, BinKind.MAX) else Const(False, "bool")
                body = _ReplaceExpr({m: slow_v}).visit(body)
            body = IfThenElse(cond, fast, body)
        return For(s.var, s.min, s.extent, s.kind, body, s.tag)


def _full_tiles(cond: Expr, var: Var) -> Expr:
    """A tail's test ``c <= a - k*var`` (k > 0, a and c constants: the tiles of a split) as
    ``var < (a - c) // k + 1``, the number of full tiles. The same iterations; gcc 12.2 -O3
    miscompiled the first form with the slow loop's bound ``a - k*var`` inside an OpenMP
    region (fuzz seed 417208546: a blur split by 3 over 37 columns, rows in parallel,
    segfaulted), and a comparison of the loop index is what its range analysis reads best."""
    if not (isinstance(cond, BinOp) and cond.op is BinKind.LE and isinstance(cond.a, Const)):
        return cond
    terms, a = linear_terms(cond.b)
    if set(terms) != {var} or terms[var] >= 0 or not isinstance(cond.a.value, int):
        return cond
    return BinOp(BinKind.LT, var, Const((a - cond.a.value) // -terms[var] + 1, var.dtype))


def _const_side(m: BinOp) -> Const:
    return m.a if isinstance(m.a, Const) else m.b


def _other_side(m: BinOp) -> Expr:
    return m.b if isinstance(m.a, Const) else m.a


class _Size(StmtVisitor):
    n = 0

    def visit(self, s):
        self.n += 1
        return super().visit(s)


def _size(s: Stmt) -> int:
    v = _Size()
    v.visit(s)
    return v.n


def partition_tails(s: Stmt, region_hook: RegionHook | None = None) -> Stmt:
    """``s`` with each loop whose body has tails (see the module docstring) split into full
    tiles and the rest; bodies that ``region_hook`` keeps whole are left as they are."""
    return _Partition(region_hook).visit(s)
