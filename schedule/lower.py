"""Lowering: a Schedule and its arguments become one loop nest (a LoweredFunc).

The pipeline, in order (each step needs the one before):
  1. check the arguments and the attachments (``check``): every error is raised before any IR
     is built, so an invalid schedule never reaches a compiler;
  2. inline: substitute compute_inline stages into their readers' bodies;
  3. bound inference, consumers first: a stage's region needs the regions of its readers;
  4. build each root stage's nest, placing attached stages, tail guards (turned into loop
     bounds where the guarded loop is innermost in the guard), reduction init nests;
  5. passes (``_passes``, schedule/passes/): check loop nesting, simplify with scoped loop and
     let ranges, partition tails, unroll (partitioning and unrolling need the constant extents
     that simplification exposes), simplify again. With ``LOOPTUNE_VERIFY_IR=1`` the IR is
     verified (schedule/verify.py) after the nest is built and after every pass.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..errors import ScheduleError
from ..lang.expr import BinKind, BinOp, BufferLoad, Const, Expr, IterKind, IterVar, Var
from ..lang.printer import expr_str
from ..lang.simplify import linear_terms, simplify, upper_bound
from ..lang.tensor import ComputeOp, Tensor
from ..lang.visitor import ExprMutator, collect_loads, collect_vars, substitute
from .bound import (LoopNest, bounds_region, interval, loop_nest, relax_leaves, root_intervals,
                    union_bounds)
from .schedule import Schedule
from .attach import Attach, AttachAt
from .loop_steps import ANNOT_DONE, check_store_at
from .sliding import fold_size, slide
from .stage import Annot, Stage
from .stmt import (Allocate, Buffer, For, ForKind, IfThenElse, LetStmt, Stmt, Store,
                   display_names, seq, stmt_str)
from .passes import (REGION_HOOKS, RegionHook, check_nesting, partition_tails, simplify_stmt,
                     unroll_loops)
from .passes.substitute import substitute_stmt
from .prefetch import prefetch_stmts
from .verify import verify_pass

_FOR_KIND = {Annot.UNROLL: ForKind.UNROLLED, Annot.VECTORIZE: ForKind.VECTORIZED,
             Annot.PARALLEL: ForKind.PARALLEL, Annot.BIND: ForKind.THREAD,
             Annot.STREAM: ForKind.STREAMED}


@dataclass
class LoweredFunc:
    """A lowered function: its arguments' buffers, symbolic size parameters and loop nest."""

    name: str
    args: list[Tensor]
    buffers: list[Buffer]
    size_vars: list[Var]
    body: Stmt

    def __str__(self) -> str:
        names = display_names(self.body, self.size_vars)

        def arg(b: Buffer) -> str:
            shape = ", ".join(expr_str(x, names) if isinstance(x, Expr) else str(x)
                              for x in b.shape)
            return f"{b.name}: {b.dtype}[{shape}]"
        head = f"def {self.name}({', '.join(arg(b) for b in self.buffers)}):"
        body = stmt_str(self.body, names)
        return head + "\n" + "\n".join("  " + ln for ln in body.splitlines())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        """The loop nest in a notebook: loop kinds coloured, buffer sizes (nest_html.py)."""
        from .nest_html import html_fragment
        return html_fragment(self)


def lower(s: Schedule, args, name: str = "main", *, unroll: bool = True,
          region_hook: RegionHook | None = None, target=None) -> LoweredFunc:
    """Lower schedule ``s`` to a loop nest taking ``args`` (tensors, in call order).

    ``unroll=False`` leaves the loops marked unrolled as loops (of kind ``UNROLLED``) instead
    of copying their bodies: about half the lowering time for analyses that only need the
    nest's shape, such as cost-model features. Code generators get the default.
    ``region_hook``: the target's say on loop bodies the passes must keep whole (``build``
    passes ``Target.region_hook``; the opencl target keeps its work-group regions whole).
    ``target`` (a target string or Target) picks the hook its backend registered instead:
    ``lt.lower(s, args, target="opencl")`` shows the nest that ``build`` compiles there."""
    if region_hook is None and target is not None:
        kind = getattr(target, "kind", None) or str(target).split()[0]
        region_hook = REGION_HOOKS.get(kind)
    return _Lowering(s, list(args), name, unroll, region_hook).run()


class _Inline(ExprMutator):
    def __init__(self, inlined: dict[int, ComputeOp]):
        self.inlined = inlined

    def visit_Load(self, e):
        e = super().visit_Load(e)
        op = self.inlined.get(id(e.tensor))
        if op is None:
            return e
        body = substitute(op.body, {a.var: i for a, i in zip(op.axis, e.indices)})
        return self.visit(body)


