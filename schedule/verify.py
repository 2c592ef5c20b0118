"""Whole-tree checks of the loop-nest IR, run after every statement pass in tests.

``verify(stmt, params, buffers)`` raises IRVerifyError, naming the broken rule, the variable or
buffer, and the loops around the offence, when:

- a variable is used outside every ``for``/``let`` that binds it and is no parameter (a size
  variable of the function);
- a variable is bound again inside its own scope (a ``for`` or ``let`` on one path);
- a ``Store`` or a load names a buffer that is neither an argument nor allocated around it;
- an ``Allocate`` has a dimension that is negative;
- a ``Barrier`` sits inside a threadIdx loop or an ``if`` (not every work-item of the group
  would reach it), or in a statement that has no threadIdx loops (no work-group region);
- an unlowered tensor ``Load`` or ``Reduce`` is left in an expression.

Malformed IR is a compiler bug, not a user mistake: IRVerifyError is an AssertionError.
lowering runs ``verify`` after each pass when the environment sets ``LOOPTUNE_VERIFY_IR=1``
(tests/conftest.py does, for every test).
"""
from __future__ import annotations

import os
from collections.abc import Iterable

from ..lang.expr import Expr, Var
from ..lang.simplify import const_bound
from ..lang.visitor import ExprVisitor
from .stmt import Buffer, For, Stmt, StmtVisitor


class IRVerifyError(AssertionError):
    """The loop-nest IR breaks an invariant (a compiler bug); the message names the rule."""


def verify_enabled() -> bool:
    """Do passes verify their results (``LOOPTUNE_VERIFY_IR=1``)?"""
    return os.environ.get("LOOPTUNE_VERIFY_IR", "") not in ("", "0")


def verify(stmt: Stmt, params: Iterable[Var] = (), buffers: Iterable[Buffer] = (),
           where: str = "") -> None:
    """Check ``stmt`` (see the module docstring); ``params`` are the variables bound outside it
    (size variables), ``buffers`` the buffers it may use without allocating them (arguments).
    ``where`` (e.g. ``"after partition_tails"``) starts the error message."""
    v = _Verify(list(params), list(buffers), where)
    for b in v.buffers.values():
        v.check_shape(b, "argument")
    v.threads = _has_threads(stmt)
    v.visit(stmt)


def verify_pass(name: str, stmt: Stmt, params: Iterable[Var] = (),
                buffers: Iterable[Buffer] = ()) -> Stmt:
    """``stmt`` (a pass's result), verified first when ``LOOPTUNE_VERIFY_IR=1``."""
    if verify_enabled():
        verify(stmt, params, buffers, where=f"after {name}")
    return stmt


class _Uses(ExprVisitor):
    def __init__(self, owner: _Verify, what: str):
        self.owner, self.what = owner, what

    def visit_Var(self, e):
        self.owner.use(e, self.what)

    def visit_BufferLoad(self, e):
        self.owner.buffer_use(e.buffer, f"a load of '{e.buffer.name}'")
        super().visit_BufferLoad(e)

    def visit_Load(self, e):
        self.owner.fail(f"the unlowered load of tensor '{e.tensor.name}' in {self.what}; "
                        "lowering turns every tensor load into a BufferLoad")

    def visit_Reduce(self, e):
        self.owner.fail(f"an unlowered reduction in {self.what}; lowering turns it into an "
                        "init and an update store")


class _Verify(StmtVisitor):
    def __init__(self, params: list[Var], buffers: list[Buffer], where: str):
        self.where = where
        self.params = set(params)
        self.bound: dict[Var, str] = {}           # in scope: var -> its binder, as text
        self.buffers = {b.uid: b for b in buffers}
        self.loops: list[str] = []
        self.threads = False
        self.thread_depth = self.if_depth = 0

    def fail(self, msg: str) -> None:
        head = f"verify({self.where}): " if self.where else "verify: "
        at = f" (inside {' > '.join(self.loops)})" if self.loops else ""
        raise IRVerifyError(head + msg + at)

    def use(self, v: Var, what: str) -> None:
        if v not in self.bound and v not in self.params:
            self.fail(f"variable '{v.name}' is used in {what} but no enclosing for or let "
                      "binds it and it is no parameter of the function")

    def exprs(self, what: str, *es: Expr) -> None:
        u = _Uses(self, what)
        for e in es:
            u.visit(e)

    def buffer_use(self, b: Buffer, what: str) -> None:
        if b.uid not in self.buffers:
            self.fail(f"{what}: buffer '{b.name}' is neither an argument nor allocated around "
                      "it")

    def check_shape(self, b: Buffer, what: str) -> None:
        for d, x in enumerate(b.shape):
            if isinstance(x, Expr):
                self.exprs(f"the shape of {what} '{b.name}'", x)
                lo = const_bound(x)[0]
            else:
                lo = x
            if lo is not None and lo < 0:
                self.fail(f"{what} '{b.name}' has the negative extent {x} in dimension {d}")

    def bind(self, v: Var, binder: str, body: Stmt) -> None:
        if v in self.bound or v in self.params:
            old = self.bound.get(v, "a parameter")
            self.fail(f"variable '{v.name}' is bound by {binder} inside the scope of {old}; "
                      "a variable is bound once on each path (copies need fresh variables)")
        self.bound[v] = binder
        self.visit(body)
        del self.bound[v]

    def visit_For(self, s: For):
        self.exprs(f"the bounds of loop '{s.var.name}'", s.min, s.extent)
        thread = s.is_thread_loop
        self.loops.append(s.var.name)
        self.thread_depth += thread
        self.bind(s.var, f"loop '{s.var.name}'", s.body)
        self.thread_depth -= thread
        self.loops.pop()

    def visit_LetStmt(self, s):
        self.exprs(f"the value of let '{s.var.name}'", s.value)
        self.bind(s.var, f"let '{s.var.name}'", s.body)

    def visit_IfThenElse(self, s):
        self.exprs("an if condition", s.cond)
        self.if_depth += 1
        super().visit_IfThenElse(s)
        self.if_depth -= 1

    def visit_Store(self, s):
        self.buffer_use(s.buffer, f"a store to '{s.buffer.name}'")
        self.exprs(f"a store to '{s.buffer.name}'", *s.indices, s.value)

    def visit_Prefetch(self, s):
        self.buffer_use(s.buffer, f"a prefetch of '{s.buffer.name}'")
        self.exprs(f"a prefetch of '{s.buffer.name}'", *s.indices, s.count)

    def visit_Allocate(self, s):
        b = s.buffer
        if b.uid in self.buffers:
            self.fail(f"buffer '{b.name}' is allocated again inside its own scope")
        self.check_shape(b, "the allocation of")
        self.buffers[b.uid] = b
        self.visit(s.body)
        del self.buffers[b.uid]

    def visit_Barrier(self, s):
        if self.thread_depth:
            self.fail("a barrier inside a threadIdx loop: not every work-item of the group "
                      "would reach it")
        if self.if_depth:
            self.fail("a barrier inside an if: not every work-item of the group would reach it")
        if not self.threads:
            self.fail("a barrier outside any work-group region (the statement has no "
                      "threadIdx loops)")


class _Threads(StmtVisitor):
    found = False

    def visit_For(self, s):
        if s.is_thread_loop:
            self.found = True
        else:
            super().visit_For(s)


def _has_threads(s: Stmt) -> bool:
    t = _Threads()
    t.visit(s)
    return t.found
