"""Memory-hierarchy primitives: cache_read, cache_write, rfactor.

Each rewrites the schedule's own copy of the dataflow (stage ops), never the user's tensors:
the tensor ``T`` keeps its identity, and ``s[T]`` keeps naming the stage that writes it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ScheduleError
from ..lang.expr import BinKind, BinOp, Const, Expr, IterKind, IterVar, Load, Reduce, Var
from ..lang.simplify import simplify
from ..lang.tensor import Tensor, compute_op, make_compute
from ..lang.visitor import ExprMutator, substitute
from .attach import Attach
from .bound import loop_nest
from .stage import Split, Stage
from .steps import Step

if TYPE_CHECKING:
    from .schedule import Schedule

SCOPES = ("local", "shared", "global")
SCHEDULE_PRIMITIVES = frozenset({"cache_read", "cache_write", "rfactor"})


def _fresh_axes(axes) -> tuple[IterVar, ...]:
    return tuple(IterVar(Var(a.name), Const(0, "int32"), a.extent, IterKind.SPATIAL)
                 for a in axes)


def _check_scope(prim: str, scope: str) -> None:
    if scope not in SCOPES:
        raise ScheduleError(f"{prim}: unknown scope {scope!r}; use one of {', '.join(SCOPES)}")


class _Retarget(ExprMutator):
    """Loads of ``old`` become loads of ``new``."""

    def __init__(self, old: Tensor, new: Tensor):
        self.old, self.new = old, new

    def visit_Load(self, e):
        e = super().visit_Load(e)
        return Load(self.new, e.indices) if e.tensor is self.old else e


def cache_write(s: Schedule, t: Tensor, scope: str) -> Tensor:
    """A new stage ``TC`` computes what ``t`` computed (reduction included); ``t`` becomes
    ``t[i] = TC[i]``. Attach ``s[TC]`` with compute_at to accumulate in a small buffer:

    ``for i, j: C[i, j] = sum_k ...`` -> ``for i.o, j.o: (CC[ii, ji] = sum_k ... ;
    C[...] = CC[ii, ji])``
    """
    prim = f"cache_write({getattr(t, 'name', t)}, {scope!r})"
    _check_scope(prim, scope)
    st = _compute_stage(s, t, prim)
    if st.is_scheduled or st.attach is not Attach.ROOT:
        raise ScheduleError(f"stage '{st.name}': {prim}: apply cache_write before any other "
                            f"primitive on '{st.name}' (its loops are about to be replaced)")
    op = st.op
    axes = _fresh_axes(op.axis)
    body = substitute(op.body, {a.var: b.var for a, b in zip(op.axis, axes)})
    tc = make_compute(s.unique_name(f"{st.name}.{scope}"), axes, body)
    copy_axes = _fresh_axes(op.axis)
    new_op = compute_op(op.name, copy_axes, Load(tc, tuple(a.var for a in copy_axes)),
                        op.tag, output=t)
    st.reset(new_op)
    cst = s._add_stage(tc.op, index=s.stages.index(st))
    cst.scope = scope
    s.steps.append(Step("cache_write", st.name, (scope,)))
    return tc


def cache_read(s: Schedule, t: Tensor, scope: str, readers) -> Tensor:
    """A new stage ``TR`` copies ``t``; the listed readers load ``TR`` instead. Attach it with
    compute_at to stage just the region a loop reads (e.g. a packed block of B)."""
    prim = f"cache_read({getattr(t, 'name', t)}, {scope!r})"
    _check_scope(prim, scope)
    if not isinstance(t, Tensor):
        raise ScheduleError(f"{prim}: expected a tensor; got {t!r}")
    rlist = [readers] if isinstance(readers, Tensor) else list(readers or [])
    if not rlist:
        raise ScheduleError(f"{prim}: give the reader tensors that should read the cache")
    rstages = [_compute_stage(s, r, prim) for r in rlist]
    for r in rstages:
        if not any(x is t for x in r.op.inputs):
            raise ScheduleError(f"{prim}: stage '{r.name}' does not read '{t.name}'; readers "
                                f"of it are {[x.name for x in _readers_of(s, t)]}")
    axes = _fresh_axes(_axes_of(t))
    tr = make_compute(s.unique_name(f"{t.name}.{scope}"), axes,
                      Load(t, tuple(a.var for a in axes)))
    for r in rstages:
        op = r.op
        body = _Retarget(t, tr).visit(op.body)
        r.op = compute_op(op.name, op.axis, body, op.tag, output=r.tensor)
    first = min(s.stages.index(r) for r in rstages)
    cst = s._add_stage(tr.op, index=first)
    cst.scope = scope
    s.steps.append(Step("cache_read", t.name, (scope, tuple(r.name for r in rstages))))
    return tr


def rfactor(s: Schedule, t: Tensor, loop: IterVar) -> Tensor:
    """Factor ``t``'s reduction over the reduce loop ``loop``: a new stage ``TF[loop, i...]``
    reduces over the other reduce loops, and ``t`` reduces ``TF`` over its first axis. The
    factored axis is spatial in ``TF``, so it can be vectorized or parallelized.

    ``C[i] = sum_{ko, ki} A[i, ko*4 + ki]`` with ``rfactor(C, ki)`` ->
    ``CF[ki, i] = sum_ko A[i, ko*4 + ki]``; ``C[i] = sum_ki CF[ki, i]``
    """
    prim = f"rfactor({getattr(t, 'name', t)}, {getattr(loop, 'name', loop)})"
    st = _compute_stage(s, t, prim)
    op = st.op
    if not op.is_reduction:
        raise ScheduleError(f"stage '{st.name}': {prim}: '{st.name}' is not a reduction")
    lp = st._leaf(prim, loop)
    if lp.kind is not IterKind.REDUCE:
        raise ScheduleError(f"stage '{st.name}': {prim}: loop '{lp.name}' is spatial; rfactor "
                            "takes one of the reduction's loops")
    if st.annotations or st.attach is not Attach.ROOT or any(
            r.parent.kind is IterKind.SPATIAL for r in st.relations if isinstance(r, Split)) \
            or any(getattr(r, "fused", None) is not None for r in st.relations):
        raise ScheduleError(f"stage '{st.name}': {prim}: apply rfactor right after splitting "
                            "the reduction, before fusing, annotating or scheduling spatial loops")
    values, guards = _reduce_values(st)
    fa = IterVar(Var(lp.name), Const(0, "int32"), lp.extent, IterKind.SPATIAL)
    axes = _fresh_axes(op.axis)
    red_leaves = [v for v in st.leaf_iter_vars if v.kind is IterKind.REDUCE and v is not lp]
    if not red_leaves:
        raise ScheduleError(f"stage '{st.name}': {prim}: '{lp.name}' is the only reduction "
                            "loop; split the reduction first (e.g. split(k, factor=8)) and "
                            "rfactor one of the parts")
    raxes = tuple(IterVar(Var(v.name), Const(0, "int32"), v.extent, IterKind.REDUCE)
                  for v in red_leaves)
    leaf_map: dict[Var, Expr] = {lp.var: fa.var}
    leaf_map.update({v.var: r.var for v, r in zip(red_leaves, raxes)})
    mapping = {a.var: b.var for a, b in zip(op.axis, axes)}
    mapping.update({r.var: simplify(substitute(values[r.var], leaf_map)) for r in op.reduce_axis})
    body: Reduce = op.body
    where = [substitute(g, leaf_map) for g in guards]
    if body.where is not None:
        where.append(substitute(body.where, mapping))
    cond = None
    for w in where:
        cond = w if cond is None else BinOp(BinKind.AND, cond, w)
    src = substitute(body.source, mapping)
    tf = make_compute(s.unique_name(f"{st.name}.rf"), (fa,) + axes,
                      Reduce(body.combiner, src, raxes, cond))
    k = IterVar(Var(lp.name), Const(0, "int32"), lp.extent, IterKind.REDUCE)
    out_axes = _fresh_axes(op.axis)
    final = Reduce(body.combiner, Load(tf, (k.var,) + tuple(a.var for a in out_axes)), (k,), None)
    st.reset(compute_op(op.name, out_axes, final, op.tag, output=t))
    s._add_stage(tf.op, index=s.stages.index(st))
    s.steps.append(Step("rfactor", st.name, (lp.name,)))
    return tf


def _reduce_values(st: Stage) -> tuple[dict[Var, Expr], list[Expr]]:
    """Original reduce variables (their domain minimum included) in terms of the reduce
    leaves, and the tail guards: the loop nest of the stage over its whole domain."""
    region = [(Const(0, "int32"), a.extent) for a in st.op.axis] + \
        [(r.min, r.extent) for r in st.op.reduce_axis]
    nest = loop_nest(st, region, {})
    return {r.var: nest.values[r.var] for r in st.op.reduce_axis}, nest.guards


def _axes_of(t: Tensor) -> tuple[IterVar, ...]:
    return tuple(IterVar(Var(f"ax{d}"), Const(0, "int32"),
                         s if isinstance(s, Expr) else Const(s, "int32"), IterKind.SPATIAL)
                 for d, s in enumerate(t.shape))


def _readers_of(s: Schedule, t: Tensor) -> list[Stage]:
    return [st for st in s.stages if any(x is t for x in st.op.inputs)]


def _compute_stage(s: Schedule, t, prim: str) -> Stage:
    if not isinstance(t, Tensor):
        raise ScheduleError(f"{prim}: expected a tensor; got {t!r}")
    if not s.has_stage(t):
        raise ScheduleError(f"{prim}: '{t.name}' is not a compute of this schedule")
    return s[t]


def replay_step(s: Schedule, step: Step) -> None:
    """Re-apply a recorded cache_read / cache_write / rfactor step."""
    t = s.stage(step.stage).tensor if step.primitive != "cache_read" else _tensor_named(
        s, step.stage)
    if step.primitive == "cache_write":
        cache_write(s, t, step.args[0])
    elif step.primitive == "cache_read":
        cache_read(s, t, step.args[0], [s.stage(n).tensor for n in step.args[1]])
    else:
        rfactor(s, t, s.stage(step.stage).loop(step.args[0]))


def _tensor_named(s: Schedule, name: str) -> Tensor:
    for st in s.stages:
        if st.name == name:
            return st.tensor
        for x in st.op.inputs:
            if x.name == name:
                return x
    raise ScheduleError(f"replay: no tensor named '{name}' in the schedule")
