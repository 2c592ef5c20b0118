"""Features of a config taken from its lowered loop nest, for cost models.

The knob values of a config mean nothing outside their template; the loop nest they produce
does. So a config is described by what :func:`looptune.lower` makes of it, in a fixed-length
vector that any task yields and a model trained on one task can read on another.

The nest is walked once. Every ``Store`` is a statement executed in the loops around it;
stores to the same buffer under the same loop variables are grouped (unrolling leaves copies
of a statement that differ only in constants: ``copies`` counts them). The ``N_STMTS``
statements doing the most work (iterations x copies x (arithmetic + 1)) fill the statement
slots, most work first; each slot holds

- the loop context, innermost loop first, for ``N_LEVELS`` levels: each loop's extent and
  kind (serial 0, parallel 1, vectorized 2, unrolled 3; -1 where there is no loop);
- iterations, copies, float/int operations and math calls per iteration, the vector length,
  parallel extent and the work under one parallel iteration, guards, whether the store
  accumulates (reads what it writes), the local memory allocated around it;
- the stored buffer and the first ``N_LOADS`` other buffers it reads, each with: scope and
  size, the stride (elements) along the innermost and along the vectorized loop, how many
  innermost loops leave the access unchanged (register reuse), whether an index is not
  affine, and for every level the bytes touched by the loops inside it and the reuse there
  (iterations / distinct elements).

Whole-function features follow: total float operations, stores, local allocation sizes, the
share of work under parallel and vectorized loops. All sizes are log2(1 + x).

Example, ``C[i, j] += A[i, k] * B[k, j]`` with loops ``i < 4, j < 8 (vectorized), k < 16``
innermost last: the update statement has 512 iterations and 2 float ops per iteration; B's
stride along k (innermost) is 8 elements and along j (vectorized) 1; A's bytes touched inside
level 0 (the k loop) are 16 x 4 = 64, inside level 1 (j, k) still 64, so its reuse there is
128 / 16 = 8.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import LooptuneError
from ..lang import dtype as dt
from ..lang.expr import BinKind, Const, Expr, Var
from ..lang.simplify import const_bound
from ..lang.visitor import ExprVisitor
from ..schedule.passes import MAX_UNROLL
from ..schedule.stmt import Buffer, For, ForKind, Stmt, StmtVisitor, Store

N_LEVELS = 6        # loop levels described per statement (innermost first)
N_LOADS = 2         # loaded buffers described per statement (besides the stored one)
N_STMTS = 3         # statements described (most work first)

_KIND_CODE = {ForKind.SERIAL: 0, ForKind.PARALLEL: 1, ForKind.VECTORIZED: 2,
              ForKind.UNROLLED: 3, ForKind.THREAD: 1, ForKind.STREAMED: 4}
_VECTOR_KINDS = (ForKind.VECTORIZED, ForKind.STREAMED)   # a streamed loop runs in SIMD lanes
_STMT_NAMES = ["n_loops", "iters", "copies", "work_flops", "fops", "iops", "calls", "vec_len",
               "vec_innermost", "par_extent", "par_depth", "work_per_par_iter", "unroll_left",
               "guards", "accumulate", "alloc_live", "store_local"]
_ACCESS_NAMES = ["present", "local", "buf_bytes", "stride_inner", "stride_vec", "reuse_depth",
                 "nonaffine"]
_GLOBAL_NAMES = ["total_flops", "n_stores", "n_stmts", "alloc_total", "alloc_max",
                 "frac_par", "frac_vec", "n_par_loops"]


def _log(x: float) -> float:
    return math.log2(1.0 + x) if x > 0 else 0.0


def feature_names() -> list[str]:
    """The name of each entry of the vectors :func:`loop_nest_features` returns."""
    names = []
    for s in range(N_STMTS):
        p = f"s{s}."
        names += [p + n for n in _STMT_NAMES]
        names += [p + f"l{lv}.{n}" for lv in range(N_LEVELS) for n in ("extent", "kind")]
        for a in range(1 + N_LOADS):
            q = p + ("store." if a == 0 else f"load{a - 1}.")
            names += [q + n for n in _ACCESS_NAMES]
            names += [q + f"l{lv}.{n}" for lv in range(N_LEVELS) for n in ("bytes", "reuse")]
    return names + ["g." + n for n in _GLOBAL_NAMES]


N_FEATURES = len(feature_names())


# ---- index analysis -------------------------------------------------------------------------

class _Affine(ExprVisitor):
    """Coefficients of the variables in an index expression: ``{var: coef}``.

    ``//`` and ``%`` by a constant keep an approximate coefficient (divided, or as is) and
    set ``nonaffine``; loads inside an index (indirect access) also do."""

    def __init__(self, lets: dict[Var, dict]):
        self.lets = lets
        self.nonaffine = False

    def visit_Const(self, e):
        return {}

    def visit_Var(self, e):
        return self.lets.get(e, {e: 1.0})

    def visit_BinOp(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        op = e.op
        if op is BinKind.ADD:                                   # a + b
            return _merge(a, b, 1.0)
        if op is BinKind.SUB:                                   # a - b
            return _merge(a, b, -1.0)
        if op is BinKind.MUL:                                   # c * a, a * c
            if not a and isinstance(e.a, Const):
                return {v: c * e.a.value for v, c in b.items()}
            if not b and isinstance(e.b, Const):
                return {v: c * e.b.value for v, c in a.items()}
        elif op is BinKind.FLOORDIV and not b and isinstance(e.b, Const) and e.b.value:
            self.nonaffine = True                               # a // c ~ a / c
            return {v: c / e.b.value for v, c in a.items()}
        elif op in (BinKind.FLOORMOD, BinKind.MIN, BinKind.MAX):
            self.nonaffine = True                               # a % c, min(a, b) ~ a
            return _merge(a, b, 1.0) if op is not BinKind.FLOORMOD else a
        self.nonaffine = True
        return _merge(a, b, 1.0)

    def visit_Cast(self, e):
        return self.visit(e.value)

    def visit_Select(self, e):
        self.nonaffine = True
        return _merge(self.visit(e.t), self.visit(e.f), 1.0)

    def visit_Not(self, e):
        return {}

    def visit_Call(self, e):
        self.nonaffine = True
        return {}

    def visit_BufferLoad(self, e):
        self.nonaffine = True
        return {}


def _merge(a: dict, b: dict, sign: float) -> dict:
    if not b:
        return a
    out = dict(a)
    for v, c in b.items():
        out[v] = out.get(v, 0.0) + sign * c
    return out


class _Ops(ExprVisitor):
    """Counts arithmetic in a stored value and collects its loads, left to right."""

    def __init__(self):
        self.fops = self.iops = self.calls = 0
        self.loads: list = []

    def visit_BinOp(self, e):
        if dt.is_float(e.a.dtype):
            self.fops += 1
        else:
            self.iops += 1
        self.visit(e.a)
        self.visit(e.b)

    def visit_Select(self, e):
        self.fops += dt.is_float(e.dtype)
        super().visit_Select(e)

    def visit_Call(self, e):
        self.calls += 1
        self.fops += 1
        super().visit_Call(e)

    def visit_BufferLoad(self, e):
        self.loads.append(e)
        super().visit_BufferLoad(e)


def _shape(buf: Buffer) -> list[int]:
    out = []
    for s in buf.shape:
        v = s if isinstance(s, int) else getattr(s, "value", None)
        out.append(int(v) if isinstance(v, (int, float)) and v > 0 else 1)
    return out


# ---- the walk -------------------------------------------------------------------------------

class _Stmt:
    """One statement group: the first store of its group, its loops, and its copies."""

    __slots__ = ("alloc_live", "copies", "guards", "lets", "loops", "ops", "store")

    def __init__(self, store, loops, lets, guards, alloc_live):
        self.store, self.loops, self.lets = store, loops, lets
        self.guards, self.alloc_live, self.copies = guards, alloc_live, 1
        self.ops: _Ops | None = None

    def work(self) -> float:
        return _iters(self.loops) * self.copies * (self.ops.fops + 1)


def _iters(loops) -> float:
    n = 1.0
    for _, ext, _ in loops:
        n *= ext
    return n


class _Walk(StmtVisitor):
    """Collects statement groups with their loop stacks, lets, guards and allocations."""

    def __init__(self):
        self.loops: list[tuple[Var, int, ForKind]] = []
        self.lets: dict[Var, dict] = {}
        self.guards = 0
        self.alloc_live = 0
        self.allocs: list[int] = []
        self.groups: dict[tuple, _Stmt] = {}
        self.n_stores = 0
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.copies = 1          # product of the enclosing loops that unrolling copies

    def visit_For(self, s: For):
        if s.kind is ForKind.UNROLLED and isinstance(s.extent, Const) and \
                isinstance(s.min, Const) and 0 < s.extent.value <= MAX_UNROLL:
            # what unroll_loops turns into copies of the body (lowering with unroll=False
            # leaves the loop): counted as copies, as in the unrolled nest
            self.ranges[s.var] = (s.min.value, s.min.value + s.extent.value - 1)
            outer = self.copies
            self.copies *= s.extent.value
            self.visit(s.body)
            self.copies = outer
            return
        ext = self._extent(s.extent)
        self.loops.append((s.var, ext, s.kind))
        self.ranges[s.var] = (0, max(0, ext - 1))
        self.visit(s.body)
        self.loops.pop()

    def _extent(self, e: Expr) -> int:
        if isinstance(e, Const):
            return max(1, int(e.value))
        ub = const_bound(e, self.ranges)[1]           # a tail: its largest extent
        return max(1, int(ub)) if ub is not None else 1

    def visit_Allocate(self, s):
        nbytes = math.prod(_shape(s.buffer)) * dt.itemsize(s.buffer.dtype)
        self.allocs.append(nbytes)
        self.alloc_live += nbytes
        self.visit(s.body)
        self.alloc_live -= nbytes

    def visit_IfThenElse(self, s):
        self.guards += 1
        self.visit(s.then)
        if s.orelse is not None:
            self.visit(s.orelse)
        self.guards -= 1

    def visit_LetStmt(self, s):
        aff = _Affine(self.lets)
        self.lets[s.var] = aff.visit(s.value)
        self.visit(s.body)
        del self.lets[s.var]

    def visit_Store(self, s: Store):
        self.n_stores += self.copies
        key = (s.buffer.uid, tuple(v.uid for v, _, _ in self.loops))
        g = self.groups.get(key)
        if g is not None:
            g.copies += self.copies
            return
        g = _Stmt(s, tuple(self.loops), dict(self.lets), self.guards, self.alloc_live)
        g.copies = self.copies
        g.ops = _Ops()
        g.ops.visit(s.value)
        for i in s.indices:
            g.ops.visit(i)
        self.groups[key] = g


# ---- the vector -----------------------------------------------------------------------------

def _access_row(buf: Buffer, indices: Sequence[Expr], st: _Stmt) -> list[float]:
    aff = _Affine(st.lets)
    coefs = [aff.visit(i) for i in indices]
    shape = _shape(buf)
    rowstride, acc = [0] * len(shape), 1
    for k in range(len(shape) - 1, -1, -1):
        rowstride[k] = acc
        acc *= shape[k]
    item = dt.itemsize(buf.dtype)
    loops = st.loops
    inner = loops[-1][0] if loops else None
    vec = next((v for v, _, kind in reversed(loops) if kind in _VECTOR_KINDS), None)

    def stride(var) -> float:
        return abs(sum(c.get(var, 0.0) * rs for c, rs in zip(coefs, rowstride)))

    reuse_depth = 0
    for v, _, _ in reversed(loops):
        if any(c.get(v) for c in coefs):
            break
        reuse_depth += 1
    row = [1.0, float(buf.scope != "global"), _log(acc * item),
           _log(stride(inner)) if inner is not None else 0.0,
           _log(stride(vec)) if vec is not None else -1.0, float(reuse_depth),
           float(aff.nonaffine)]
    # footprint of the loops inside each level, innermost first
    span = [1.0] * len(shape)
    distinct = [1.0] * len(shape)
    iters = 1.0
    levels = []
    for lv in range(N_LEVELS):
        if lv < len(loops):
            v, ext, _ = loops[-1 - lv]
            iters *= ext
            for k, c in enumerate(coefs):
                ck = c.get(v)
                if ck:
                    span[k] += abs(ck) * (ext - 1)
                    distinct[k] *= ext
            elems = 1.0
            for k in range(len(shape)):
                elems *= min(shape[k], span[k], distinct[k])
            levels = [_log(elems * item), _log(iters / elems)]
        row += levels or [_log(item), 0.0]
    return row


def _stmt_row(st: _Stmt) -> list[float]:
    loops = st.loops
    iters = _iters(loops)
    ops = st.ops
    par = 1.0
    par_depth = -1
    vec_len, vec_inner, unroll_left = 0, 0.0, 1.0
    for depth, (_, ext, kind) in enumerate(loops):
        if kind is ForKind.PARALLEL or kind is ForKind.THREAD:
            par *= ext
            par_depth = depth if par_depth < 0 else par_depth
        elif kind in _VECTOR_KINDS:
            vec_len = ext
            vec_inner = float(depth == len(loops) - 1)
        elif kind is ForKind.UNROLLED:
            unroll_left *= ext
    store = st.store
    accumulate = any(ld.buffer is store.buffer and ld.indices == store.indices
                     for ld in ops.loads)
    row = [float(len(loops)), _log(iters), float(st.copies),
           _log(iters * st.copies * ops.fops), float(ops.fops), float(ops.iops),
           float(ops.calls), float(vec_len), vec_inner, _log(par) if par_depth >= 0 else 0.0,
           float(par_depth),
           _log(iters * st.copies / par), _log(unroll_left), float(st.guards),
           float(accumulate), _log(st.alloc_live), float(store.buffer.scope != "global")]
    for lv in range(N_LEVELS):
        if lv < len(loops):
            _, ext, kind = loops[-1 - lv]
            row += [_log(ext), float(_KIND_CODE[kind])]
        else:
            row += [0.0, -1.0]
    row += _access_row(store.buffer, store.indices, st)
    others = [ld for ld in ops.loads
              if not (ld.buffer is store.buffer and ld.indices == store.indices)]
    for a in range(N_LOADS):
        if a < len(others):
            row += _access_row(others[a].buffer, others[a].indices, st)
        else:
            row += [0.0] * _ACCESS_LEN
    return row


_ACCESS_LEN = len(_ACCESS_NAMES) + 2 * N_LEVELS
_STMT_LEN = len(_STMT_NAMES) + 2 * N_LEVELS + (1 + N_LOADS) * _ACCESS_LEN


def loop_nest_features(func) -> np.ndarray:
    """The feature vector (float64, ``N_FEATURES`` long) of a lowered function or a Stmt."""
    body: Stmt = getattr(func, "body", func)
    w = _Walk()
    w.visit(body)
    groups = list(w.groups.values())
    works = [g.work() for g in groups]
    order = sorted(range(len(groups)), key=lambda k: -works[k])      # stable: program order
    vec: list[float] = []
    for s in range(N_STMTS):
        vec += _stmt_row(groups[order[s]]) if s < len(order) else [0.0] * _STMT_LEN
    flops = [_iters(g.loops) * g.copies * g.ops.fops for g in groups]
    total = sum(flops)
    par = sum(f for f, g in zip(flops, groups)
              if any(k in (ForKind.PARALLEL, ForKind.THREAD) for _, _, k in g.loops))
    vecd = sum(f for f, g in zip(flops, groups)
               if any(k in _VECTOR_KINDS for _, _, k in g.loops))
    n_par = len({v.uid for g in groups for v, _, k in g.loops if k is ForKind.PARALLEL})
    vec += [_log(total), float(w.n_stores), float(len(groups)), _log(sum(w.allocs)),
            _log(max(w.allocs, default=0)), par / total if total else 0.0,
            vecd / total if total else 0.0, float(n_par)]
    return np.asarray(vec, dtype=np.float64)


def config_features(task, config) -> np.ndarray | None:
    """Features of ``config`` (a ConfigEntity or index) of ``task``: instantiate, lower (as
    the task's target would: OpenCL keeps its work-group regions whole), walk. None when the
    config makes an invalid schedule (a LooptuneError)."""
    return config_features_keyed(task, config)[0]


def config_features_keyed(task, config) -> tuple[np.ndarray | None, str | None]:
    """:func:`config_features` and the program key of ``config`` where its steps identify
    its program (the auto scheduler's sketches: :func:`~.programs.steps_key`), else None."""
    from ..backends.target import Target
    from ..schedule.lower import lower
    from .programs import steps_key
    try:
        s, tensors = task.instantiate(config)
        key = steps_key(task, s, tensors)
        func = lower(s, tensors, unroll=False,     # the walk counts unrolled copies itself
                     region_hook=Target.parse(task.target).region_hook)
    except LooptuneError:
        return None, None
    return loop_nest_features(func), key
