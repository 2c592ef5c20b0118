"""The auto scheduler's CPU rules (package-private; see :mod:`.auto`): the knobs each rule
defines, and how a config's choices become schedule primitives.

- contractions: multi-level tiling, S-R-S-R-S after Ansor (parallel, middle and register
  levels of every tiled spatial loop; the reduction split into a K-block and a micro-kernel
  loop), accumulating in a ``local`` cache_write tile or in the epilogue's; an optional packed
  operand (``cache_read`` into a contiguous panel); the streamed vector operand (B, or its
  panel) prefetched 2 KiB ahead in the innermost reduction loop (knob ``<stage>.prefetch``,
  on first: sgemm 1024^3's fallback 10.33 -> 9.98 ms, 2-core Emerald Rapids);
- row statistics computed per row of their output, their reductions rfactored over lanes;
  a row sum of an elementwise stage computed at the same row may fuse its partial loop into
  that stage's loop (``compute_with``, knob ``<stage>.with``: the columns per step, 8 vectors
  first, or 0), so each chunk is summed while it is still in registers instead of in a second
  pass (softmax's hand schedule: 1.12-1.18x with it, 2-core Zen 4);
- reductions rfactored over vector lanes where they run along contiguous memory;
- everything else vectorized along its innermost loop (2-D tiles for transposes: the
  innermost loop by the one the transposed load reads along), its outer loops fused and
  parallel;
- an elementwise float output larger than the last-level cache may write its rows with
  streaming stores (knob ``<stage>.stream``, off first: ``auto_rules.may_stream``); the
  streamed loop is the whole last axis (the stores go out in 1 KB chunks), so the knob
  ``<stage>.width`` does not apply to it.

Every rule takes ``par``: the kernel's knob ``parallel`` (a kernel too small to pay for an
OpenMP region runs on one thread: its outer loops are then neither parallel nor fused, except
where one loop is needed as the place to compute a producer at).
"""
from __future__ import annotations

from ..lang.expr import IterKind
from ..lang.tensor import PlaceholderOp
from .auto_rules import (
    Epilogue,
    UNROLL_BODY,
    UNROLL_K,
    UNROLL_VECTORS,
    Machine,
    TilePlan,
    choices,
    extent,
    is_transposing,
    lanes_first,
    may_stream,
    prefetch_ahead,
    row_axis,
    table_axes,
)


def fuse_parallel(stage, loops, par: bool = True):
    """``loops`` fused into one parallel loop (``par``), or, on one thread, the innermost of
    them (what a producer computed per iteration attaches to)."""
    if not par:
        return loops[-1]
    p = loops[0] if len(loops) == 1 else stage.fuse(*loops)
    stage.parallel(p)
    return p


# ---- contractions ------------------------------------------------------------------------------

def contraction_knobs(cfg, name: str, plan: TilePlan, has_epilogue: bool) -> None:
    if not has_epilogue:
        cfg.define_knob(f"{name}.cache", [True, False])
    for c in plan.tiled:
        cfg.define_knob(f"{name}.tile{c}", plan.inner[c])
        cfg.define_knob(f"{name}.mid{c}", plan.middle[c])
    for k, vals in enumerate(plan.red):
        cfg.define_knob(f"{name}.red{k}", vals)
    cfg.define_knob(f"{name}.order", ["tile", "kblock"])
    cfg.define_knob(f"{name}.unroll", ["tile", "tile+k", "none"])
    if len(plan.pack) > 1:
        cfg.define_knob(f"{name}.pack", plan.pack)
    if plan.stream_operand is not None:
        cfg.define_knob(f"{name}.prefetch", [True, False])


