"""Statement-level passes: simplification with loop ranges, unrolling, nesting checks."""
from __future__ import annotations

from ..errors import ScheduleError
from ..lang.expr import BinKind, BinOp, Const, Expr, Var
from ..lang.simplify import const_bound, simplify, upper_bound
from ..lang.visitor import ExprMutator, ExprVisitor, collect_vars, substitute
from .stmt import For, ForKind, IfThenElse, LetStmt, Seq, Stmt, StmtMutator, StmtVisitor, seq

MAX_UNROLL = 64   # constant extents up to this are unrolled in the IR; longer get a pragma

_EMPTY = Seq(())


class _Simplify(StmtMutator):
    """Simplify every expression knowing each loop variable's range; drop dead code."""

    def __init__(self):
        self.ranges: dict[Var, tuple[int, int]] = {}

    def visit_expr(self, e: Expr) -> Expr:
        return simplify(e, self.ranges)

    def visit_For(self, s):
        mn, ext = self.visit_expr(s.min), self.visit_expr(s.extent)
        if isinstance(ext, Const) and ext.value <= 0:
            return _EMPTY
        if isinstance(ext, Const) and ext.value == 1 and s.kind is not ForKind.THREAD:
            return self.visit(substitute_stmt(s.body, {s.var: mn}))
        ub = upper_bound(ext, self.ranges)
        lo = const_bound(mn, self.ranges)
        if ub is not None and lo[0] is not None and lo[1] is not None:
            self.ranges[s.var] = (lo[0], lo[1] + max(ub, 1) - 1)
        body = self.visit(s.body)
        self.ranges.pop(s.var, None)
        if body is _EMPTY:
            return _EMPTY
        if mn is s.min and ext is s.extent and body is s.body:
            return s
        return For(s.var, mn, ext, s.kind, body, s.tag)

    def visit_IfThenElse(self, s):
        c = self.visit_expr(s.cond)
        if isinstance(c, Const):
            if c.value:
                return self.visit(s.then)
            return self.visit(s.orelse) if s.orelse is not None else _EMPTY
        t = self.visit(s.then)
        e = None if s.orelse is None else self.visit(s.orelse)
        if t == e:
            return t  # if c: x else: x -> x
        if t is _EMPTY and e is None:
            return _EMPTY
        return IfThenElse(c, t, e)

    def visit_LetStmt(self, s):
        v = self.visit_expr(s.value)
        lo, hi = const_bound(v, self.ranges)
        if lo is not None and hi is not None:
            self.ranges[s.var] = (lo, hi)
        if _is_affine(v):  # inline it, so that index arithmetic can cancel against it
            return self.visit(substitute_stmt(s.body, {s.var: v}))
        b = self.visit(s.body)
        return LetStmt(s.var, v, b)

    def visit_Seq(self, s):
        xs = [self.visit(x) for x in s.stmts]
        return seq(*(x for x in xs if x is not _EMPTY)) if any(
            x is not _EMPTY for x in xs) else _EMPTY


def _is_affine(e: Expr) -> bool:
    if isinstance(e, (Const, Var)):
        return True
    if isinstance(e, BinOp) and e.op in (BinKind.ADD, BinKind.SUB, BinKind.MUL):
        return _is_affine(e.a) and _is_affine(e.b)
    return False


class _Substitute(StmtMutator):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit_expr(self, e):
        return substitute(e, self.mapping)


def substitute_stmt(s: Stmt, mapping: dict[Var, Expr]) -> Stmt:
    return _Substitute(mapping).visit(s)


def simplify_stmt(s: Stmt) -> Stmt:
    return _Simplify().visit(s)


class _Unroll(StmtMutator):
    def visit_For(self, s):
        body = self.visit(s.body)
        if s.kind is ForKind.UNROLLED and isinstance(s.extent, Const) and \
                isinstance(s.min, Const) and s.extent.value <= MAX_UNROLL:
            # the copies share one scope (a Seq): each gets its own let variables, so that
            # no code generator declares one name twice (C: "redefinition of 'T_min0'")
            return seq(*(fresh_lets(substitute_stmt(body, {s.var: Const(s.min.value + k,
                                                                        "int32")}))
                         for k in range(s.extent.value)))
        return s if body is s.body else For(s.var, s.min, s.extent, s.kind, body, s.tag)


def unroll_loops(s: Stmt) -> Stmt:
    """Replace unrolled loops of constant extent (<= MAX_UNROLL) by copies of their body."""
    return _Unroll().visit(s)


