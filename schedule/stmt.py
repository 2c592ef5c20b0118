"""The loop-nest IR that lowering produces and code generators consume."""
from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass

from ..lang.expr import Expr, Var
from ..lang.printer import expr_str

_buf_ids = itertools.count(1)


class Buffer:
    """A region of memory: a function argument ("global"), or an intermediate ("local")."""

    __slots__ = ("name", "shape", "dtype", "scope", "uid")

    def __init__(self, name: str, shape: tuple, dtype: str, scope: str = "global"):
        self.name, self.shape, self.dtype, self.scope = name, tuple(shape), dtype, scope
        self.uid = next(_buf_ids)

    def __repr__(self):
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype}, {self.scope})"


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD = "thread"        # bound to a GPU index (the tag is on the For)
    STREAMED = "streamed"    # SIMD, its stores non-temporal (C: lt_stream_f32/f64 of a tile)


class Stmt:
    __slots__ = ()

    def __str__(self) -> str:
        return stmt_str(self)


@dataclass(frozen=True, slots=True, repr=False)
class For(Stmt):
    var: Var
    min: Expr
    extent: Expr
    kind: ForKind
    body: Stmt
    tag: str | None = None

    @property
    def is_thread_loop(self) -> bool:
        """Bound to ``threadIdx.x|y|z``: the work-items of a work-group (OpenCL)."""
        return self.kind is ForKind.THREAD and (self.tag or "").startswith("threadIdx")


@dataclass(frozen=True, slots=True, repr=False)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True, repr=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True, slots=True, repr=False)
class Store(Stmt):
    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, slots=True, repr=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True, repr=False)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, slots=True, repr=False)
class Barrier(Stmt):
    """A work-group barrier (OpenCL) separating cooperative loads from their use."""

    scope: str = "local"


@dataclass(frozen=True, slots=True, repr=False)
class Prefetch(Stmt):
    """A hint, never a read: fetch into the caches every line of ``buffer`` from element
    ``indices`` through ``count`` elements along the last dimension (``s[T].prefetch``).
    Results never depend on it; C emits ``__builtin_prefetch`` per cache line, OpenCL
    nothing. Lowering clamps ``indices`` and ``count`` into the buffer, except for a
    ``bound="nonfaulting"`` prefetch (schedule/prefetch.py)."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    count: Expr


EMPTY = Seq(())   # the statement that does nothing (passes compare with ``is``)


def seq(*stmts: Stmt | None) -> Stmt:
    """A Seq of the non-empty statements, flattening nested Seqs."""
    out: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        out.extend(s.stmts if isinstance(s, Seq) else (s,))
    return out[0] if len(out) == 1 else Seq(tuple(out))


class StmtVisitor:
    """Walks statements (and optionally expressions via ``visit_expr``)."""

    def visit(self, s: Stmt):
        method = getattr(self, "visit_" + type(s).__name__, None)
        if method is None:
            raise TypeError(f"{type(self).__name__} has no case for {type(s).__name__}")
        return method(s)

    def visit_expr(self, e: Expr):
        pass

    def visit_For(self, s):
        self.visit_expr(s.min)
        self.visit_expr(s.extent)
        self.visit(s.body)

    def visit_Seq(self, s):
        for x in s.stmts:
            self.visit(x)

    def visit_IfThenElse(self, s):
        self.visit_expr(s.cond)
        self.visit(s.then)
        if s.orelse is not None:
            self.visit(s.orelse)

    def visit_Store(self, s):
        for i in s.indices:
            self.visit_expr(i)
        self.visit_expr(s.value)

    def visit_Allocate(self, s):
        self.visit(s.body)

    def visit_LetStmt(self, s):
        self.visit_expr(s.value)
        self.visit(s.body)

    def visit_Barrier(self, s):
        pass

    def visit_Prefetch(self, s):
        for i in s.indices:
            self.visit_expr(i)
        self.visit_expr(s.count)


class StmtMutator:
    """Rebuilds statements; ``visit_expr`` maps every expression (identity by default)."""

    def visit(self, s: Stmt) -> Stmt:
        method = getattr(self, "visit_" + type(s).__name__, None)
        if method is None:
            raise TypeError(f"{type(self).__name__} has no case for {type(s).__name__}")
        return method(s)

    def visit_expr(self, e: Expr) -> Expr:
        return e

    def visit_For(self, s):
        mn, ext, body = self.visit_expr(s.min), self.visit_expr(s.extent), self.visit(s.body)
        if mn is s.min and ext is s.extent and body is s.body:
            return s
        return For(s.var, mn, ext, s.kind, body, s.tag)

    def visit_Seq(self, s):
        xs = tuple(self.visit(x) for x in s.stmts)
        return s if all(a is b for a, b in zip(xs, s.stmts)) else seq(*xs)

    def visit_IfThenElse(self, s):
        c, t = self.visit_expr(s.cond), self.visit(s.then)
        e = None if s.orelse is None else self.visit(s.orelse)
        return s if (c is s.cond and t is s.then and e is s.orelse) else IfThenElse(c, t, e)

    def visit_Store(self, s):
        idx = tuple(self.visit_expr(i) for i in s.indices)
        v = self.visit_expr(s.value)
        if v is s.value and all(a is b for a, b in zip(idx, s.indices)):
            return s
        return Store(s.buffer, idx, v)

    def visit_Allocate(self, s):
        b = self.visit(s.body)
        return s if b is s.body else Allocate(s.buffer, b)

    def visit_LetStmt(self, s):
        v, b = self.visit_expr(s.value), self.visit(s.body)
        return s if v is s.value and b is s.body else LetStmt(s.var, v, b)

    def visit_Barrier(self, s):
        return s

    def visit_Prefetch(self, s):
        idx = tuple(self.visit_expr(i) for i in s.indices)
        n = self.visit_expr(s.count)
        if n is s.count and all(a is b for a, b in zip(idx, s.indices)):
            return s
        return Prefetch(s.buffer, idx, n)


# ---- printing ------------------------------------------------------------------------------

class _Naming(StmtVisitor):
    """Display names that tell apart distinct variables visible at once: a loop or let whose
    name is taken, in scope, by another variable (another uid) is shown as ``name#2``
    (``#3``...). A let is in scope until the end of its block, as printed (lets do not
    indent); variables bound nowhere (sizes) are in scope everywhere."""

    def __init__(self, free: list[Var]):
        self.names: dict[Var, str] = {}
        self.shown: set[str] = set()
        self.scopes: list[dict[str, Var]] = [{}]
        for v in free:
            self.bind(v)

    def bind(self, v: Var) -> None:
        if v not in self.names:
            name = v.name
            if any(sc.get(name, v) != v for sc in self.scopes):
                n = 2
                while f"{name}#{n}" in self.shown:
                    n += 1
                name = f"{name}#{n}"
            self.names[v] = name
            self.shown.add(name)
        self.scopes[-1][v.name] = v
        self.scopes[-1][self.names[v]] = v

    def block(self, s: Stmt, v: Var | None = None) -> None:
        self.scopes.append({})
        if v is not None:
            self.bind(v)
        self.visit(s)
        self.scopes.pop()

    def visit_For(self, s):
        self.block(s.body, s.var)

    def visit_IfThenElse(self, s):
        self.block(s.then)
        if s.orelse is not None:
            self.block(s.orelse)

    def visit_LetStmt(self, s):
        self.bind(s.var)
        self.visit(s.body)


def display_names(s: Stmt, free: list[Var] = ()) -> dict[Var, str]:
    """The names to print the variables of ``s`` with (see _Naming); ``free`` are variables
    bound outside ``s``, such as the function's size parameters."""
    n = _Naming(list(free))
    n.visit(s)
    return {v: name for v, name in n.names.items() if name != v.name}