def tile_contraction(cfg, s, C, name: str, plan: TilePlan, epi: Epilogue | None,
                     par: bool = True) -> tuple:
    """Tile contraction ``C`` (see the module docstring). The output stage ``O`` (the
    epilogue, C's write-back after cache_write, or C itself) runs the parallel (P), middle
    (M) and tile (T) levels of every tiled loop; the accumulating stage ``CC`` is computed
    per tile (order "tile": the reduction runs around the register tile) or per parallel
    iteration (order "kblock": K-blocks outside the middle tiles, Ansor's S-R-S-R-S).
    Returns O's stage and its parallel loop (where a producer computed per parallel
    iteration attaches: :func:`per_tile`)."""
    ndim = len(s[C].op.axis)
    axis_of = epi.axis_of if epi is not None else tuple(range(ndim))
    if epi is not None:
        O, CC = epi.out.tensor, C
    elif cfg[f"{name}.cache"].val:
        O, CC = C, s.cache_write(C, "local")
    else:
        O = CC = C
    order = cfg[f"{name}.order"].val
    pack = cfg[f"{name}.pack"].val if len(plan.pack) > 1 else "none"
    packed = _pack(s, CC, pack) if pack != "none" else None
    P, M, T, tile_of = _output_levels(cfg, s[O], name, plan, axis_of, accumulates=CC is O,
                                      splits=epi.splits if epi is not None else ())
    par = fuse_parallel(s[O], P, par)
    if CC is O:
        _accumulate(cfg, s, CC, name, plan, None, order, packed, (par, M, T))
        return s[O], par
    s[CC].compute_at(s[O], M[-1] if order == "tile" else par)
    if T and (T[-1] is tile_of.get(plan.vec) or not (epi and epi.splits)):
        s[O].vectorize(T[-1])
    # The write-back of an unpacking epilogue (NCHWc -> NCHW) reads the tile across its
    # vectors, 16 floats apart: scalar, the conv2d_nchwc layer ran 0.568 ms against 0.602
    # vectorized (2 threads, Zen 5). A transposing one reads it across too, yet vectorized
    # it ran faster: 1024^3 matmul with a transposed output 5.3 against 7.4 ms.
    _accumulate(cfg, s, CC, name, plan, s[O], order, packed, (par, None, None))
    return s[O], par


def per_tile(s, st, at_stage, at_loop) -> None:
    """Padding stage ``st`` computed per parallel iteration of the contraction that reads it
    (``at_loop`` of ``at_stage``, from :func:`tile_contraction`): only the window that
    iteration reads (its halo recomputed by the neighbours), written while it stays in
    cache, its rows vectorized (its coefficient-table loops unrolled outside them)."""
    st.compute_at(at_stage, at_loop)
    axes = list(st.op.axis)
    tables = [ax for ax, mod in table_axes(st.op) if mod is None]
    if tables:
        rest = [a for a in axes if not any(a is t for t in tables)]
        st.reorder(*rest[:-1], *tables, rest[-1])
        for t in tables:
            st.unroll(t)
    st.vectorize(axes[-1])


