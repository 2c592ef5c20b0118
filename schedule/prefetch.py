"""Lowering ``s[C].prefetch(T, loop, offset)``: the prefetch statements at the top of each
iteration of ``loop``.

The region is what one iteration of ``loop`` reads of ``T``: every load of ``T`` in the stage's
body (after inlining), its indices in leaf loops, with the loops inside ``loop`` relaxed over
their extents and ``loop`` itself moved ``offset`` iterations ahead (``min(loop + offset,
extent - 1)``: the last iterations fetch the last region again). Per dimension the union of
the loads' bounds, clamped into ``T``'s buffer (an attached stage's buffer holds only its
region at the attach point), so no address outside the buffer is ever formed. The rows of the
region (every dimension but the last) become loops around one ``Prefetch`` of the row's
elements; code generators fetch each cache line of it.

``bound="nonfaulting"`` (Halide's ``PrefetchBoundStrategy::NonFaulting``) leaves the region
as it is: ``loop + offset`` unclamped and no clamp into the buffer, so the last ``offset``
iterations ask for lines past the region (the next panel of a packed buffer, or past the
buffer's end). That is for targets whose prefetch instruction never faults (x86's
``prefetcht0``, ARM's ``PRFM``: C's ``__builtin_prefetch``; the C code generator forms the
address as an integer, so no pointer outside a buffer exists). Its worth is the address: the
clamp's ``min`` costs a micro-kernel five integer instructions per iteration, 10% of a 6 x 16
AVX2 sgemm tile's time on a Zen 3 (1024^3, one thread: 35.4 ms clamped, 31.9 unclamped,
31.5 without the prefetch).

With ``along`` (a loop of a stage ``C`` is computed at, enclosing the attach point) ``loop``
is not moved: the loop ``along`` is, ``offset`` iterations ahead (clamped to its last), in the
indices after the attach point's region variables are substituted. Each iteration of ``loop``
then fetches its own part of the next iteration of ``along``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ScheduleError
from ..lang.expr import Const, Expr, Var
from ..lang.printer import expr_str
from ..lang.simplify import simplify
from ..lang.visitor import collect_loads, substitute
from .attach import Attach, AttachAt, enclosing_hosts
from .bound import _max, _min, interval, relax_leaves
from .stmt import For, ForKind, Prefetch, Stmt

if TYPE_CHECKING:
    from .lower import _Lowering
    from .stage import Stage


def _c(v: int) -> Const:
    return Const(v, "int32")


def _with_lets(e: Expr, lets: dict) -> Expr:
    """``e`` with the region variables of attached stages replaced by their values (nested
    attach points: a few rounds), so that bounds see through them."""
    for _ in range(8):
        out = substitute(e, lets)
        if out is e or out == e:
            return out
        e = out
    return e


def prefetch_stmts(lw: _Lowering, st: Stage, lvl: int, extents: list[Expr]) -> list[Stmt]:
    """The prefetches ``st`` asked for at its loop ``st.leaf_iter_vars[lvl]``."""
    leaf = st.leaf_iter_vars[lvl]
    return [_prefetch(lw, st, lvl, extents, name, offset, along, bound == "nonfaulting")
            for name, loop, offset, along, bound in st.prefetches if loop is leaf]


def _along_shift(lw: _Lowering, st: Stage, along, offset: int, prim: str,
                 clamp: bool = True) -> tuple[Var, Expr]:
    """(the host loop's variable, its value ``offset`` iterations ahead, clamped to its last
    iteration unless not ``clamp``) for ``prefetch(..., along=)``; the host loop must still
    enclose ``st``."""
    host, loop = along
    for _, h, enclosing in enclosing_hosts(st):
        if h is host and enclosing is not None and loop in enclosing:
            ext = lw.nests[host].extents[loop]
            ahead = loop.var + _c(offset)
            return loop.var, _min(ahead, ext - _c(1)) if clamp else ahead
    raise ScheduleError(f"{prim}: along loop '{host.name}.{loop.name}' no longer encloses "
                        f"'{st.name}' (it was split or fused, or '{st.name}' was computed "
                        "elsewhere after the prefetch); prefetch along a loop that encloses "
                        "it now")


def _prefetch(lw: _Lowering, st: Stage, lvl: int, extents: list[Expr], name: str,
              offset: int, along=None, nonfaulting: bool = False) -> Stmt:
    leaf = st.leaf_iter_vars[lvl]
    prim = f"stage '{st.name}': prefetch({name}, {leaf.name})"
    t = lw.s.tensor(name)
    loads = [ld for ld in collect_loads(lw.body[st]) if ld.tensor is t]
    if not loads:
        why = ""
        if lw.s.has_stage(t) and lw.s[t].attach is Attach.INLINE:
            why = f" ('{name}' is inlined into it: prefetch the tensors '{name}' reads)"
        raise ScheduleError(f"{prim}: '{st.name}' reads no element of '{name}' after "
                            f"inlining{why}; prefetch a tensor its loops load")
    _check_scope(lw, st, lvl, t, prim)
    nest = lw.nests[st]
    if id(t) in lw.folds:
        raise ScheduleError(f"{prim}: '{name}' is stored at an outer loop (store_at) in a "
                            "buffer folded to its sliding window, whose rows wrap around; "
                            "prefetch the tensors it reads instead")
    lets = {v: val for group in (lw.lets, lw.store_lets) for pairs in group.values()
            for v, val in pairs}
    env: dict = {}
    relax_leaves(nest, st.leaf_iter_vars[lvl + 1:], env, lw.ranges)
    env = {v: (_with_lets(lo, lets), _with_lets(hi, lets)) for v, (lo, hi) in env.items()}
    if along is None:     # this loop, offset iterations ahead
        ahead = leaf.var + _c(offset)
        shift = {leaf.var: ahead if nonfaulting else _min(ahead, extents[lvl] - _c(1))}
        late: dict = {}
    else:                 # this iteration of the loop, in a later iteration of `along`
        var, ahead_along = _along_shift(lw, st, along, offset, prim, clamp=not nonfaulting)
        shift, late = {}, {var: ahead_along}
    buf = lw.buffers[id(t)]
    offs = lw.offsets.get(id(t)) or [_c(0)] * t.ndim
    region = []
    for d in range(t.ndim):
        lo = hi = None
        for ld in loads:
            idx = substitute(substitute(ld.indices[d], nest.values), shift)
            idx = _with_lets(idx, lets)
            r = interval(substitute(idx, late) if late else idx, env, lw.ranges)
            if r is None:
                raise ScheduleError(
                    f"{prim}: cannot bound the elements of '{name}' that one iteration reads "
                    f"(index {expr_str(ld.indices[d])} of dimension {d}); prefetch at a loop "
                    "where that index is affine in the loops")
            lo = r[0] if lo is None else simplify(_min(lo, r[0]), lw.ranges)
            hi = r[1] if hi is None else simplify(_max(hi, r[1]), lw.ranges)
        # into the buffer: its region starts at offs[d] and holds the buffer's extent there
        off = _with_lets(offs[d], lets)
        if nonfaulting:   # as it is: past the buffer's end only where the shift takes it
            lo_b, hi_b = simplify(lo - off, lw.ranges), simplify(hi - off, lw.ranges)
        else:
            size = _with_lets(_region_extent(lw, t, d), lets)
            lo_b = simplify(_max(lo - off, _c(0)), lw.ranges)
            hi_b = simplify(_min(hi - off, size - _c(1)), lw.ranges)
        region.append((lo_b, simplify(_max(hi_b - lo_b + _c(1), _c(0)), lw.ranges)))
    *rows, (last_lo, count) = region
    row_vars = [Var(f"{name}.prefetch{d}") for d in range(len(rows))]
    stmt: Stmt = Prefetch(buf, tuple(lo + v for (lo, _), v in zip(rows, row_vars)) +
                          (last_lo,), count)
    for v, (_, n) in reversed(list(zip(row_vars, rows))):
        stmt = For(v, _c(0), n, ForKind.SERIAL, stmt)
    return stmt


def _region_extent(lw: _Lowering, t, d: int) -> Expr:
    """How many elements dimension ``d`` of ``t``'s buffer holds where it is read: the
    region's extent variable of an attached stage, the tensor's size otherwise."""
    if lw.s.has_stage(t) and isinstance(lw.s[t].attach, AttachAt):
        st = lw.s[t]
        return lw.store_lets.get(st, lw.lets[st])[2 * d + 1][0]
    size = t.shape[d]
    return size if isinstance(size, Expr) else _c(size)


def _check_scope(lw: _Lowering, st: Stage, lvl: int, t, prim: str) -> None:
    """``t``'s buffer must exist around the loop: an argument, computed at root, or attached
    at a loop that encloses this one (of this stage: strictly outside it)."""
    if not lw.s.has_stage(t):
        return
    ts = lw.s[t]
    if not isinstance(ts.attach, AttachAt):
        return
    host, hloop = ts.attach.stage, ts.attach.loop
    if host is st and st.leaf_iter_vars.index(hloop) >= lvl:
        raise ScheduleError(f"{prim}: '{t.name}' is computed inside loop "
                            f"'{st.leaf_iter_vars[lvl].name}' (compute_at {host.name}, "
                            f"{hloop.name}): its buffer does not exist yet when the loop "
                            "starts an iteration, and holds only the current iteration's "
                            "values; prefetch at a loop inside the attach point, or what "
                            f"'{t.name}' reads")