class _Lowering:
    def __init__(self, s: Schedule, args: list, name: str, unroll: bool = True,
                 region_hook: RegionHook | None = None):
        self.s, self.args, self.name, self.unroll = s, args, name, unroll
        self.region_hook = region_hook
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.body: dict[Stage, Expr] = {}
        self.readers: dict[Stage, list[Stage]] = defaultdict(list)
        self.nests: dict[Stage, LoopNest] = {}
        self.buffers: dict[int, Buffer] = {}          # id(tensor) -> buffer
        self.offsets: dict[int, list[Expr]] = {}      # id(tensor) -> per-dim min (let vars)
        self.attached: dict[tuple[Stage, IterVar], list[Stage]] = defaultdict(list)
        self.lets: dict[Stage, list[tuple[Var, Expr]]] = {}
        # store_at (schedule/sliding.py): stages whose buffer lives at a host loop outside
        # the one they are computed at, the lets of that buffer's region (placed with it),
        # and the folded dimension of a buffer: id(tensor) -> (dim, rows)
        self.stored: dict[tuple[Stage, IterVar], list[Stage]] = defaultdict(list)
        self.store_lets: dict[Stage, list[tuple[Var, Expr]]] = {}
        self.folds: dict[int, tuple[int, int]] = {}
        self.fused: dict[Stage, Stage] = {}           # compute_with: host -> fused stage

    # ---- 1-2: checks and inlining ------------------------------------------------------

    def run(self) -> LoweredFunc:
        stages = [st for st in self.s.stages if st.attach is not Attach.INLINE]
        inlined = {id(st.tensor): st.op for st in self.s.stages if st.attach is Attach.INLINE}
        inl = _Inline(inlined)
        for st in stages:
            self.body[st] = inl.visit(st.op.body)
        for st in stages:
            for t in dict.fromkeys(ld.tensor for ld in collect_loads(self.body[st])):
                if self.s.has_stage(t):
                    self.readers[self.s[t]].append(st)
        arg_bufs, size_vars = self._check_args(stages)
        self._check_attach(stages)
        self._check_fused(stages)
        for st in reversed(stages):
            self._infer(st)
        root = [st for st in stages if st.attach is Attach.ROOT]
        stmt = seq(*(self._stage_stmt(st) for st in root if st.fused_with is None))
        for st in reversed(root):
            t = st.op.output
            if id(t) not in {id(a) for a in self.args}:
                stmt = Allocate(self.buffers[id(t)], stmt)
        stmt = self._passes(stmt, arg_bufs, size_vars)
        return LoweredFunc(self.name, self.args, arg_bufs, size_vars, stmt)

    def _passes(self, stmt: Stmt, bufs: list[Buffer], size_vars: list[Var]) -> Stmt:
        """The statement passes, in order (each verified under LOOPTUNE_VERIFY_IR=1)."""
        def step(name: str, out: Stmt) -> Stmt:
            return verify_pass(name, out, size_vars, bufs)

        stmt = step("building the loop nest", stmt)
        check_nesting(stmt)
        stmt = step("simplify_stmt", simplify_stmt(stmt))
        # before unrolling: it makes tile extents constant
        stmt = step("partition_tails", partition_tails(stmt, self.region_hook))
        if self.unroll:
            stmt = step("unroll_loops", unroll_loops(stmt))
        # again: copies and branches now have known values
        return step("simplify_stmt (second)", simplify_stmt(stmt))

    def _check_args(self, stages):
        seen, bufs, names = set(), [], set()
        for a in self.args:
            if not isinstance(a, Tensor):
                raise ScheduleError(f"lower: arguments must be tensors; got {a!r}")
            if id(a) in seen:
                raise ScheduleError(f"lower: tensor '{a.name}' is given twice in the arguments")
            seen.add(id(a))
            bname, n = a.name, 1
            while bname in names:
                bname, n = f"{a.name}_{n}", n + 1
            names.add(bname)
            buf = Buffer(bname, a.shape, a.dtype, "global")
            self.buffers[id(a)] = buf
            bufs.append(buf)
            if self.s.has_stage(a):
                st = self.s[a]
                if st.attach is not Attach.ROOT:
                    raise ScheduleError(f"lower: '{a.name}' is an argument, so it is written whole "
                                        f"to memory, but stage '{st.name}' is "
                                        f"{st.attach}; compute it at root or drop it from "
                                        "the arguments")
        for t in self.s.outputs:
            if id(t) not in seen:
                raise ScheduleError(f"lower: output '{t.name}' is not in the arguments; pass "
                                    "every output tensor (and every input placeholder)")
        for st in stages:
            for ld in collect_loads(self.body[st]):
                t = ld.tensor
                if not self.s.has_stage(t) and id(t) not in seen:
                    raise ScheduleError(f"lower: stage '{st.name}' reads placeholder "
                                        f"'{t.name}', which is not in the arguments; add it")
        size_vars: dict[Var, None] = {}
        for a in self.args:
            for d in a.shape:
                if isinstance(d, Expr):
                    for v in collect_vars(d):
                        size_vars[v] = None
        for st in stages:
            for d in list(st.op.output.shape) + [r.extent for r in st.op.reduce_axis]:
                if isinstance(d, Expr):
                    missing = [v.name for v in collect_vars(d) if v not in size_vars]
                    if missing:
                        raise ScheduleError(f"lower: the size {', '.join(missing)} of stage "
                                            f"'{st.name}' does not appear in any argument's "
                                            "shape, so it cannot be bound at call time")
        return bufs, list(size_vars)

    def _within(self, r: Stage, host: Stage, loop: IterVar) -> bool:
        """Is stage ``r`` computed inside ``host``'s loop ``loop``?"""
        if r is host:
            return True
        while isinstance(r.attach, AttachAt):
            parent, pl = r.attach.stage, r.attach.loop
            if parent is host:
                order = host.leaf_iter_vars
                return order.index(pl) >= order.index(loop)
            r = parent
        return False

    def _check_attach(self, stages):
        attached = [st for st in stages if isinstance(st.attach, AttachAt)]
        for st in attached:  # first: every attach point still exists (_within needs it)
            parent, loop = st.attach.stage, st.attach.loop
            prim = f"compute_at({parent.name}, {loop.name})"
            if parent.attach is Attach.INLINE:
                raise ScheduleError(f"stage '{st.name}': {prim}: stage '{parent.name}' is "
                                    "inlined and has no loops; attach to the stage it is "
                                    "inlined into")
            if loop not in parent.leaf_iter_vars:
                raise ScheduleError(f"stage '{st.name}': {prim}: loop '{loop.name}' of "
                                    f"'{parent.name}' was split or fused after compute_at; "
                                    "attach to one of its current loops")
        for st in attached:
            parent, loop = st.attach.stage, st.attach.loop
            prim = f"compute_at({parent.name}, {loop.name})"
            if not self.readers[st]:
                raise ScheduleError(f"stage '{st.name}': {prim}: no stage reads '{st.name}' "
                                    "after inlining; compute_at a stage that reads it")
            for r in self.readers[st]:
                if not self._within(r, parent, loop):
                    raise ScheduleError(
                        f"stage '{st.name}': {prim}: stage '{r.name}' also reads "
                        f"'{st.name}' outside loop '{loop.name}'; compute_at a loop that "
                        "encloses every reader, or compute_root")
            self.attached[(parent, loop)].append(st)
            if self._slides(st):
                lp = st.stored_at.loop
                check_store_at(st, st.stored_at, f"store_at({parent.name}, {lp.name})")
                self.stored[(parent, lp)].append(st)

    @staticmethod
    def _slides(st: Stage) -> bool:
        """Is ``st`` stored at a loop outside the one it is computed at (store_at)?"""
        return st.stored_at is not None and isinstance(st.attach, AttachAt) and \
            st.stored_at.loop is not st.attach.loop

    def _check_fused(self, stages) -> None:
        """compute_with: what the steps could not check when they were applied (later steps
        may have moved, split or annotated the stages since)."""
        order = {st: k for k, st in enumerate(stages)}
        for b in stages:
            if b.fused_with is None:
                continue
            a, loop = b.fused_with.stage, b.fused_with.loop
            prim = f"stage '{b.name}': compute_with({a.name}, {loop.name})"
            if a.attach is Attach.INLINE or b.attach is Attach.INLINE:
                x = a if a.attach is Attach.INLINE else b
                raise ScheduleError(f"{prim}: stage '{x.name}' is inlined and has no loops; "
                                    "compute it at root or at a loop")
            if loop not in a.leaf_iter_vars:
                raise ScheduleError(f"{prim}: loop '{loop.name}' of '{a.name}' was split or "
                                    "fused after compute_with; fuse at one of its current "
                                    "loops")
            if str(a.attach) != str(b.attach):
                raise ScheduleError(f"{prim}: '{b.name}' is {b.attach} but '{a.name}' is "
                                    f"{a.attach}; fused stages are computed at the same place")
            if order[a] > order[b]:
                raise ScheduleError(f"{prim}: '{a.name}' is computed after '{b.name}'; fuse "
                                    f"the other way round: s[{a.name}].compute_with("
                                    f"s[{b.name}], ...)")
            f = a.leaf_iter_vars.index(loop) + 1
            la, lb = a.leaf_iter_vars, b.leaf_iter_vars
            if f > len(lb):
                raise ScheduleError(f"{prim}: that fuses {f} loops, but '{b.name}' has only "
                                    f"{len(lb)} ({b._order_str()}); fuse at an outer loop")
            for x, y in zip(la[:f], lb[:f]):
                ka = a.annotations.get(x, (None,))[0]
                kb = b.annotations.get(y, (None,))[0]
                bad = next((k for k in (ka, kb) if k in (Annot.VECTORIZE, Annot.STREAM,
                                                          Annot.BIND)), None)
                if bad is not None:
                    raise ScheduleError(f"{prim}: fused loops '{x.name}' / '{y.name}' may "
                                        f"not be {ANNOT_DONE[bad]} (each stage's body is a "
                                        "statement of its own); fuse at an outer loop and "
                                        f"{bad.value} the loops inside")
                if ka is not kb:
                    what = lambda k: "serial" if k is None else ANNOT_DONE[k]  # noqa: E731
                    raise ScheduleError(f"{prim}: fused loops differ in kind: '{x.name}' of "
                                        f"'{a.name}' is {what(ka)}, '{y.name}' of "
                                        f"'{b.name}' {what(kb)}; give both the same")
            for st, leaves in ((a, la), (b, lb)):
                for v in leaves[:f - 1]:
                    inner = self.attached.get((st, v))
                    if inner:
                        raise ScheduleError(f"{prim}: stage '{inner[0].name}' is computed at "
                                            f"'{st.name}'s loop '{v.name}', an outer fused "
                                            "loop; compute it at the innermost fused loop "
                                            f"('{la[f - 1].name}' / '{lb[f - 1].name}') or "
                                            "inside")
            inside = [st for st in stages if st is b or (
                isinstance(st.attach, AttachAt) and lb and self._within(st, b, lb[0]))]
            for st in inside:
                if st is not b and any(ld.tensor is a.op.output
                                       for ld in collect_loads(self.body[st])):
                    raise ScheduleError(f"{prim}: stage '{st.name}', computed inside "
                                        f"'{b.name}', reads '{a.name}'; only '{b.name}' "
                                        "itself is checked to read what each fused iteration "
                                        f"computed: compute '{st.name}' elsewhere, or do not "
                                        "fuse")
            between = [st for st in stages[order[a] + 1:order[b]]
                       if str(st.attach) == str(a.attach)]
            for st in between:
                reader = next((r for r in inside if any(
                    ld.tensor is st.op.output for ld in collect_loads(self.body[r]))), None)
                if reader is not None:
                    via = "" if reader is b else f" (through '{reader.name}', computed " \
                        "inside it)"
                    raise ScheduleError(f"{prim}: '{b.name}' reads '{st.name}'{via}, which is "
                                        f"computed between '{a.name}' and '{b.name}'; fuse "
                                        f"'{b.name}' with '{st.name}' instead, or compute "
                                        f"'{st.name}' elsewhere")
            self.fused[a] = b

    # ---- 3: bound inference ------------------------------------------------------------

    def _infer(self, st: Stage) -> None:
        t = st.op.output
        full = [(Const(0, "int32"), _as_expr(d)) for d in t.shape]
        red = [(r.min, r.extent) for r in st.op.reduce_axis]
        if st.attach is Attach.ROOT:
            region = full
            if id(t) not in self.buffers:
                self.buffers[id(t)] = Buffer(st.name, t.shape, t.dtype, st.scope or "local")
            self.offsets[id(t)] = [Const(0, "int32")] * t.ndim
        else:
            region = self._attached_region(st)
        nest = loop_nest(st, region + red, self.ranges)
        self.nests[st] = nest
        for leaf in st.leaf_iter_vars:
            ub = upper_bound(nest.extents[leaf], self.ranges)
            if ub is not None:
                self.ranges[leaf.var] = (0, max(ub - 1, 0))

    def _read_bounds(self, st: Stage, host: Stage, loop: IterVar):
        """Inclusive (lo, hi) per dimension of what one iteration of ``host``'s ``loop``
        reads of ``st``, in the loop variables outside it."""
        env: dict = {}
        hnest = self.nests[host]
        order = host.leaf_iter_vars
        relax_leaves(hnest, order[order.index(loop) + 1:], env, self.ranges)
        inside = [r for r in reversed(self.s.stages) if r in self.nests and r is not host
                  and isinstance(r.attach, AttachAt) and self._within(r, host, loop)]
        for r in inside:  # consumers first: a stage's lets use its host's loop variables
            for v, val in self.lets[r] + self.store_lets.get(r, []):
                iv = interval(val, env, self.ranges)
                env[v] = iv if iv is not None else (Const(0, "int32"), Const(2**31 - 1, "int32"))
            relax_leaves(self.nests[r], r.leaf_iter_vars, env, self.ranges)
        accesses = []
        t = st.op.output
        for r in self.readers[st]:
            roots = root_intervals(self.nests[r], env, self.ranges)
            for ld in collect_loads(self.body[r]):
                if ld.tensor is t:
                    accesses.append(ld.indices)
            env.update(roots)
        return union_bounds(t.shape, accesses, env, self.ranges)

    def _bind_region(self, st: Stage, region, tag: str) -> list[tuple[Var, Expr]]:
        """Let variables ``{st}.{tag}min{d}`` / ``ext{d}`` for ``region`` (their ranges
        noted); returns the lets, (min, ext) pairs in order."""
        lets = []
        for d, (mn, ext) in enumerate(region):
            mv, ev = Var(f"{st.name}.{tag}min{d}"), Var(f"{st.name}.{tag}ext{d}")
            lets += [(mv, mn), (ev, ext)]
            ub = upper_bound(ext, self.ranges)
            lo = upper_bound(-ext, self.ranges)
            self.ranges[ev] = (0 if lo is None else max(-lo, 0), ub if ub is not None else 2**31)
        return lets

    def _attached_region(self, st: Stage):
        host, loop = st.attach.stage, st.attach.loop
        t = st.op.output
        bounds = self._read_bounds(st, host, loop)
        if not self._slides(st):
            # the region is bound once per attach point to variables (let statements)
            lets = self._bind_region(st, bounds_region(bounds, self.ranges), "")
            store = lets
        else:
            # store_at: the buffer holds what the store loop's iteration reads; the compute
            # loop's iteration computes the part its predecessors did not (sliding.py)
            sb = self._read_bounds(st, host, st.stored_at.loop)
            store = self._bind_region(st, bounds_region(sb, self.ranges), "s")
            self.store_lets[st] = store
            full = bounds_region(bounds, self.ranges)
            dim, region = slide(bounds, full, loop.var, self.ranges)
            lets = self._bind_region(st, region, "")
            if dim is not None and dim >= 0:
                rows = fold_size(full[dim][1], upper_bound(store[2 * dim + 1][0], self.ranges),
                                 self.ranges)
                if rows is not None:
                    self.folds[id(t)] = (dim, rows)
        self.lets[st] = lets
        # a stored buffer's offsets are its region's min expressions (of loops outside the
        # store loop), not their lets: in the indices they then cancel against the loops'
        # own terms (((f % 4) * 1024 + xi) - (f % 4) * 1024 -> xi), which keeps the
        # accesses affine for the C compiler's vectorizer
        self.offsets[id(t)] = [mv if store is lets else val for mv, val in store[::2]]
        shape = []
        for d, (ev, _) in enumerate(store[1::2]):
            ub = self.ranges[ev][1]
            shape.append(ub if ub < 2**31 else t.shape[d])
        if id(t) in self.folds:
            dim, rows = self.folds[id(t)]
            shape[dim] = rows
        self.buffers[id(t)] = Buffer(st.name, tuple(shape), t.dtype, st.scope or "local")
        return [(mv, ev) for (mv, _), (ev, _) in zip(lets[::2], lets[1::2])]

    def buffer_index(self, t, idx) -> tuple[Expr, ...]:
        """Indices into ``t``'s buffer of the tensor indices ``idx``: less the buffer's
        region offsets, modulo the folded dimension's rows (store_at)."""
        offs = self.offsets.get(id(t))
        if offs is not None:
            idx = tuple(simplify(i - o, self.ranges) for i, o in zip(idx, offs))
        fold = self.folds.get(id(t))
        if fold is not None:
            d, rows = fold
            idx = idx[:d] + (simplify(idx[d] % Const(rows, "int32"), self.ranges),) + \
                idx[d + 1:]
        return tuple(idx)

    # ---- 4: building nests -------------------------------------------------------------

    def _to_buffers(self, e: Expr) -> Expr:
        lw = self

        class ToBuffers(ExprMutator):
            def visit_Load(self, ld):
                idx = tuple(self.visit(i) for i in ld.indices)
                t = ld.tensor
                return BufferLoad(lw.buffers[id(t)], lw.buffer_index(t, idx))

        return ToBuffers().visit(e)

    def _core(self, st: Stage, nest: LoopNest) -> tuple[Stmt, Stmt | None, list[Expr]]:
        """The innermost statement, for reductions the init store, and the conjuncts of the
        reduction's ``where`` that the caller places as loop guards (see _where_guards)."""
        t = st.op.output
        buf = self.buffers[id(t)]
        values = nest.values
        idx = self.buffer_index(t, tuple(values[a.var] for a in st.op.axis))
        body = substitute(self.body[st], values)
        if not st.op.is_reduction:
            return Store(buf, idx, self._to_buffers(body)), None, []
        src = self._to_buffers(body.source)
        update: Stmt = Store(buf, idx, body.combiner.combine(BufferLoad(buf, idx), src))
        moved, kept = self._where_guards(st, body.where)
        if kept:
            update = _guard([self._to_buffers(c) for c in kept], update)
        init = Store(buf, idx, body.combiner.identity(t.dtype))
        return update, init, moved

    def _where_guards(self, st: Stage, where: Expr | None) -> tuple[list[Expr], list[Expr]]:
        """Split a reduction's ``where`` (in leaf variables) into conjuncts that may guard
        loop levels and the rest. A conjunct moves when it reads no tensor and its innermost
        variable is a reduction loop: every statement inside that loop belongs to the update
        (the init nest lies outside the first reduction loop), so guarding the loop is
        guarding the update, and a tail guard such as rfactor's ``ko*4 + ki < K`` becomes the
        loop bound ``ki < min(4, K - ko*4)`` instead of a branch in the innermost loop."""
        if where is None:
            return [], []
        depth = {v.var: k for k, v in enumerate(st.leaf_iter_vars)}
        moved, kept = [], []
        for c in _conjuncts(simplify(where, self.ranges)):
            lvl = max((depth[v] for v in collect_vars(c) if v in depth), default=-1)
            if lvl >= 0 and st.leaf_iter_vars[lvl].kind is IterKind.REDUCE and \
                    not collect_loads(c):
                moved.append(c)
            else:
                kept.append(c)
        return moved, kept

    def _place_guards(self, st: Stage, nest: LoopNest, where: list[Expr], fused: int = 0):
        """Guards per loop level (-1: outside all loops); some become loop bounds (not on
        the ``fused`` outer levels, which another stage's body shares). ``where`` are
        reduction conditions whose innermost variable is a reduction loop."""
        leaves = st.leaf_iter_vars
        depth = {v.var: k for k, v in enumerate(leaves)}
        guards: dict[int, list[Expr]] = defaultdict(list)
        extents = [nest.extents[v] for v in leaves]
        for g in list(nest.guards) + where:
            g = simplify(g, self.ranges)
            if isinstance(g, Const):
                if g.value:
                    continue
            vs = [depth[v] for v in collect_vars(g) if v in depth]
            lvl = max(vs) if vs else -1
            bound = self._as_loop_bound(g, leaves[lvl]) if lvl >= fused else None
            if bound is not None and st.annotations.get(leaves[lvl], (None,))[0] not in (
                    Annot.UNROLL, Annot.BIND):
                extents[lvl] = simplify(BinOp(BinKind.MIN, extents[lvl], bound), self.ranges)
            else:
                guards[lvl].append(g)
        return guards, extents

    @staticmethod
    def _as_loop_bound(g: Expr, leaf: IterVar) -> Expr | None:
        """``v + rest < 0`` (v the innermost loop) as the bound ``-rest`` of v, else None."""
        if not (isinstance(g, BinOp) and g.op is BinKind.LT):
            return None
        terms, const = linear_terms(simplify(g.a - g.b))
        if terms.get(leaf.var) != 1:
            return None
        rest = {t: k for t, k in terms.items() if t != leaf.var}
        if any(leaf.var in collect_vars(t) for t in rest):
            return None
        neg = Const(0, "int32")
        for t, k in rest.items():
            neg = neg - t * k
        return simplify(neg - const)

    def _loop(self, st: Stage, leaf: IterVar, extent: Expr, body: Stmt) -> For:
        ann = st.annotations.get(leaf)
        kind = _FOR_KIND[ann[0]] if ann else ForKind.SERIAL
        tag = ann[1] if ann and ann[0] is Annot.BIND else None
        return For(leaf.var, Const(0, "int32"), extent, kind, body, tag)

    def _stage_stmt(self, st: Stage) -> Stmt:
        if st in self.fused:
            return self._fused_stmt(st, self.fused[st])
        nest = self._own_loops(st, 0)
        return _guard(nest.guards.get(-1, []), nest.stmt)

    def _own_loops(self, st: Stage, start: int) -> _OwnLoops:
        """``st``'s loops from level ``start`` inward around its core (with its attached
        stages, tail guards and reduction init); the outer ``start`` levels are left to the
        caller (compute_with shares them with another stage: no guard becomes their bound)."""
        leaves = st.leaf_iter_vars
        core, init, where = self._core(st, self.nests[st])
        self._check_stream(st, core)
        guards, extents = self._place_guards(st, self.nests[st], where, fused=start)
        first_red = next((k for k, v in enumerate(leaves) if v.kind is IterKind.REDUCE), None)
        stmt = core
        for lvl in reversed(range(start, len(leaves))):
            stmt = seq(*prefetch_stmts(self, st, lvl, extents),
                       self._with_attached(st, leaves[lvl], stmt))
            stmt = _guard(guards.get(lvl, []), stmt)
            stmt = self._loop(st, leaves[lvl], extents[lvl], stmt)
            if init is not None and lvl == first_red:
                stmt = seq(self._init_nest(st, init, guards, extents, first_red), stmt)
        return _OwnLoops(stmt, init, guards, extents, first_red)

    def _fused_stmt(self, a: Stage, b: Stage) -> Stmt:
        """``a``'s nest with ``b`` fused into its outer loops (compute_with): per iteration
        of the fused loops, ``a``'s body then ``b``'s (with ``b``'s loop variables replaced
        by ``a``'s). Guards of a fused level wrap each stage's part, inits of reductions
        whose first reduction loop is fused go before that fused loop."""
        loop = b.fused_with.loop
        f = a.leaf_iter_vars.index(loop) + 1
        la, lb = a.leaf_iter_vars, b.leaf_iter_vars
        prim = f"stage '{b.name}': compute_with({a.name}, {loop.name})"
        na, nb = self.nests[a], self.nests[b]
        lets = {v: val for st in (a, b) for v, val in self.lets.get(st, [])}
        for x, y in zip(la[:f], lb[:f]):
            ex, ey = na.extents[x], nb.extents[y]
            diff = simplify(substitute(ex - ey, lets), self.ranges)
            if not (isinstance(diff, Const) and diff.value == 0):
                raise ScheduleError(f"{prim}: fused loops '{x.name}' of '{a.name}' (extent "
                                    f"{expr_str(ex)}) and '{y.name}' of '{b.name}' (extent "
                                    f"{expr_str(ey)}) differ in extent; split them alike")
        mapping = {y.var: x.var for x, y in zip(la[:f], lb[:f])}
        self._check_fused_reads(a, b, f, mapping, lets, prim)
        parts = {st: self._own_loops(st, f) for st in (a, b)}

        def own(st: Stage, leaves: list) -> Stmt:
            """``st``'s part in the innermost fused loop: its stages attached there and its
            own loops, under its guards of every fused level."""
            nest = parts[st]
            conds = [g for lv in range(-1, f) for g in nest.guards.get(lv, [])]
            out = _guard(conds, self._with_attached(st, leaves[f - 1], nest.stmt))
            return substitute_stmt(out, mapping) if st is b else out

        stmt = seq(own(a, la), own(b, lb))
        for lvl in reversed(range(f)):
            # prefetches of either stage at a fused loop: at the top of the shared iteration
            pre = [*prefetch_stmts(self, a, lvl, parts[a].extents),
                   *(substitute_stmt(p, mapping)
                     for p in prefetch_stmts(self, b, lvl, parts[b].extents))]
            stmt = self._loop(a, la[lvl], parts[a].extents[lvl], seq(*pre, stmt))
            inits = []
            for st, nest in parts.items():
                if nest.init is None or nest.first_red != lvl:
                    continue
                conds = [g for lv in range(-1, lvl) for g in nest.guards.get(lv, [])]
                nest_init = _guard(conds, self._init_nest(st, nest.init, nest.guards,
                                                          nest.extents, lvl))
                if st is b:
                    nest_init = substitute_stmt(nest_init, {y.var: x.var for x, y in
                                                            zip(la[:lvl], lb[:lvl])})
                inits.append(nest_init)
            stmt = seq(*inits, stmt)
        return stmt

    def _check_fused_reads(self, a: Stage, b: Stage, f: int, mapping: dict, lets: dict,
                           prim: str):
        """``b`` may read from ``a`` only what ``a`` computes in the same iteration of the
        fused loops (proved on the bounds: per dimension, the interval ``b`` reads within
        the interval ``a`` writes, the loops inside the fused ones relaxed); and if ``a``
        is a reduction, none of its reduction loops may be fused (the value would be
        partial)."""
        t = a.op.output
        loads = [ld for ld in collect_loads(self.body[b]) if ld.tensor is t]
        if not loads:
            return
        la = a.leaf_iter_vars
        red = [v.name for v in la[:f] if v.kind is IterKind.REDUCE]
        if red:
            raise ScheduleError(f"{prim}: '{b.name}' reads '{a.name}', whose reduction loop "
                                f"'{red[0]}' is fused: it would read partial sums; fuse at a "
                                "loop outside the reduction")
        na, nb = self.nests[a], self.nests[b]
        env_a: dict = {}
        relax_leaves(na, la[f:], env_a, self.ranges)
        env_b: dict = {}
        relax_leaves(nb, b.leaf_iter_vars[f:], env_b, self.ranges)
        for iv in nb.roots:
            r = interval(nb.values[iv.var], env_b, self.ranges)
            env_b[iv.var] = r if r is not None else (iv.var, iv.var)

        def settle(e: Expr) -> Expr:
            return simplify(substitute(substitute(e, mapping), lets), self.ranges)

        for ld in loads:
            for d, (ax, idx) in enumerate(zip(a.op.axis, ld.indices)):
                w = interval(na.values[ax.var], env_a, self.ranges)
                r = interval(idx, env_b, self.ranges)
                ok = w is not None and r is not None
                if ok:
                    lo = settle(r[0] - w[0])
                    hi = settle(w[1] - r[1])
                    ok = all(isinstance(x, Const) and x.value >= 0 for x in (lo, hi))
                if not ok:
                    idx_s = ", ".join(expr_str(i) for i in ld.indices)
                    raise ScheduleError(
                        f"{prim}: cannot show that '{b.name}' reads {t.name}[{idx_s}] (dimension "
                        f"{d}) only where '{a.name}' writes in the same iteration of the fused "
                        "loops; split both stages alike so that each fused iteration reads "
                        "what it has just computed, or do not fuse them")

    def _check_stream(self, st: Stage, core: Stmt) -> None:
        """A streamed loop is still (after later steps) the innermost, holds no attached
        stage, and its store writes consecutive elements of the last dimension."""
        for leaf, (kind, _) in st.annotations.items():
            if kind is not Annot.STREAM:
                continue
            prim = f"stage '{st.name}': stream({leaf.name})"
            if leaf is not st.leaf_iter_vars[-1]:
                raise ScheduleError(f"{prim}: loop '{leaf.name}' is no longer the innermost "
                                    f"loop (order {st._order_str()}); reorder it back inward "
                                    "or stream the innermost loop")
            inside = self.attached.get((st, leaf), [])
            if inside:
                raise ScheduleError(f"{prim}: stage '{inside[0].name}' is computed inside "
                                    f"the streamed loop '{leaf.name}'; compute_at an outer "
                                    "loop (the streamed loop's body is the one store)")
            assert isinstance(core, Store), "stream() refuses reductions"
            *outer, last = core.indices
            terms, _ = linear_terms(simplify(last))
            rest = [t for t in terms if t != leaf.var]
            if terms.get(leaf.var) != 1 or any(leaf.var in collect_vars(t) for t in rest) or \
                    any(leaf.var in collect_vars(i) for i in outer):
                idx = ", ".join(expr_str(i) for i in core.indices)
                raise ScheduleError(f"{prim}: the store {core.buffer.name}[{idx}] is not "
                                    f"contiguous in loop '{leaf.name}' (streaming stores "
                                    "write consecutive elements); stream a loop that steps "
                                    "the last index by 1: split the last axis and stream its "
                                    "inner loop")

    def _init_nest(self, st, init: Stmt, guards, extents, first_red: int) -> Stmt:
        leaves = st.leaf_iter_vars
        stmt = init
        for lvl in reversed(range(first_red + 1, len(leaves))):
            if leaves[lvl].kind is IterKind.SPATIAL:
                stmt = self._loop(st, leaves[lvl], extents[lvl], _guard(guards.get(lvl, []), stmt))
        return stmt

    def _with_attached(self, host: Stage, leaf: IterVar, body: Stmt) -> Stmt:
        prods = self.attached.get((host, leaf), [])
        stored = self.stored.get((host, leaf), [])
        if not prods and not stored:
            return body
        stmt = seq(*(self._stage_stmt(p) for p in prods if p.fused_with is None), body)
        for p in reversed(prods):
            if not self._slides(p):      # else allocated where it is stored
                stmt = Allocate(self.buffers[id(p.op.output)], stmt)
        for p in reversed(prods):
            for v, val in reversed(self.lets[p]):
                stmt = LetStmt(v, val, stmt)
        for p in reversed(stored):
            stmt = Allocate(self.buffers[id(p.op.output)], stmt)
        for p in reversed(stored):
            for v, val in reversed(self.store_lets[p]):
                stmt = LetStmt(v, val, stmt)
        return stmt


@dataclass
class _OwnLoops:
    """A stage's loops from some level inward (``_Lowering._own_loops``), and what the
    levels outside them still need: its guards and extents per level, its reduction init."""

    stmt: Stmt
    init: Stmt | None
    guards: dict[int, list[Expr]]
    extents: list[Expr]
    first_red: int | None


def _guard(conds: list[Expr], body: Stmt) -> Stmt:
    if not conds:
        return body
    c = conds[0]
    for x in conds[1:]:
        c = BinOp(BinKind.AND, c, x)
    return IfThenElse(c, body)


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, BinOp) and e.op is BinKind.AND:
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _as_expr(d) -> Expr:
    return d if isinstance(d, Expr) else Const(d, "int32")


__all__ = ["LoweredFunc", "lower"]