class _Printer(StmtVisitor):
    def __init__(self, names: dict[Var, str]):
        self.lines: list[str] = []
        self.depth = 0
        self.names = names

    def x(self, e) -> str:
        return expr_str(e, self.names) if isinstance(e, Expr) else str(e)

    def emit(self, text: str):
        self.lines.append("  " * self.depth + text)

    def nested(self, s: Stmt):
        self.depth += 1
        self.visit(s)
        self.depth -= 1

    def visit_For(self, s):
        kind = "" if s.kind is ForKind.SERIAL else f" {s.kind.value}"
        if s.tag:
            kind = f" bind({s.tag})"
        v, mn, ext = self.x(s.var), self.x(s.min), self.x(s.extent)
        self.emit(f"for {v} in [{mn}, {mn} + {ext}){kind}:"
                  if mn != "0" else f"for {v} in [0, {ext}){kind}:")
        self.nested(s.body)

    def visit_IfThenElse(self, s):
        self.emit(f"if {self.x(s.cond)}:")
        self.nested(s.then)
        if s.orelse is not None:
            self.emit("else:")
            self.nested(s.orelse)

    def visit_Store(self, s):
        idx = ", ".join(self.x(i) for i in s.indices)
        self.emit(f"{s.buffer.name}[{idx}] = {self.x(s.value)}")

    def visit_Allocate(self, s):
        shape = ", ".join(self.x(d) for d in s.buffer.shape)
        self.emit(f"allocate {s.buffer.name}[{s.buffer.dtype} * {shape}] in {s.buffer.scope}")
        self.visit(s.body)

    def visit_LetStmt(self, s):
        self.emit(f"let {self.x(s.var)} = {self.x(s.value)}")
        self.visit(s.body)

    def visit_Barrier(self, s):
        self.emit("barrier()")

    def visit_Prefetch(self, s):
        idx = ", ".join(self.x(i) for i in s.indices)
        self.emit(f"prefetch {s.buffer.name}[{idx}] x {self.x(s.count)}")


def stmt_str(s: Stmt, names: dict[Var, str] | None = None) -> str:
    """The loop nest as text. Distinct variables that share a display name (two loops called
    ``y.outer`` of different stages, the let variables of unrolled copies) are told apart by a
    suffix (``y.outer#2``); ``names`` gives the display names to use instead."""
    p = _Printer(names if names is not None else display_names(s))
    p.visit(s)
    return "\n".join(p.lines)
