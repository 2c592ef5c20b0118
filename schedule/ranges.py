"""Scoped constant ranges of loop and let variables, for passes and code generators.

A walk over a loop nest learns facts as it enters binders: ``for v in [mn, mn + ext)`` gives
``v`` the range ``[lo(mn), hi(mn) + ub(ext) - 1]``; ``let v = e`` gives ``v`` the constant
bounds of ``e``. A fact holds only inside the binder's body, so each ``push`` is undone by a
``pop`` (or a ``with ctx.scope(...)`` block) when the walk leaves it, and a binder whose
bounds are unknown *hides* any fact an outer or earlier binder of the same variable left:

    if c:
      let x = 3          # x in [3, 3] here only
      ...
    else:
      let x = n // 2     # x unknown here: not [3, 3] (partitioning copies lets like this)
      if x < 4: ...      # so this guard stays

The simplifying pass and the C and OpenCL code generators read ``ctx.facts`` (a plain dict,
what ``lang.simplify`` takes as ``ranges``) and never write it themselves.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..lang.expr import Expr, Var
from ..lang.simplify import const_bound, upper_bound

_ABSENT = object()


class RangeContext:
    """Inclusive constant ranges ``(lo, hi)`` of the variables bound around the current
    statement; ``facts`` is the table to give ``simplify``/``const_bound``/``upper_bound``."""

    __slots__ = ("_saved", "facts")

    def __init__(self, facts: dict[Var, tuple[int, int]] | None = None):
        self.facts: dict[Var, tuple[int, int]] = dict(facts or {})
        self._saved: list[tuple[Var, object]] = []

    def push(self, var: Var, lo: int | None, hi: int | None) -> None:
        """Enter ``var``'s scope: it ranges over ``[lo, hi]``, or is unknown where either is
        None (an earlier fact about ``var`` is hidden until the matching ``pop``)."""
        self._saved.append((var, self.facts.get(var, _ABSENT)))
        if lo is None or hi is None:
            self.facts.pop(var, None)
        else:
            self.facts[var] = (lo, hi)

    def pop(self) -> None:
        """Leave the scope the last ``push`` entered: what was known before it holds again."""
        var, old = self._saved.pop()
        if old is _ABSENT:
            self.facts.pop(var, None)
        else:
            self.facts[var] = old

    @property
    def depth(self) -> int:
        """Scopes entered and not left (0 after a balanced walk)."""
        return len(self._saved)

    def loop_range(self, mn: Expr, extent: Expr) -> tuple[int | None, int | None]:
        """The range of a loop variable over ``[mn, mn + extent)`` given the current facts
        (an empty loop counts as one iteration: the body never runs, any range is sound)."""
        ub = upper_bound(extent, self.facts)
        lo, hi = const_bound(mn, self.facts)
        if ub is None or lo is None or hi is None:
            return None, None
        return lo, hi + max(ub, 1) - 1

    def push_loop(self, var: Var, mn: Expr, extent: Expr) -> None:
        """``push`` for ``for var in [mn, mn + extent)``."""
        self.push(var, *self.loop_range(mn, extent))

    @contextmanager
    def scope(self, var: Var, lo: int | None, hi: int | None) -> Iterator[None]:
        """``with ctx.scope(v, lo, hi):`` -- ``push`` on entry, ``pop`` on exit."""
        self.push(var, lo, hi)
        try:
            yield
        finally:
            self.pop()

    @contextmanager
    def loop(self, var: Var, mn: Expr, extent: Expr) -> Iterator[None]:
        """``scope`` for ``for var in [mn, mn + extent)``."""
        with self.scope(var, *self.loop_range(mn, extent)):
            yield

    @contextmanager
    def let(self, var: Var, value: Expr) -> Iterator[None]:
        """``scope`` for ``let var = value``."""
        with self.scope(var, *const_bound(value, self.facts)):
            yield