class _FreshLets(StmtMutator):
    """Every LetStmt binds a new Var (same display name), substituted in its body."""

    def visit_LetStmt(self, s):
        v = Var(s.var.name, s.var.dtype)
        body = self.visit(substitute_stmt(s.body, {s.var: v}))
        return LetStmt(v, s.value, body)


def fresh_lets(s: Stmt) -> Stmt:
    """``s`` with a fresh variable for each of its let statements: a copy of a statement
    that can sit beside the original in one scope."""
    return _FreshLets().visit(s)


class _Nesting(StmtVisitor):
    def __init__(self):
        self.vector: For | None = None

    def visit_For(self, s):
        if self.vector is not None:
            if s.kind is ForKind.PARALLEL:
                raise ScheduleError(
                    f"parallel loop '{s.var.name}' is nested inside vectorized loop "
                    f"'{self.vector.var.name}'; vectorize an inner loop or parallelize an "
                    "outer one")
            if s.kind is ForKind.VECTORIZED:
                raise ScheduleError(
                    f"vectorized loop '{s.var.name}' is nested inside vectorized loop "
                    f"'{self.vector.var.name}'; vectorize only one of them (the innermost)")
        outer = self.vector
        if s.kind is ForKind.VECTORIZED:
            self.vector = s
        super().visit_For(s)
        self.vector = outer


def check_nesting(s: Stmt) -> None:
    """Refuse loop kinds that cannot nest (parallel or vector inside a vectorized loop)."""
    _Nesting().visit(s)


# ---- tail partitioning ---------------------------------------------------------------------

MAX_TAIL_CONDS = 3


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


class _ReplaceExpr(StmtMutator):
    def __init__(self, table: dict[Expr, Expr]):
        self.table = table

    def visit_expr(self, e):
        return _Replace(self.table).visit(e)

    def visit_IfThenElse(self, s):
        if s.cond in self.table:
            return self.visit(s.then) if self.table[s.cond].value else (
                self.visit(s.orelse) if s.orelse is not None else _EMPTY)
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

    def __init__(self):
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
            _size(s.body) <= MAX_PARTITION_SIZE and not _work_group_region(s.body)
        self.depth += split
        body = self.visit(s.body)
        self.depth -= split
        self.bound.discard(s.var)
        if split:
            table = {m: _const_side(m) for m, _ in tails}
            table.update({c: Const(True, "bool") for c in conds})
            cond = None
            for c in [c for _, c in tails] + conds:
                cond = c if cond is None else BinOp(BinKind.AND, cond, c)
            fast = _ReplaceExpr(table).visit(body)
            if len(table) == 1:  # the other branch knows that one condition is false
                (m, v), = table.items()
                slow_v = _other_side(m) if isinstance(m, BinOp) and m.op in (
                    BinKind.MIN, BinKind.MAX) else Const(False, "bool")
                body = _ReplaceExpr({m: slow_v}).visit(body)
            body = IfThenElse(cond, fast, body)
        return For(s.var, s.min, s.extent, s.kind, body, s.tag)


class _WorkGroupAlloc(StmtVisitor):
    def __init__(self):
        self.threads = self.allocs = False

    def visit_For(self, s):
        if s.kind is ForKind.THREAD and s.tag.startswith("threadIdx"):
            self.threads = True
        else:
            super().visit_For(s)

    def visit_Allocate(self, s):
        self.allocs = True
        super().visit_Allocate(s)


def _work_group_region(s: Stmt) -> bool:
    """Does ``s`` hold threadIdx loops and a buffer allocated outside them? The opencl backend
    shares such a buffer in the work-group, behind barriers that every work-item must reach:
    a partition there would duplicate each barrier region (and gains nothing on a GPU)."""
    v = _WorkGroupAlloc()
    v.visit(s)
    return v.threads and v.allocs


def _const_side(m: BinOp) -> Const:
    return m.a if isinstance(m.a, Const) else m.b


def _other_side(m: BinOp) -> Expr:
    return m.b if isinstance(m.a, Const) else m.a


MAX_PARTITION_DEPTH = 3      # at most 2**3 versions of a loop body
MAX_PARTITION_SIZE = 400     # statements; larger bodies keep their guards


class _Size(StmtVisitor):
    n = 0

    def visit(self, s):
        self.n += 1
        return super().visit(s)


def _size(s: Stmt) -> int:
    v = _Size()
    v.visit(s)
    return v.n


def partition_tails(s: Stmt) -> Stmt:
    return _Partition().visit(s)
