"""Memory-hierarchy primitives: cache_read, cache_write, rfactor.

Each rewrites the schedule's own copy of the dataflow (stage ops), never the user's tensors:
the tensor ``T`` keeps its identity, and ``s[T]`` keeps naming the stage that writes it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ScheduleError
from ..lang.expr import BinKind, BinOp, Const, Expr, IterKind, IterVar, Load, Reduce, Var
from ..lang.simplify import simplify
from ..lang.tensor import Tensor, compute_op, make_compute
from ..lang.visitor import ExprMutator, substitute
from .attach import Attach
from .bound import loop_nest
from .relations import Fuse, Split
from .steps import Step, loop_ref, tensor_ref, unpack

if TYPE_CHECKING:
    from .schedule import Schedule
    from .stage import Stage

SCOPES = ("local", "shared", "global")


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


def _compute_stage(s: Schedule, t, prim: str) -> Stage:
    if not isinstance(t, Tensor):
        raise ScheduleError(f"{prim}: expected a tensor; got {t!r}")
    if not s.has_stage(t):
        raise ScheduleError(f"{prim}: '{t.name}' is not a compute of this schedule")
    return s[t]


# ---- cache_write ----------------------------------------------------------------------------

def cache_write(s: Schedule, t: Tensor, scope: str) -> Tensor:
    """A new stage ``TC`` computes what ``t`` computed (reduction included); ``t`` becomes
    ``t[i] = TC[i]``. Attach ``s[TC]`` with compute_at to accumulate in a small buffer:

    ``for i, j: C[i, j] = sum_k ...`` -> ``for i.o, j.o: (CC[ii, ji] = sum_k ... ;
    C[...] = CC[ii, ji])``
    """
    prim = f"cache_write({getattr(t, 'name', t)}, {scope!r})"
    _check_scope(prim, scope)
    st = _compute_stage(s, t, prim)
    return s.apply_step(CacheWrite(st.name, scope))


@dataclass(frozen=True, slots=True)
class CacheWrite(Step):
    """``s.cache_write(C, scope)``; ``stage`` names C's stage."""

    scope: str

    PRIMITIVES = ("cache_write",)

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        prim = f"cache_write({st.tensor.name}, {self.scope!r})"
        _check_scope(prim, self.scope)
        if st.is_scheduled or st.attach is not Attach.ROOT:
            raise ScheduleError(f"stage '{st.name}': {prim}: apply cache_write before any "
                                f"other primitive on '{st.name}' (its loops are about to be "
                                "replaced)")

    def apply(self, s: Schedule) -> Tensor:
        st = s.stage(self.stage)
        op = st.op
        axes = _fresh_axes(op.axis)
        body = substitute(op.body, {a.var: b.var for a, b in zip(op.axis, axes)})
        tc = make_compute(s.unique_name(f"{st.name}.{self.scope}"), axes, body)
        copy_axes = _fresh_axes(op.axis)
        new_op = compute_op(op.name, copy_axes, Load(tc, tuple(a.var for a in copy_axes)),
                            op.tag, output=st.tensor)
        st.reset(new_op)
        cst = s._add_stage(tc.op, index=s.stages.index(st))
        cst.scope = self.scope
        return tc

    def __str__(self) -> str:
        return f"s.cache_write({tensor_ref(self.stage)}, {self.scope!r})"


# ---- cache_read -----------------------------------------------------------------------------

def cache_read(s: Schedule, t: Tensor, scope: str, readers) -> Tensor:
    """A new stage ``TR`` copies ``t``; the listed readers load ``TR`` instead. Attach it with
    compute_at to stage just the region a loop reads (e.g. a packed block of B).

    ``for i, j: C[i, j] = A[i, j] * 2`` with ``cache_read(A, "local", [C])`` ->
    ``for i, j: AL[i, j] = A[i, j]``; ``for i, j: C[i, j] = AL[i, j] * 2``
    """
    prim = f"cache_read({getattr(t, 'name', t)}, {scope!r})"
    _check_scope(prim, scope)
    if not isinstance(t, Tensor):
        raise ScheduleError(f"{prim}: expected a tensor; got {t!r}")
    rlist = [readers] if isinstance(readers, Tensor) else list(readers or [])
    if not rlist:
        raise ScheduleError(f"{prim}: give the reader tensors that should read the cache")
    rstages = [_compute_stage(s, r, prim) for r in rlist]
    name = s[t].name if s.has_stage(t) else t.name
    found = _tensor_named(s, name)
    if found is not None and found is not t:
        raise ScheduleError(f"{prim}: another tensor of this schedule is called '{name}' too; "
                            "steps name tensors, so give the two distinct names")
    return s.apply_step(CacheRead(name, scope, tuple(r.name for r in rstages)))