def _output_levels(cfg, st, name: str, plan: TilePlan, axis_of, accumulates: bool = False,
                   splits=()) -> tuple[list, list, list, dict]:
    """Split each tiled loop of output stage ``st`` into parallel, middle and tile parts
    (its own axis order within each level; the tile in ``plan.order`` where ``st``
    accumulates itself, its tile the micro-kernel's); returns the three levels, reordered,
    and the tile loop of each tiled axis of the contraction.
    An axis of ``st`` that the contraction has as two (``splits``: an unpacking epilogue's
    channels, ``k // b`` and ``k % b``) is first split by ``b`` into those two."""
    c_of = {e: c for c, e in enumerate(axis_of)}
    split_of = {e: (b, co, ci) for e, b, co, ci in splits}
    loops = []                            # (loop of st, the contraction's axis it runs)
    for e, ax in enumerate(list(st.op.axis)):
        if e in split_of:
            b, co, ci = split_of[e]
            outer, inner = st.split(ax, factor=b)
            loops += [(outer, co), (inner, ci)]
        else:
            loops.append((ax, c_of[e]))
    P, M, T = [], [], []
    tile_of = {}
    for ax, c in loops:
        if c not in plan.tiled:
            P.append(ax)
            continue
        size = cfg[f"{name}.tile{c}"].val
        rest, t = st.split(ax, factor=size)
        m = cfg[f"{name}.mid{c}"].val
        if m != "all":       # at most the tiles there are: a wider middle loop's tail
            m = min(m, -(-extent(ax) // size))   # guard hid from bound inference that its
            # tile stays within the axis (an unpacked channel block then read two blocks)
        if m == "all":
            M.append(rest)
        else:
            o, mid = st.split(rest, factor=m)
            P.append(o)
            M.append(mid)
        T.append(t)
        tile_of[c] = t
    if accumulates:
        T = [tile_of[c] for c in plan.order]
    st.reorder(*P, *M, *T)
    return P, M, T, tile_of


def _accumulate(cfg, s, CC, name: str, plan: TilePlan, O, order: str, packed, levels) -> None:
    """The loops of accumulating stage ``CC``: reduction loops split (K-block, micro-kernel),
    the tile's rows unrolled and its vector loop vectorized. ``O`` is None when CC is the
    output stage itself (no cache), whose P/M/T ``levels`` are given."""
    st = s[CC]
    r_out, r_in = [], []
    for k, r in enumerate(st.op.reduce_axis):
        f = cfg[f"{name}.red{k}"].val
        if f == 1:
            r_out.append(r)
            continue
        ro, ri = st.split(r, factor=f)
        r_out.append(ro)
        r_in.append(ri)
    par, M, T = levels
    if O is None:                               # C itself: P, M, (R), T
        head, mids, tile = [par], M, T
    else:
        axes = list(st.op.axis)
        head = [a for c, a in enumerate(axes) if c not in plan.tiled]
        if order == "kblock":
            mids, tile = [], []
            inner = {}
            for c in plan.tiled:
                mo, inner[c] = st.split(axes[c], factor=cfg[f"{name}.tile{c}"].val)
                mids.append(mo)
            tile = [inner[c] for c in plan.order]
        else:
            mids, tile = [], [axes[c] for c in plan.order]
    if order == "kblock":
        st.reorder(*head, *r_out, *mids, *r_in, *tile)
    else:
        st.reorder(*head, *mids, *r_out, *r_in, *tile)
    rows, vec = tile[:-1], tile[-1]
    st.vectorize(vec)
    how = cfg[f"{name}.unroll"].val
    if how != "none":
        sizes = [cfg[f"{name}.tile{c}"].val for c in plan.order]
        body = _unroll_rows(st, rows, sizes[:-1], -(-sizes[-1] // max(1, plan.lanes)))
        if how == "tile+k" and body and body <= plan.accumulators:
            _unroll_micro_k(st, r_in, body)
        # a tile of more vectors than registers spills: its reduction steps unrolled too
        # took gcc 24 s to compile (8 x 4 tile of 16 floats, 8 steps, 1x20x9x11 -> 40 NCHWc
        # conv, Zen 5), so "tile+k" builds such a tile as "tile" does
    if packed is not None:
        at_stage, at_loop = (st, r_out[-1]) if order == "kblock" else \
            (O if O is not None else st, par)
        s[packed].compute_at(at_stage, at_loop)
        s[packed].vectorize(s[packed].op.axis[-1])
    if plan.stream_operand is not None and cfg[f"{name}.prefetch"].val:
        _prefetch_operand(cfg, s, st, name, plan, packed, (r_in or r_out)[-1])


def _prefetch_operand(cfg, s, st, name: str, plan: TilePlan, packed, loop) -> None:
    """The micro-kernel's innermost reduction loop asks for the vectors of the streamed
    operand (its panel when packed) ``PREFETCH_BYTES`` ahead: the rows one step reads are
    the vector tile (examples/matmul.py measures the same rule), unclamped (``nonfaulting``:
    no ``min`` in the address, which cost the AVX2 tile 10%). Not in a loop shorter than
    twice that distance (most of its iterations would fetch past it): the knob then builds
    the same program as without, which the tuners see as measured."""
    if packed is not None and packed.op.inputs[0].name == plan.stream_operand:
        t = packed
    else:
        t = next(x for x in st.op.inputs if x.name == plan.stream_operand)
    ahead = prefetch_ahead(cfg[f"{name}.tile{plan.vec}"].val, t.dtype)
    if extent(loop) >= 2 * ahead:
        st.prefetch(t, loop, ahead, bound="nonfaulting")


def _unroll_rows(st, rows: list, sizes: list[int], vectors: int) -> int:
    """Unroll the register tile's ``rows`` (their ``sizes``; ``vectors`` per row), innermost
    first, while the unrolled part holds at most ``UNROLL_VECTORS`` vectors. Returns the
    vectors of the unrolled body when every row is unrolled, else 0 (then the reduction
    steps around a row loop stay loops too)."""
    body = vectors
    for r, n in zip(reversed(rows), reversed(sizes)):
        if body * n > UNROLL_VECTORS:
            return 0
        st.unroll(r)
        body *= n
    return body


def _unroll_micro_k(st, r_in: list, body: int) -> None:
    """Unroll the micro-kernel's reduction loops around a register tile of ``body``
    vectors, innermost first, while their steps multiply to at most ``UNROLL_K`` and the
    unrolled body to at most ``UNROLL_BODY`` vector operations (the innermost one always,
    within that): a 3x3 window whole."""
    steps = 1
    for k, r in enumerate(reversed(r_in)):
        steps *= extent(r)
        if (k and steps > UNROLL_K) or steps * body > UNROLL_BODY:
            return
        st.unroll(r)


def _pack(s, CC, name: str):
    """``cache_read`` of the placeholder called ``name`` that ``CC`` reads, for CC."""
    for t in s[CC].op.inputs:
        if t.name == name:
            return s.cache_read(t, "local", [CC])
    raise AssertionError(f"auto sketch: contraction '{CC.name}' reads no tensor '{name}'")


# ---- reductions over lanes (rfactor) ---------------------------------------------------------

def lanes_knob(cfg, op, name: str, machine: Machine) -> bool:
    """Knob ``<name>.lanes`` (rfactor lanes; 1: none) where the rfactor rule may apply."""
    L = machine.lanes(op.output.dtype)
    if not op.reduce_axis or L < 2 or extent(op.reduce_axis[-1]) < L:
        return False
    more = [2 * L] if extent(op.reduce_axis[-1]) >= 2 * L else []
    vals = [L, *more, 1] if lanes_first(op, L) else [1, L, *more]
    cfg.define_knob(f"{name}.lanes", vals)
    return True


def rfactor_lanes(s, st, lanes: int, at_stage=None, at_loop=None):
    """Split ``st``'s last reduction loop by ``lanes`` and rfactor the inner part: the
    partial results run as a vectorized loop (computed at ``at_loop`` of ``at_stage``, or
    at root), then ``st`` combines them."""
    r = st.op.reduce_axis[-1]
    _, ki = st.split(r, factor=lanes)
    rf = s[s.rfactor(st.tensor, ki)]
    if at_stage is not None:
        rf.compute_at(at_stage, at_loop)
    lane = rf.op.axis[0]
    rf.reorder(*rf.op.reduce_axis, lane)
    rf.vectorize(lane)
    return rf


# ---- row statistics per row of their output ----------------------------------------------------

def row_knobs(cfg, op, name: str, machine: Machine, source=None) -> bool:
    """Knob ``<name>.at`` (computed per row of its output, or at root) and the lanes of its
    reduction; with a ``source`` (``row_source``) and lanes, knob ``<name>.with``: the
    columns per step of its partial loop fused into the source's loop (0: not fused).
    Returns whether it has lanes."""
    cfg.define_knob(f"{name}.at", ["row", "root"])
    lanes = lanes_knob(cfg, op, name, machine)
    if lanes and source is not None:
        L, n = machine.lanes(op.output.dtype), extent(op.reduce_axis[-1])
        fused = [c for c in (8 * L, 16 * L, 32 * L) if c <= n]
        cfg.define_knob(f"{name}.with", [*fused[:1], 0, *fused[1:]])
    return lanes


def row_source(s, st, per_row: dict):
    """The elementwise stage that row reduction ``st`` reads along its one reduction loop
    (``e[..., k]``, e's last axis as long as the loop) when both may be computed per row of
    the same output: the stage its partial loop may be fused with. None otherwise."""
    from ..lang.visitor import collect_loads
    op = st.op
    if len(op.reduce_axis) != 1 or id(st) not in per_row:
        return None
    k = op.reduce_axis[0]
    for ld in collect_loads(op.body):
        t = ld.tensor
        if not s.has_stage(t):
            continue
        src = s[t]
        if src.op.reduce_axis or not src.op.axis or per_row.get(id(src)) is not per_row[id(st)]:
            continue
        last = ld.indices[-1] if ld.indices else None
        if last is k.var and extent(src.op.axis[-1]) == extent(k):
            return src
    return None


def per_row(cfg, s, T, names: dict, producers: list, lanes: set, machine: Machine,
            par: bool = True, ahead: int = 0) -> None:
    """Output ``T`` row by row (the loops above its last fused and parallel), its last loop
    vectorized; ``producers`` computed at the row loop, in order: row reductions rfactored
    over ``lanes`` vector lanes (the partials vectorize, then are combined), row-wise
    intermediates vectorized along the row; with ``ahead`` (knob ``<output>.ahead``) and
    parallel rows, one row pass prefetches its inputs that many rows on."""
    st = s[T]
    axes = list(st.op.axis)
    row = fuse_parallel(st, axes[:-1], par)
    name = names[id(st)]
    if extent(axes[-1]) > 1 and cfg[f"{name}.vec"].val == "inner":
        w = cfg[f"{name}.width"].val
        if _streams(cfg, st, name, machine):
            st.stream(axes[-1])
        else:
            st.vectorize(st.split(axes[-1], factor=w)[1] if w < extent(axes[-1]) else axes[-1])
    at_row = {id(x): st for x in producers}
    rfs = []                           # the rfactored partial stages, in order
    fused: dict[int, tuple] = {}       # id(source) -> (its row sum, columns per step)
    for p in producers:
        pname = names[id(p)]
        src = row_source(s, p, at_row) if id(p) in lanes else None
        if src is not None and cfg[f"{pname}.lanes"].val > 1 and cfg[f"{pname}.with"].val:
            fused[id(src)] = (p, cfg[f"{pname}.with"].val)
    chunk_loop: dict[int, tuple] = {}  # id(row sum) -> (its source, the step loop, columns)
    for p in producers:
        pname = names[id(p)]
        n = cfg[f"{pname}.lanes"].val if id(p) in lanes else 1
        rf = rfactor_lanes(s, p, n, st, row) if n > 1 else None
        p.compute_at(st, row)
        if not p.op.reduce_axis and p.op.axis and extent(p.op.axis[-1]) > 1:
            if id(p) in fused:
                red, chunk = fused[id(p)]
                jo, ji = p.split(p.op.axis[-1], factor=chunk)
                p.vectorize(ji)
                chunk_loop[id(red)] = (p, jo, chunk)
            else:
                p.vectorize(p.op.axis[-1])
        if rf is not None and id(p) in chunk_loop:
            src, jo, chunk = chunk_loop[id(p)]
            (rko,) = rf.op.reduce_axis
            rkoo, rkoi = rf.split(rko, factor=chunk // n)
            rf.reorder(*rf.op.axis[1:], rkoo, rkoi, rf.op.axis[0])
            rf.compute_with(src, jo)
        if rf is not None:
            rfs.append(rf)
    if ahead and par:
        _prefetch_next_rows(row, ahead, list(chunk_loop.values()), rfs)


def _prefetch_next_rows(row, ahead: int, chunked: list, rfs: list) -> None:
    """A row pass asks the caches for its inputs ``ahead`` rows on, each step of its chunk
    loop for its own chunk (``prefetch(..., along=row)``): the next row arrives while this
    one is worked on, where the hardware prefetchers start over at every 4 KiB page. The pass
    is the elementwise stage whose row sum is fused into its chunk loop (softmax's exp: the
    most work per element, 1.17 -> 1.01 ms at 4096 x 1024), else the first rfactored row
    reduction (its loop over vectors of the row: layernorm's sum, 0.74 -> 0.70 ms)."""
    if chunked:
        stage, loop = chunked[0][0], chunked[0][1]
    elif rfs:
        stage = rfs[0]
        loop = next((v for v in stage.leaf_iter_vars if v.kind is IterKind.REDUCE), None)
    else:
        return
    if loop is None:
        return
    for t in stage.op.inputs:
        if isinstance(t.op, PlaceholderOp):
            stage.prefetch(t, loop, ahead, along=row)


# ---- any other stage ---------------------------------------------------------------------------

def _streams(cfg, st, name: str, machine: Machine) -> bool:
    """Does ``cfg`` choose streaming stores for stage ``st`` (where it has the knob)?"""
    return may_stream(st.op, st.is_output, machine.llc_bytes) and cfg[f"{name}.stream"].val


def simple_knobs(cfg, op, name: str, machine: Machine, lanes: bool = True,
                 output: bool = False) -> bool:
    """Knobs of a stage vectorized along its innermost loop (an ``output`` stage's streaming
    stores among them), and of its lanes unless they are defined already (``lanes=False``);
    returns whether it has lanes."""
    lanes = lanes and lanes_knob(cfg, op, name, machine)
    if not op.axis or extent(op.axis[-1]) == 1:
        return lanes
    if may_stream(op, output, machine.llc_bytes):
        cfg.define_knob(f"{name}.stream", [False, True])
    L = machine.lanes(op.output.dtype)
    e = extent(op.axis[-1])
    cfg.define_knob(f"{name}.vec", ["inner", "none"])
    first = L if e >= 2 * L else e          # short rows: the whole row is one vector
    if _accumulates_rows(op) and e <= 4 * L:
        first = e           # a window reduction accumulates whole rows (knob cache): no tail
    cfg.define_knob(f"{name}.width", choices(first, L, 2 * L, 4 * L, max(1, L // 2), e,
                                             limit=e))
    ax = row_axis(op)
    if len(op.axis) >= 2 and extent(op.axis[ax]) > 1:
        rows = min(L, extent(op.axis[ax])) if is_transposing(op) else 1
        cfg.define_knob(f"{name}.rows", choices(rows, 1, 2, 4, 8, 16, 32,
                                                limit=extent(op.axis[ax])))
    if _accumulates_rows(op):
        cfg.define_knob(f"{name}.cache", [True, False])
    return lanes


def _accumulates_rows(op) -> bool:
    """Whether a vectorized stage may accumulate blocks of its rows locally (knob
    ``cache``): a reduction with a row loop above its vector loop."""
    return bool(op.reduce_axis) and len(op.axis) >= 2


def vectorize_parallel(cfg, s, T, name: str, has_lanes: bool, machine: Machine,
                       par: bool = True, slides=()):
    """Stage ``T`` vectorized along its innermost loop (knobs of :func:`simple_knobs`), its
    outer loops fused and parallel. A reduction over vector lanes is rfactored (knob
    ``lanes``); one whose lanes are independent outputs may accumulate a block of outputs
    (``rows`` x ``width``) in a local buffer (knob ``cache``: ``cache_write`` computed per
    iteration of the outer loops, its window loops outside the vector loop and unrolled
    when short, as a pooling's). Stencil producers ``slides`` are computed per row of its
    strips (knob ``rows`` > 1) and stored per strip (store_at), their rows vectorized;
    without a row loop they stay at root. Returns ``(stage, loop)``: the iteration a
    producer may be computed per (:func:`per_tile`), or None where there is none."""
    st = s[T]
    if has_lanes and cfg[f"{name}.lanes"].val > 1:
        rf = rfactor_lanes(s, st, cfg[f"{name}.lanes"].val)
        axes = list(st.op.axis)                  # rfactor made st a new reduction
        if axes:
            rf.compute_at(st, fuse_parallel(st, axes, par))
        return None
    axes = list(st.op.axis)
    if not axes:                                  # a scalar: nothing to tile
        return None
    red = list(st.op.reduce_axis)
    # coefficient tables (auto_rules.table_axes), unrolled so that their selects fold: right
    # outside the vector loop, and a modular one of the vector axis inside it (its outer
    # part vectorized: the Winograd output transform's columns x = 4 * xo + xi)
    tables, inner = _table_loops(st, axes) if not _accumulates_rows(st.op) else ([], [])
    axes = [a for a in axes if not any(a is t for t in tables)]
    if not axes:
        return None
    if extent(axes[-1]) == 1 or cfg[f"{name}.vec"].val == "none":
        if tables or inner:
            st.reorder(*axes, *tables, *inner)
            for t in tables + inner:
                st.unroll(t)
        if par:
            return st, fuse_parallel(st, axes)
        return None
    local = None
    if _accumulates_rows(st.op) and cfg[f"{name}.cache"].val:
        local = s.cache_write(T, "local")
        axes, red = list(st.op.axis), []
    w = cfg[f"{name}.width"].val
    stream = _streams(cfg, st, name, machine)   # the whole row streamed: no width split
    o, i = st.split(axes[-1], factor=w) if w < extent(axes[-1]) and not stream else \
        (None, axes[-1])
    rows: list = []
    outer = axes[:-1]
    ax = row_axis(st.op)
    row = st.op.axis[ax]
    if len(st.op.axis) >= 2 and extent(row) > 1 and cfg[f"{name}.rows"].val > 1 and \
            any(a is row for a in outer):
        yo, yi = st.split(row, factor=cfg[f"{name}.rows"].val)
        outer, rows = [yo if a is row else a for a in outer], [yi]
    outer = outer + ([o] if o is not None else [])
    st.reorder(*outer, *rows, *tables, *red, i, *inner)   # lanes = independent outputs
    for t in tables + inner:
        st.unroll(t)
    if stream:
        st.stream(i)
    else:
        st.vectorize(i)
    if not outer:
        return None
    at = fuse_parallel(st, outer, par)
    if local is not None:
        _accumulate_block(s[local], st, at)
    for p in slides if rows else ():
        p.compute_at(st, rows[0])
        p.store_at(st, at)
        p.vectorize(p.op.axis[-1])
    return st, at


def _table_loops(st, axes: list) -> tuple[list, list]:
    """Stage ``st``'s coefficient-table loops (``table_axes``), a modular one split by its
    modulus (``axes``, the stage's loops, updated in place to hold the outer part): (the
    table loops to unroll outside the vector loop, those to unroll inside it)."""
    tables, inner = [], []
    for ax, mod in table_axes(st.op):
        if mod is None:
            tables.append(ax)
            continue
        k = next(j for j, a in enumerate(axes) if a is ax)
        outer, part = st.split(ax, factor=mod)
        axes[k] = outer
        (inner if k == len(axes) - 1 else tables).append(part)
    return tables, inner


def _accumulate_block(lst, st, at) -> None:
    """Local accumulator ``lst`` (of output stage ``st``) computed per iteration of ``at``:
    its reduction loops outside its vector loop (lanes = independent outputs), unrolled
    when their steps multiply to at most ``UNROLL_K``."""
    lst.compute_at(st, at)
    axes, red = list(lst.op.axis), list(lst.op.reduce_axis)
    lst.reorder(*axes[:-1], *red, axes[-1])
    lst.vectorize(axes[-1])
    steps = 1
    for r in red:
        steps *= extent(r)
    if steps <= UNROLL_K:
        for r in red:
            lst.unroll(r)
