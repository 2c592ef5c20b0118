"""How the auto scheduler reads a compute DAG (package-private; see :mod:`.auto`).

Op patterns decide the sketch, never stage names: which stages are *contractions* (a reduction
of a product of loads with two or more spatial loops worth tiling), which elementwise chains
after a contraction are its *epilogue* (and through which index map: a transpose), which
stages are row statistics of an output, which reductions want their lanes rfactored, and the
first (fallback) choice of every knob, sized from the target's vector lanes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..backends.target import Target
from ..errors import LooptuneError
from ..lang import dtype as dt
from ..lang.expr import BinKind, BinOp, Call, Const, Load, Select, Var
from ..lang.simplify import linear_terms
from ..lang.tensor import ComputeOp, PlaceholderOp
from ..lang.visitor import ExprVisitor, collect_loads, collect_vars
from ..schedule.attach import Attach
from ..schedule.loop_steps import STREAM_DTYPES

ACCUMULATORS = 16      # vectors of the fallback's register tile (fewer where the machine
                       # has fewer: Machine.accumulators) and the unroll budget's unit
OPERAND_REGISTERS = 4  # vector registers a micro-kernel keeps for what it loads per step
PANEL_VECTORS = 4      # a column panel of the fallback: this many vectors wide
WORK_PER_THREAD = 4    # parallel iterations per thread the fallback aims for
# A parallel region costs a few us while the OpenMP threads still spin (looptune's short
# spin after each region, runtime_env.py) and ~0.1 ms when they must be woken from sleep (a
# 2-core KVM guest), and the join. The fallback runs a kernel on one thread
# when its estimated single-thread time is below this many cycles (~30 us at 3 GHz).
PARALLEL_MIN_CYCLES = 100_000
UNROLL_K = 16          # micro-kernel reduction steps unrolled at most (knob unroll "tile+k")
# A register tile's rows are unrolled (innermost first) while they hold at most this many
# vectors, and its micro-kernel reduction steps while the unrolled body stays under
# UNROLL_BODY vector operations: past that the tile spills anyway, and gcc took 10-50 s to
# compile one such kernel (a 96-vector tile times 16 unrolled steps), so tuning lost those
# candidates to the build timeout.
UNROLL_VECTORS = 2 * ACCUMULATORS
UNROLL_BODY = 256
CALL_OPS = 16          # vector operations a math call (exp, erf, tanh, ...) costs, roughly
STORE_BYTES_PER_CYCLE = 4   # a stage's output written (and its inputs streamed) out of cache
PACK_MIN_STRIDE = 4096      # bytes between a panel's rows from which the fallback packs it
PREFETCH_BYTES = 2048       # how far ahead a micro-kernel asks for its vector operand
                            # (the L1 way size of x86 cores: 32 KiB / 8 ways)


@dataclass(frozen=True)
class Machine:
    """What the sketch sizes its tiles from: SIMD bytes (None for OpenCL), threads, and the
    last-level cache's bytes (None: unknown, or OpenCL), which gates streaming stores."""

    simd_bytes: int | None
    threads: int
    llc_bytes: int | None = None

    def lanes(self, dtype: str) -> int:
        if self.simd_bytes is None:
            return 1
        import numpy as np
        return max(1, self.simd_bytes // np.dtype(dtype).itemsize)

    def vector_registers(self) -> int:
        """The SIMD registers gcc has: 32 with AVX-512 (64-byte vectors), else 16 (AVX2 and
        SSE; NEON's 32 are counted as 16, a tile that is merely smaller than it could be)."""
        return 32 if (self.simd_bytes or 0) >= 64 else 16

    def accumulators(self) -> int:
        """Vectors a register tile may hold: the registers less ``OPERAND_REGISTERS`` for
        the operands loaded per step (two vectors and a broadcast, one spare), as
        ``Target.gemm_tile`` sizes the hand matmuls: 28 with AVX-512 (a 14 x 32 float tile),
        12 with AVX2 (6 x 16). A fixed 16 had spilled AVX2's tiles (all 16 ymm registers
        accumulating) and left 12 zmm registers unused with AVX-512."""
        return self.vector_registers() - OPERAND_REGISTERS

    def __str__(self) -> str:
        llc = f"-llc{self.llc_bytes}" if self.llc_bytes is not None else ""
        return f"simd{self.simd_bytes}-t{self.threads}{llc}"


def machine_of(target) -> Machine:
    """The machine the C target compiles for (vector width by ``-march``; threads by
    ``Target.threads``: ``-threads``, else ``$OMP_NUM_THREADS``, else the CPUs this process may
    use; the cache an output must outgrow to be streamed: this host's last-level cache, or
    twice the threads' L2s where that is less, as examples/blur.py measures (a VM may report a
    whole socket's L3, shared with others))."""
    tgt = Target.parse(target)
    threads = tgt.threads()
    if tgt.kind != "c":
        return Machine(None, threads)
    llc = min(tgt.cache_bytes(3), 2 * tgt.cache_bytes(2) * threads)
    try:
        return Machine(tgt.vector_lanes("int8"), threads, llc)
    except LooptuneError:
        return Machine(16, threads, llc)


# ---- patterns --------------------------------------------------------------------------------

def extent(iv) -> int:
    e = iv.extent
    return int(e.value) if isinstance(e, Const) else int(e)


def long_axes(op) -> list[int]:
    """Positions of the spatial loops longer than 1 (the ones worth tiling)."""
    return [k for k, a in enumerate(op.axis) if extent(a) > 1]


class _MulOfLoads(ExprVisitor):
    def __init__(self):
        self.found = False

    def visit_BinOp(self, e):
        if e.op is BinKind.MUL and collect_loads(e.a) and collect_loads(e.b):
            self.found = True
        super().visit_BinOp(e)


def is_contraction(op) -> bool:
    """A reduction multiplying loads, with at least two spatial loops longer than 1."""
    if not isinstance(op, ComputeOp) or not op.reduce_axis:
        return False
    if len(long_axes(op)) < 2:
        return False
    v = _MulOfLoads()
    v.visit(op.body.source)
    return v.found


class _Has(ExprVisitor):
    def __init__(self, kinds):
        self.kinds, self.found = kinds, False

    def visit(self, e):
        if isinstance(e, self.kinds):
            self.found = True
        return super().visit(e)


def _has(op, *kinds) -> bool:
    v = _Has(kinds)
    v.visit(op.body.source if op.reduce_axis else op.body)
    return v.found


def source(op):
    return op.body.source if op.reduce_axis else op.body


# ---- coefficient tables ----------------------------------------------------------------------

TABLE_EXTENT = 16      # a coefficient table's axis is at most this long
TABLE_COPIES = 64      # and a stage's table axes multiply to at most this many unrolled copies


class _EqualsConst(ExprVisitor):
    """What a select's condition compares for equality with a constant: a variable
    (``vars``), or a variable modulo a constant (``mods``: variable -> moduli)."""

    def __init__(self):
        self.vars: set = set()
        self.mods: dict = {}

    def visit_Select(self, e):
        c = e.cond
        if isinstance(c, BinOp) and c.op is BinKind.EQ:
            for v, k in ((c.a, c.b), (c.b, c.a)):
                if not isinstance(k, Const):
                    continue
                if isinstance(v, Var):
                    self.vars.add(v)
                elif isinstance(v, BinOp) and v.op is BinKind.FLOORMOD and \
                        isinstance(v.a, Var) and isinstance(v.b, Const):
                    self.mods.setdefault(v.a, set()).add(int(v.b.value))
        super().visit_Select(e)


def table_axes(op) -> list[tuple]:
    """The spatial axes of ``op`` along which it selects among constants, as ``(axis,
    modulus)``: an axis compared for equality with a constant in a select (modulus None: a
    Winograd transform's rows of coefficients, ``lt.if_then_else(lt.equal(a, 0), ...,
    lt.if_then_else(lt.equal(a, 1), ...))``, as TVM's const_matrix), with a constant extent
    of at most TABLE_EXTENT, the vector loop (the innermost axis) excepted; or an axis whose
    value modulo a constant m <= TABLE_EXTENT is (the Winograd output transform's
    ``x % m``, an output tile of m columns): split by m, its inner part is the table.
    Unrolled, every select folds to its one branch, so the stage is a few adds per element;
    left a loop, each element evaluates the chain (the auto schedule of a Winograd conv2d
    ran 5.8 ms, its hand schedule 0.76). Empty when the unrolled copies would exceed
    TABLE_COPIES."""
    if not isinstance(op, ComputeOp) or len(op.axis) < 2:
        return []
    v = _EqualsConst()
    v.visit(source(op))
    out, copies = [], 1
    for k, ax in enumerate(op.axis):
        e = extent(ax)
        mods = v.mods.get(ax.var, set())
        if ax.var in v.vars and 1 < e <= TABLE_EXTENT and k < len(op.axis) - 1:
            out.append((ax, None))
            copies *= e
        elif len(mods) == 1 and 1 < (m := next(iter(mods))) <= TABLE_EXTENT and m < e:
            out.append((ax, m))
            copies *= m
    return out if copies <= TABLE_COPIES else []


# ---- work -----------------------------------------------------------------------------------

class _OpCount(ExprVisitor):
    """Arithmetic of a body: each operator 1, a math call ``CALL_OPS``, loads free (index
    arithmetic is strength-reduced by the compiler, operands come from registers or L1)."""

    def __init__(self):
        self.ops = 0

    def visit_BinOp(self, e):
        self.ops += 1
        super().visit_BinOp(e)

    def visit_Select(self, e):
        self.ops += 1
        super().visit_Select(e)

    def visit_Call(self, e):
        self.ops += CALL_OPS
        super().visit_Call(e)

    def visit_Load(self, e):
        pass

    visit_BufferLoad = visit_Load


def work_cycles(op, machine: Machine, stored: bool = True) -> float:
    """A rough single-thread estimate of computing ``op`` vectorized: its arithmetic (two
    vector operations per cycle, one per element when ``op`` has none) plus, when it is
    ``stored`` (not inlined), its output streamed at ``STORE_BYTES_PER_CYCLE``."""
    import numpy as np
    n = math.prod(extent(a) for a in op.axis)
    r = math.prod(extent(a) for a in op.reduce_axis)
    v = _OpCount()
    v.visit(source(op))
    lanes = machine.lanes(op.output.dtype)
    arith = n * r * max(1, v.ops) / (2 * lanes)
    if not stored:
        return arith
    return arith + n * np.dtype(op.output.dtype).itemsize / STORE_BYTES_PER_CYCLE


def parallel_choices(ops, machine: Machine, inlined=()) -> list[bool]:
    """The choices of a kernel's knob ``parallel`` (first: the fallback's) for a kernel
    computing ``ops`` (``inlined``: ids of the ops the fallback inlines): parallel loops first
    only when the kernel's estimated single-thread work (:func:`work_cycles`, summed) pays
    for a parallel region (``PARALLEL_MIN_CYCLES``); no knob (``[]``: one thread) on a
    one-thread machine or for a kernel of under a tenth of that, where threads never pay."""
    work = sum(work_cycles(op, machine, id(op) not in inlined) for op in ops)
    if machine.threads < 2 or work < PARALLEL_MIN_CYCLES / 10:
        return []
    first = work >= PARALLEL_MIN_CYCLES
    return [first, not first]


@dataclass(frozen=True)
class Epilogue:
    """The elementwise output a contraction feeds: ``out`` takes the tiled loops, ``chain``
    (the stages between them) is inlined into it; ``axis_of[c]`` is ``out``'s axis that the
    contraction's axis ``c`` maps to (a transpose permutes them). An unpacking output (NCHWc
    -> NCHW: ``out[n, k, y, x] = oc[n, k // 16, y, x, k % 16]``) maps two axes of the
    contraction to one of its own: ``splits`` holds ``(e, b, c_outer, c_inner)`` for each
    such axis ``e`` of ``out``, split by ``b`` into the contraction's axes ``c_outer`` and
    ``c_inner``."""

    out: object
    chain: tuple
    axis_of: tuple[int, ...]
    splits: tuple = ()


def epilogue(s, st, out_ids, splits: bool = True) -> Epilogue | None:
    """The epilogue of contraction stage ``st``: a chain of elementwise or broadcast stages,
    each the only reader of the one before and reading it at a permutation of its own axes
    (bias, activation, scaling, transpose) or, where ``splits``, at an axis split into two
    (``k // b``, ``k % b``: unpacking a blocked layout), ending at an output. None when
    ``st`` is an output itself (outputs are computed at root) or no such chain exists."""
    if id(st.tensor) in out_ids:
        return None
    chain, cur = [], st
    # per axis c of the contraction: (the axis of the current stage, part of it), where the
    # part is None (the whole axis) or ("outer" | "inner", b)
    where = [(c, None) for c in range(len(st.op.axis))]
    while True:
        readers = s.readers(cur)
        if len(readers) != 1 or readers[0].op.reduce_axis:
            return None
        r = readers[0]
        step = _index_map(r.op, cur.tensor, splits)
        if step is None:
            return None
        nxt = []
        for a, part in where:
            p, part2 = step[a]
            if part is not None and part2 is not None:
                return None                 # an axis split twice: not one tile of it
            nxt.append((p, part or part2))
        where = nxt
        if id(r.tensor) in out_ids:
            return _epilogue_of(r, tuple(chain), where)
        chain.append(r)
        cur = r


def _epilogue_of(out, chain, where) -> Epilogue | None:
    axis_of = tuple(p for p, _ in where)
    parts: dict[int, dict] = {}
    for c, (p, part) in enumerate(where):
        if part is not None:
            parts.setdefault(p, {})[part[0]] = (c, part[1])
    splits = []
    for e, got in sorted(parts.items()):
        if set(got) != {"outer", "inner"} or got["outer"][1] != got["inner"][1]:
            return None
        splits.append((e, got["outer"][1], got["outer"][0], got["inner"][0]))
    return Epilogue(out, chain, axis_of, tuple(splits))


def _index_map(op, t, splits: bool) -> list | None:
    """Per dimension ``d`` of ``t``: ``(p, part)``, the axis ``p`` of ``op`` that indexes it
    in every load of ``t`` in ``op`` (the same map in each), ``part`` None for the axis
    itself (same extents), or, where ``splits``, ``("outer", b)`` / ``("inner", b)`` for
    ``p // b`` / ``p % b`` (both of one axis, ``t``'s dimensions ceil(extent / b) and b).
    None for any other index."""
    pos = {a.var: k for k, a in enumerate(op.axis)}
    found = None
    for ld in collect_loads(op.body):
        if ld.tensor is not t:
            continue
        m = []
        for i in ld.indices:
            if isinstance(i, Var) and i in pos:
                m.append((pos[i], None))
            elif splits and getattr(i, "op", None) in (BinKind.FLOORDIV, BinKind.FLOORMOD) \
                    and isinstance(i.a, Var) and i.a in pos and isinstance(i.b, Const) \
                    and int(i.b.value) > 1:
                part = "outer" if i.op is BinKind.FLOORDIV else "inner"
                m.append((pos[i.a], (part, int(i.b.value))))
            else:
                return None
        if found is not None and m != found:
            return None
        found = m
    if found is None or len(found) != len(t.shape):
        return None
    whole = [p for p, part in found if part is None]
    split = [(p, part) for p, part in found if part is not None]
    if len(set(whole)) != len(whole) or set(whole) & {p for p, _ in split} or \
            len(set(split)) != len(split):
        return None
    used = set(whole) | {p for p, _ in split}
    if len(used) != len(op.axis) or any(extent(a) == 0 for a in op.axis):
        return None
    for d, (p, part) in enumerate(found):
        e = extent(op.axis[p])
        if part is None:
            want = e
        elif part[0] == "outer":
            want = -(-e // part[1])
        else:
            want = part[1]
        if _dim(t, d) != want:
            return None
    return found


def _dim(t, d: int) -> int:
    e = t.shape[d]
    return int(e.value) if isinstance(e, Const) else int(e)


def is_transposing(op) -> bool:
    """Some load reads along another axis than the op's innermost: 2-D tiles help."""
    return transposed_axis(op) is not None


def transposed_axis(op) -> int | None:
    """The axis (not the innermost) that the innermost index of some load follows, when that
    index does not follow the op's innermost axis: a transpose's 2-D tile pairs the two
    (NCHW16c -> NCHW reads ``in[c // 16, y, x, c % 16]``: the tile is c x x, not y x x)."""
    if not op.axis or len(op.axis) < 2:
        return None
    last = op.axis[-1].var
    pos = {a.var: k for k, a in enumerate(op.axis[:-1])}
    for ld in collect_loads(source(op)):
        if not ld.indices:
            continue
        inner = collect_vars(ld.indices[-1])
        if last in inner or not any(last in collect_vars(i) for i in ld.indices[:-1]):
            continue
        found = [pos[v] for v in inner if v in pos and extent(op.axis[pos[v]]) > 1]
        return max(found) if found else len(op.axis) - 2
    return None


def row_axis(op) -> int:
    """The axis a stage's 2-D tiles split next to its innermost (knob ``rows``): the one a
    transpose reads along (:func:`transposed_axis`), else the second innermost."""
    t = transposed_axis(op)
    return t if t is not None else len(op.axis) - 2


def materialize_first(s, st) -> bool:
    """The fallback keeps injective stage ``st`` at root (else inlined): a padding (a guarded
    read) feeding a reduction (a contraction, a pooling), whose inner loop would test the
    guard at every step of its window; a coefficient table (``table_axes``); or a costly
    row-wise value (a math call) read by two stages, which inlining computes twice."""
    readers = s.readers(st)
    if _has(st.op, Select) and any(r.op.reduce_axis for r in readers):
        return True
    if table_axes(st.op):      # inlined, its table axes would be its reader's index
        return True            # expressions, and its selects would no longer fold
    return len(readers) >= 2 and _has(st.op, Call)


def feeds_one_reduction(s, st):
    """The reduction stage (a contraction, or a window reduction as a pooling's) that alone
    reads padding ``st`` (a guarded read), else None: such a padding may be computed per
    parallel iteration of its reader."""
    readers = s.readers(st)
    if _has(st.op, Select) and len(readers) == 1 and readers[0].op.reduce_axis:
        return readers[0]
    return None


def slides_along_rows(s, st):
    """The one reader of injective stage ``st`` that reads it through a window of rows, as
    blur_y reads blur_x's rows y, y + 1 and y + 2 (a 1-D stencil along the reader's row
    axis, ``row_axis``: each load's index in one dimension is the row variable plus a
    constant, at least two constants, the row variable in no other index), else None. Such
    a producer may be computed per row of the reader and stored per parallel strip
    (store_at: each row computed once per strip, not once per reading row)."""
    readers = s.readers(st)
    if len(readers) != 1 or st.is_output:
        return None
    r = readers[0]
    op = r.op
    if not isinstance(op, ComputeOp) or op.reduce_axis or len(op.axis) < 2 or \
            is_contraction(op):
        return None
    row = op.axis[row_axis(op)].var
    offsets: set[int] = set()
    dims: set[int] = set()
    for ld in collect_loads(op.body):
        if ld.tensor is not st.tensor:
            continue
        for d, idx in enumerate(ld.indices):
            if row not in collect_vars(idx):
                continue
            terms, c = linear_terms(idx)
            if terms != {row: 1}:
                return None
            dims.add(d)
            offsets.add(c)
    return r if len(dims) == 1 and len(offsets) >= 2 else None


def reads_along_row_tiles(op, producer, plan: TilePlan) -> bool:
    """Whether contraction ``op`` reads ``producer`` (the op of a padding or pack) along each
    tiled loop but the vector loop, as a depthwise conv reads the padding of its own channel
    and rows: the producer computed per parallel iteration is then a window of the
    iteration's few channels and rows (which stays in cache). Where some tiled loop does
    not index it (a conv reading every input channel; NCHWc weights, the same for every
    row tile), each parallel iteration along that loop would compute the same window again:
    NCHWc weights packed per tile (28 times over) ran 0.71 ms against 0.62 at root
    (examples/conv2d.py's layer, 2 threads, Zen 5)."""
    rows = {c for c in plan.tiled if c != plan.vec}
    return any(ld.tensor.op is producer and rows <= set(axes) for ld, axes in _uses(op))


def row_consumers(s, stages, outputs, fused) -> dict:
    """Stages that may be computed per row of an output (knob ``<stage>.at``), mapped to it:
    row statistics and row-wise intermediates (softmax's max, exponentials and sum; a
    normalisation's mean and variance) of an elementwise output, the only output reading
    them, whose shape is theirs plus a last axis, or theirs."""
    out = {}
    cpu_outputs = [s[t] for t in outputs]
    for st in stages:
        if st.is_output or id(st) in fused or is_contraction(st.op):
            continue
        below = downstream(s, st)
        readers = [o for o in cpu_outputs if id(o) in below]
        if len(readers) != 1:
            continue
        o = readers[0]
        if o.op.reduce_axis or id(o) in fused or len(o.op.axis) < 2:
            continue
        shape, oshape = [extent(a) for a in st.op.axis], [extent(a) for a in o.op.axis]
        if shape in (oshape, oshape[:-1]):
            out[id(st)] = o
    return out


def downstream(s, st) -> set[int]:
    """Ids of the stages that read ``st``, directly or through other stages."""
    out: set[int] = set()
    stack = [st]
    while stack:
        for r in s.readers(stack.pop()):
            if id(r) not in out:
                out.add(id(r))
                stack.append(r)
    return out


def readers_through_inlined(s, st) -> list:
    """The stages reading ``st``, looking through inlined ones."""
    out = []
    for r in s.readers(st):
        out += readers_through_inlined(s, r) if r.attach is Attach.INLINE else [r]
    return out


def may_stream(op, output: bool, llc_bytes: int | None) -> bool:
    """The streaming-store rule (knob ``<stage>.stream``, False first): an output stage,
    elementwise (written once), float32/float64, vectorized along its contiguous last axis,
    whose output is larger than the last-level cache (``llc_bytes``, the task's machine's:
    part of the auto task's name, so a log tuned on a machine with another cache is another
    task), so that its lines would be evicted before anyone reads them: streaming stores save
    their read-for-ownership (the destination's lines are not read before being written)."""
    if llc_bytes is None or not output or op.reduce_axis or not op.axis or \
            extent(op.axis[-1]) < 2 or op.output.dtype not in STREAM_DTYPES:
        return False
    size = math.prod(extent(a) for a in op.axis) * dt.itemsize(op.output.dtype)
    return size > llc_bytes


# ---- knob choices ----------------------------------------------------------------------------

def choices(first, *rest, limit: int | None = None) -> list:
    """``first`` then ``rest`` without repeats (ints above ``limit`` dropped, not ``first``)."""
    out = [first]
    for v in rest:
        if v not in out and (limit is None or not isinstance(v, int) or v <= limit):
            out.append(v)
    return out


def lanes_first(op, lanes: int) -> bool:
    """The rfactor rule: a reduction whose (last) reduction loop runs along the contiguous
    dimension of what it reads (a row norm, a GEMV against a transposed weight, a global
    pool), or whose output is too narrow to fill a vector, accumulates ``lanes`` partial
    results in a vector, then combines them."""
    if not op.reduce_axis or extent(op.reduce_axis[-1]) < 2 * lanes or lanes < 2:
        return False
    r = op.reduce_axis[-1].var
    last = op.axis[-1].var if op.axis else None
    if not op.axis or extent(op.axis[-1]) < lanes:
        return True
    for ld in collect_loads(op.body.source):
        if ld.indices and r in collect_vars(ld.indices[-1]) and \
                last not in collect_vars(ld.indices[-1]):
            return True
    return False


@dataclass
class TilePlan:
    """A contraction's tiling: the loops tiled, the one vectorized, and each knob's
    choices (first: the fallback). ``inner[c]``: register-tile sizes of axis ``c``;
    ``middle[c]``: tiles per iteration of the parallel loop ("all": no parallel split);
    ``red[k]``: inner sizes of reduction loop ``k``; ``pack``: operands to copy into a
    contiguous panel ("none" first when none is worth it)."""

    tiled: list[int]
    vec: int
    inner: dict
    middle: dict
    red: list
    pack: list
    order: tuple          # the register tile's loops as the micro-kernel nests them
    accumulators: int     # vectors a tile may hold in registers
    lanes: int = 1
    stream_operand: str | None = None    # read along the vector loop, no row loop (B)


def plan_tiles(op, machine: Machine) -> TilePlan:
    """The tiling of contraction ``op`` (see :class:`TilePlan`). The fallback's register
    tile holds ``ACCUMULATORS`` (16) vectors, or the machine's accumulators where fewer (12
    with AVX2), and a knob value every accumulator register (28 with AVX-512: a 14 x 32
    float matmul tile). Where the vector loop holds one vector (an NCHWc channel block), a
    row loop the vector operand depends on gives the second (``_second_vector_row``) and
    the fallback takes every accumulator. Measured on the fallbacks, one Ice Lake core, the
    28-vector tile as the fallback: batch_matmul and conv2d_nchwc 13% faster, conv2d (NCHW)
    19% and matmul_relu 7% slower, so elsewhere it is a choice for the tuner, not the first.
    The tile is two vectors along the vector loop (one where it is short), rows along the
    loop that the vector operand does not read, so that each vector loaded is reused by every
    row; the parallel loop gets ``WORK_PER_THREAD`` iterations per thread, from column panels
    first, then from the outer rows."""
    L = machine.lanes(op.output.dtype)
    tiled = long_axes(op)
    v = tiled[-1]
    ext = {c: extent(op.axis[c]) for c in tiled}
    tv = _vector_tile(ext[v], L)
    vec_uses = _vector_uses(op, v)
    rows = _row_preference(op, tiled, v, vec_uses)
    acc = machine.accumulators()
    second = _second_vector_row(rows, ext, vec_uses) if tv <= L else None
    full = _tile_with(rows, ext, acc * L // max(tv, L), second)    # every accumulator
    # the fallback: ACCUMULATORS vectors, or every accumulator where a row loop gives the
    # second vector (NCHWc's 2 blocks x 14 columns, 28 zmm: 0.539 ms against 0.581 for 2 x
    # 8 and 0.656 for the former 16 rows of 1 block, Zen 5, the 56 x 56 layer; the hand
    # schedule's tile, also measured best as a fallback on Ice Lake, plan_tiles' doc)
    t = dict(full) if second is not None else \
        _row_tile(rows, ext, min(ACCUMULATORS, acc) * L // max(tv, L))
    t[v] = tv
    inner = {v: choices(tv, L, 2 * L, 3 * L, 4 * L, L // 2, ext[v] if ext[v] < L else 0,
                        limit=ext[v])}
    inner[v] = [x for x in inner[v] if x > 0]
    budgets = {acc, acc // 2, acc // 4, min(ACCUMULATORS, acc), min(ACCUMULATORS, acc) // 2}
    for c in rows:
        fits = sorted({_divisor_within(ext[c], b) for b in budgets} - {0}, reverse=True)
        inner[c] = choices(t[c], 1, 2, 4, 6, 8, 12, 16, full[c], *fits, limit=ext[c])
    most = {c: math.ceil(ext[c] / min(inner[c])) for c in tiled}    # tiles at most
    mv = min(max(1, PANEL_VECTORS * L // tv), most[v])
    middle = {v: choices(mv, 1, 2, 4, 8, 16, limit=most[v])}
    work = math.ceil(math.ceil(ext[v] / tv) / mv)
    want = WORK_PER_THREAD * machine.threads
    for c in sorted(rows):                   # outer loops first
        tiles = math.ceil(ext[c] / t[c])
        m = "all"
        if work < want:
            m = max(1, tiles // math.ceil(want / work))
            work *= math.ceil(tiles / m)
        middle[c] = choices(m, "all", 1, 2, 4, 8, 16, 32, limit=most[c])
    red = [choices(1, 2, 4, 8, 16, 64, 128, 256, *_whole(extent(r)), limit=extent(r))
           for r in op.reduce_axis]
    ahead = prefetch_ahead(max(inner[v]), op.output.dtype)      # the shortest distance
    streamed = _vector_operand(op, rows, v) if op.reduce_axis and \
        extent(op.reduce_axis[-1]) >= 2 * ahead else None
    return TilePlan(tiled, v, inner, middle, red, _pack_choices(op, rows, v),
                    order=_tile_order(tiled, v, vec_uses), accumulators=acc, lanes=L,
                    stream_operand=streamed)


def _tile_order(tiled, v, vec_uses: set[int]) -> tuple[int, ...]:
    """The register tile's loops, outer to inner, as the micro-kernel nests them: the rows
    that only the broadcast operand depends on outside, the rows the vector operand depends
    on (a second channel block of NCHWc weights) inside them, next to the vector loop, so
    that each broadcast value feeds every vector of its row while it is in a register, as
    the hand schedule of examples/conv2d.py nests them (there, with the blocks outermost, gcc
    reloaded the broadcasts per block: 1.31 against 0.70 ms; in the auto sketch's unrolled
    tiles the two orders measured alike on Zen 5)."""
    rows = [c for c in tiled if c != v]
    return tuple([c for c in rows if c not in vec_uses] + [c for c in rows if c in vec_uses]
                 + [v])


def _second_vector_row(rows, ext: dict, vec_uses: set[int]) -> int | None:
    """Where the vector loop holds one vector only (NCHWc's 16 lanes of a channel block),
    the row loop that gives the tile its second vector of the streamed operand, as a matmul
    tile has two along its columns: the innermost row loop the vector operand depends on
    (the next channel block of NCHWc weights; the next input row of an NCHW conv whose
    width is one vector: 14 x 14 x 256 layer, fallback 3.15-3.47 -> 2.47 ms, 28 x 28 x 128
    1.07-1.21 -> 1.08, Zen 5), so that each broadcast feeds two FMAs."""
    cands = [c for c in rows if c in vec_uses and ext[c] >= 2]
    return max(cands) if cands else None


def _tile_with(rows, ext: dict, budget: int, second: int | None) -> dict:
    """``_row_tile`` with two rows of ``second`` (when given) and half the budget for the
    other rows."""
    if second is None:
        return _row_tile(rows, ext, budget)
    t = _row_tile([c for c in rows if c != second], ext, max(1, budget // 2))
    t[second] = 2
    return t


def _divisor_within(e: int, budget: int) -> int:
    """The largest divisor of ``e`` within ``budget`` rows that is more than half of it (a
    tile with no tail: 14 or 28 of 56 columns, a 14 x 2-block NCHWc conv tile), else 0."""
    for d in range(min(e, budget), budget // 2, -1):
        if d > 2 and e % d == 0:
            return d
    return 0


def _row_tile(rows, ext: dict, budget: int) -> dict:
    """Rows of a register tile of at most ``budget`` row vectors, the innermost row loop
    first."""
    t = {}
    budget = max(1, budget)
    for c in rows:
        t[c] = max(1, min(budget, ext[c]))
        budget = max(1, budget // t[c])
    return t


def prefetch_ahead(tile: int, dtype: str) -> int:
    """Steps of the micro-kernel's reduction loop that ``PREFETCH_BYTES`` of a vector tile
    of ``tile`` elements span (at least one)."""
    return max(1, PREFETCH_BYTES // max(1, tile * dt.itemsize(dtype)))


def _vector_operand(op, rows, v) -> str | None:
    """The tensor the micro-kernel streams vectors of: read along the vector loop ``v`` and
    no row loop (B of a matmul), each of its vectors reused by every row of the tile (a
    prefetch candidate where the reduction is long enough to run ahead in)."""
    for ld, used in _uses(op):
        if v in used and not used & set(rows) and op.reduce_axis and any(
                r.var in collect_vars(i) for r in op.reduce_axis for i in ld.indices):
            return ld.tensor.name
    return None


def _whole(e: int) -> list[int]:
    """A short reduction loop (a 3x3 window's) may be a micro-kernel loop whole, unrolled."""
    return [e] if e <= UNROLL_K else []


def _vector_tile(e: int, L: int) -> int:
    if e < L:
        return e
    if e < 2 * L:
        return L
    waste = {t: -(-e // t) * t - e for t in (2 * L, L)}
    return 2 * L if waste[2 * L] <= waste[L] else L


def _uses(op) -> list[tuple[Load, set[int]]]:
    pos = {a.var: k for k, a in enumerate(op.axis)}
    out = []
    for ld in collect_loads(op.body.source):
        vs = set().union(*(collect_vars(i) for i in ld.indices)) if ld.indices else set()
        out.append((ld, {pos[x] for x in vs if x in pos}))
    return out


def _vector_uses(op, v) -> set[int]:
    """The axes of ``op`` that the loads read along its vector loop ``v`` depend on."""
    uses = _uses(op)
    return set().union(*(u for _, u in uses if v in u)) if uses else set()


def _row_preference(op, tiled, v, vec_uses: set[int]) -> list[int]:
    """The tiled loops other than ``v``, those no vector load depends on first (largest
    first; of equal ones the inner: NCHWc's columns, whose broadcasts lie 64 bytes apart,
    before its rows: 2 blocks x 14 columns 0.539 ms, x 14 rows 0.574, Zen 5), then the
    others (``vec_uses``: the axes the vector loads depend on, ``_vector_uses``)."""
    rows = [c for c in tiled if c != v]
    reuse = sorted((c for c in rows if c not in vec_uses),
                   key=lambda c: (-extent(op.axis[c]), -c))    # ties: the inner loop first
    return reuse + [c for c in reversed(rows) if c not in reuse]


def _pack_choices(op, rows, v) -> list[str]:
    """Placeholders the contraction reads directly, by name: first the one read along the
    vector loop and no row loop (B of a matmul) when its micro-kernel rows lie
    ``PACK_MIN_STRIDE`` bytes apart or more (each row in its own page, every row in the same
    L1 sets: a panel is worth copying), else "none" first. Measured (one Zen 4 core): the
    MLP's B (16 KiB rows) 7.4 ms packed vs 15.5 unpacked; a transformer's 1 KiB rows 160 vs
    150 us; the NCHWc conv weights of a small CNN (64-byte rows: the panel is a copy of
    contiguous memory) 16.7 vs 5.9 us."""
    names, best = [], None
    for ld, used in _uses(op):
        t = ld.tensor
        if not isinstance(t.op, PlaceholderOp) or t.name in names or len(t.shape) < 2:
            continue
        names.append(t.name)
        if best is None and v in used and not used & set(rows) and \
                _row_stride(op, ld) >= PACK_MIN_STRIDE:
            best = t.name
    return choices(best, "none", *names) if best else choices("none", *names)


def _row_stride(op, ld) -> int:
    """Bytes between the elements of ``ld`` that consecutive steps of ``op``'s innermost
    reduction loop read (the largest stride of a dimension it indexes)."""
    import numpy as np
    r = op.reduce_axis[-1].var
    shape = [_dim(ld.tensor, d) for d in range(len(ld.tensor.shape))]
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    item = np.dtype(ld.tensor.dtype).itemsize
    return max((strides[d] * item for d, i in enumerate(ld.indices) if r in collect_vars(i)),
               default=0)