@dataclass(frozen=True, slots=True)
class CacheRead(Step):
    """``s.cache_read(T, scope, readers)``; ``stage`` names T (a stage, or an input)."""

    scope: str
    readers: tuple[str, ...]

    PRIMITIVES = ("cache_read",)

    @property
    def args(self) -> tuple:
        return (self.scope, self.readers)

    @classmethod
    def from_args(cls, primitive, stage, args):
        scope, readers = unpack(primitive, stage, args, 2)
        return cls(stage, scope, tuple(readers) if isinstance(readers, tuple) else readers)

    def validate(self, s: Schedule) -> None:
        prim = f"cache_read({self.stage}, {self.scope!r})"
        _check_scope(prim, self.scope)
        if not isinstance(self.readers, tuple) or not self.readers:
            raise ScheduleError(f"{prim}: give the reader tensors that should read the cache")
        t = _tensor_named(s, self.stage)
        for r in (s.stage(n) for n in self.readers):
            if t is None or not any(x is t for x in r.op.inputs):
                raise ScheduleError(f"{prim}: stage '{r.name}' does not read '{self.stage}'; "
                                    f"readers of it are {[x.name for x in _readers_of(s, t)]}")

    def apply(self, s: Schedule) -> Tensor:
        t = _tensor_named(s, self.stage)
        rstages = [s.stage(n) for n in self.readers]
        axes = _fresh_axes(_axes_of(t))
        tr = make_compute(s.unique_name(f"{t.name}.{self.scope}"), axes,
                          Load(t, tuple(a.var for a in axes)))
        for r in rstages:
            op = r.op
            body = _Retarget(t, tr).visit(op.body)
            r.op = compute_op(op.name, op.axis, body, op.tag, output=r.tensor)
        first = min(s.stages.index(r) for r in rstages)
        cst = s._add_stage(tr.op, index=first)
        cst.scope = self.scope
        return tr

    def __str__(self) -> str:
        readers = ", ".join(tensor_ref(n) for n in self.readers)
        return f"s.cache_read({tensor_ref(self.stage)}, {self.scope!r}, [{readers}])"


# ---- rfactor --------------------------------------------------------------------------------

def rfactor(s: Schedule, t: Tensor, loop: IterVar) -> Tensor:
    """Factor ``t``'s reduction over the reduce loop ``loop``: a new stage ``TF[loop, i...]``
    reduces over the other reduce loops, and ``t`` reduces ``TF`` over its first axis. The
    factored axis is spatial in ``TF``, so it can be vectorized or parallelized.

    ``C[i] = sum_{ko, ki} A[i, ko*4 + ki]`` with ``rfactor(C, ki)`` ->
    ``CF[ki, i] = sum_ko A[i, ko*4 + ki]``; ``C[i] = sum_ki CF[ki, i]``
    """
    prim = f"rfactor({getattr(t, 'name', t)}, {getattr(loop, 'name', loop)})"
    st = _compute_stage(s, t, prim)
    _check_reduction(st, prim)
    lp = st._leaf(prim, loop)
    return s.apply_step(RFactor(st.name, lp.name))


def _check_reduction(st: Stage, prim: str) -> None:
    if not st.op.is_reduction:
        raise ScheduleError(f"stage '{st.name}': {prim}: '{st.name}' is not a reduction")


@dataclass(frozen=True, slots=True)
class RFactor(Step):
    """``s.rfactor(C, loop)``; ``stage`` names C's stage, ``loop`` the reduce loop."""

    loop: str

    PRIMITIVES = ("rfactor",)

    def validate(self, s: Schedule) -> None:
        st = s.stage(self.stage)
        prim = f"rfactor({st.tensor.name}, {self.loop})"
        _check_reduction(st, prim)
        lp = st.loop(self.loop)
        if lp.kind is not IterKind.REDUCE:
            raise ScheduleError(f"stage '{st.name}': {prim}: loop '{lp.name}' is spatial; "
                                "rfactor takes one of the reduction's loops")
        if st.annotations or st.prefetches or st.attach is not Attach.ROOT or any(
                r.parent.kind is IterKind.SPATIAL for r in st.relations
                if isinstance(r, Split)) or any(isinstance(r, Fuse) for r in st.relations):
            raise ScheduleError(f"stage '{st.name}': {prim}: apply rfactor right after "
                                "splitting the reduction, before fusing, annotating or "
                                "scheduling spatial loops")
        if not any(v.kind is IterKind.REDUCE and v is not lp for v in st.leaf_iter_vars):
            raise ScheduleError(f"stage '{st.name}': {prim}: '{lp.name}' is the only "
                                "reduction loop; split the reduction first (e.g. split(k, "
                                "factor=8)) and rfactor one of the parts")

    def apply(self, s: Schedule) -> Tensor:
        st = s.stage(self.stage)
        lp = st.loop(self.loop)
        op = st.op
        values, guards = _reduce_values(st)
        fa = IterVar(Var(lp.name), Const(0, "int32"), lp.extent, IterKind.SPATIAL)
        axes = _fresh_axes(op.axis)
        red_leaves = [v for v in st.leaf_iter_vars if v.kind is IterKind.REDUCE and v is not lp]
        raxes = tuple(IterVar(Var(v.name), Const(0, "int32"), v.extent, IterKind.REDUCE)
                      for v in red_leaves)
        leaf_map: dict[Var, Expr] = {lp.var: fa.var}
        leaf_map.update({v.var: r.var for v, r in zip(red_leaves, raxes)})
        mapping = {a.var: b.var for a, b in zip(op.axis, axes)}
        mapping.update({r.var: simplify(substitute(values[r.var], leaf_map))
                        for r in op.reduce_axis})
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
        final = Reduce(body.combiner, Load(tf, (k.var,) + tuple(a.var for a in out_axes)),
                       (k,), None)
        st.reset(compute_op(op.name, out_axes, final, op.tag, output=st.tensor))
        s._add_stage(tf.op, index=s.stages.index(st))
        return tf

    def __str__(self) -> str:
        return f"s.rfactor({tensor_ref(self.stage)}, {loop_ref(self.stage, self.loop)})"


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


def _tensor_named(s: Schedule, name: str) -> Tensor | None:
    try:
        return s.tensor(name)
    except ScheduleError:
        return None
