"""Sliding windows for ``store_at`` (Halide's sliding-window optimization and storage folding).

``s[P].compute_at(s[C], c)`` computes, in each iteration of ``C``'s loop ``c``, the region of
``P`` that the iteration reads. With ``s[P].store_at(s[C], L)`` for a loop ``L`` at or outside
``c``, ``P``'s buffer lives in each iteration of ``L`` instead, so what an iteration of ``c``
computed is still there in the next one: where the region moves along one dimension ``d`` as
``c`` counts up, and its bounds there never decrease, an iteration computes only the part the
previous iteration did not (the first iteration, ``c == 0``, computes all of it):

    3x3 blur, blur_x stored per strip of rows, computed per output row y:
      y == 0: rows [y, y + 2] of blur_x;  y > 0: row y + 2 only (rows y, y + 1 are there)

so each row of blur_x is computed once per strip instead of three times. The buffer's
dimension ``d`` is then folded: it holds the smallest power of two of rows that covers one
iteration's window (4 for the blur), indexed modulo that, so the window stays in L1 however
long the strip. A region that does not depend on ``c`` at all is computed in the first
iteration only. A region that moves along several dimensions, or whose bounds can decrease
(``direction`` cannot tell), is computed whole in every iteration, as compute_at does,
into the buffer stored at ``L`` (Halide's behaviour too: storage hoisted, nothing slid).

The loops from ``L`` (exclusive) to ``c`` (inclusive) run in order, one thread: serial or
unrolled (checked by ``StoreAt`` and again at lowering).
"""
from __future__ import annotations

from ..lang.expr import BinKind, BinOp, Const, Expr, Select, Var
from ..lang.simplify import simplify, upper_bound
from ..lang.visitor import collect_vars, substitute


def _sign(e: Expr) -> int | None:
    """The sign of a constant, None when ``e`` is not one."""
    if isinstance(e, Const):
        return (e.value > 0) - (e.value < 0)
    return None


def direction(e: Expr, v: Var) -> int | None:
    """How integer ``e`` moves as ``v`` counts up, structurally: 0 (not at all), 1 (never
    down), -1 (never up), None (unknown)."""
    if v not in collect_vars(e):
        return 0
    if isinstance(e, Var):      # v itself (it occurs in e)
        return 1
    if not isinstance(e, BinOp):
        return None
    a, b = direction(e.a, v), direction(e.b, v)
    if a is None or b is None:
        return None
    op = e.op
    if op is BinKind.ADD:
        return _join(a, b)
    if op is BinKind.SUB:
        return _join(a, -b)
    if op is BinKind.MUL:
        for x, k in ((a, e.b), (b, e.a)):
            s = _sign(k)
            if s is not None:
                return x * s
        return None
    if op is BinKind.FLOORDIV:
        s = _sign(e.b)
        return a * s if s is not None and b == 0 else None
    if op in (BinKind.MIN, BinKind.MAX):
        return _join(a, b)
    return None


def _join(a: int, b: int) -> int | None:
    """Direction of a sum (or min/max) of parts moving ``a`` and ``b``."""
    if a == 0:
        return b
    if b == 0 or a == b:
        return a
    return None


def slide(bounds: list[tuple[Expr, Expr]], full: list[tuple[Expr, Expr]], c: Var,
          ranges: dict):
    """The part of a region (inclusive ``(lo, hi)`` per dimension, in the loop variables;
    ``full``: the same as (min, extent), ``bound.bounds_region``) that iteration ``c``
    computes when the iterations before it (from ``c == 0``) computed theirs: ``(dim,
    [(min, extent), ...])`` with ``dim`` the dimension slid along (None where the region is
    computed whole: it moves along several dimensions, or might move back), or ``(-1, ...)``
    when it does not depend on ``c`` (computed at ``c == 0`` only)."""
    moving = [d for d, (lo, hi) in enumerate(bounds)
              if c in collect_vars(lo) or c in collect_vars(hi)]
    first = BinOp(BinKind.EQ, c, Const(0, c.dtype))
    if not moving:
        lo, ext = full[0]
        return -1, [(lo, Select(first, ext, Const(0, "int32")))] + full[1:]
    if len(moving) > 1:
        return None, full
    d = moving[0]
    lo, hi = bounds[d]
    if direction(lo, c) not in (0, 1) or direction(hi, c) not in (0, 1):
        return None, full
    prev_end = substitute(hi, {c: c - Const(1, c.dtype)}) + Const(1, "int32")
    new_lo = simplify(Select(first, lo, BinOp(BinKind.MAX, lo, prev_end)), ranges)
    out = list(full)
    out[d] = (new_lo, simplify(hi - new_lo + Const(1, "int32"), ranges))
    return d, out


def fold_size(window_extent: Expr, store_extent: int | None, ranges: dict) -> int | None:
    """Rows of a folded dimension: the smallest power of two at least the window's largest
    extent, or None (no fold) when that is unknown or no smaller than the stored extent."""
    ub = upper_bound(window_extent, ranges)
    if ub is None or ub <= 0:
        return None
    f = 1 << (ub - 1).bit_length()
    return f if store_extent is None or f < store_extent else None
