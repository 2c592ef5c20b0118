"""Template-free auto scheduling: a config space generated from the compute DAG alone.

```python
s = lt.search.auto_schedule([A, B, C], trials=200, log_file="auto.jsonl")
f = lt.build(s, [A, B, C])
```

:func:`auto_task` turns the build arguments (placeholders and outputs, in call order) into a
:class:`~looptune.search.task.Task` whose template is a *sketch* of each stage, after Ansor's
rules. Op patterns decide (:mod:`.auto_rules`), the CPU rules apply them (:mod:`.auto_cpu`):

- an injective (reduction-free) intermediate stage is inlined into its readers or computed at
  root (knob ``<stage>.inline``); one that its only reader reads through a window of rows
  (a stencil: blur_x's rows y..y + 2 for blur_y's row y) may instead be computed per row of
  the reader's strips and stored per strip (knob ``<stage>.slide``, False first: store_at,
  each row computed once per strip into a buffer folded to the window; the reader needs
  ``rows`` > 1). First choice of ``inline``: inlined, except a padding feeding a
  reduction, or a math-heavy value read twice, as softmax's exponentials); a padding that
  only a tiled contraction (or a pooling, below) reads may instead be computed per parallel
  iteration of its tiles
  (knob ``<stage>.at``: ``root``, or ``tile``: only the window the iteration reads, its
  halo computed again by the neighbouring iteration, written while it stays in cache;
  ``tile`` first where the contraction reads it along each tiled loop but the vector
  loop, as a depthwise conv reads its own channel and rows, whose window is then a few
  channels, not every one; NCHWc weights, the same for every row tile, at root first);
- a *contraction* (a reduction whose body multiplies loads, with at least two spatial loops
  longer than 1: matmul, batch matmul, conv2d) gets multi-level tiling, S-R-S-R-S: each tiled
  loop split into parallel, middle and register levels (knobs ``tile<k>``: register tile,
  ``mid<k>``: tiles per parallel iteration), each reduction loop into a K-block and a
  micro-kernel loop (``red<k>``; a short loop, a 3x3 window's, may be whole); the register
  tile accumulates in a ``local`` cache_write buffer (``cache``) computed per tile, or per
  parallel iteration with the K-blocks outside the middle tiles (``order``: "tile" /
  "kblock"); its rows unrolled (``unroll``, also the micro-kernel's K loops, innermost first,
  up to 16 steps), its vector loop vectorized; an operand may be packed into a
  contiguous panel (``pack``: ``cache_read`` at the parallel loop or the K-block);
- an *epilogue*: a chain of elementwise/broadcast stages after a contraction (bias, then
  activation, scaling; a transpose, through its index map), each the only reader of the one
  before, ending at an output: the chain is inlined into the output, which takes the tiled
  loops, and the contraction is computed per tile into it; a contraction that is an output
  itself keeps its own tiles, and what reads it runs as its own stage;
- a row statistic or row-wise intermediate (softmax's max, exponentials and sum; a
  normalisation's mean and variance) may be computed per row of the elementwise output that
  alone reads it (``<stage>.at``: ``row`` first, or ``root``); the output then runs row by row,
  rows in parallel;
- the rfactor rule: a reduction along contiguous memory (row norms, a GEMV against a
  transposed weight, global pools) or with a narrow output accumulates vector-wide partials
  (``<stage>.lanes``: lanes of an rfactor, 1 for none), then combines them;
- any other stage (elementwise, transpose, pooling, stencils): the innermost spatial loop split
  by a vector width (``width``; tails allowed) and vectorized — inside the reduction, where
  there is one, so the lanes are independent outputs (``vec``) — the loop above it split too
  for 2-D tiles (``rows``; a transpose's first choice), the outer loops fused and parallel;
  a window reduction (a pooling) may accumulate its block of outputs in a local buffer per
  parallel iteration, window loops outside the vector loop (``cache``: True first; the
  whole row as ``width`` first when it is at most 4 vectors), and the padding it alone reads
  is then computed per parallel iteration too (``<pad>.at``: ``tile`` first);
- a *coefficient table* (a stage selecting among constants along an axis, as a Winograd
  transform's rows of coefficients: ``lt.if_then_else(lt.equal(a, 0), ...)`` chains, or along
  an axis modulo m, as its output transform's ``x % m``; ``auto_rules.table_axes``) is kept
  at root (never inlined), its table loops unrolled right outside the vector loop (a modular
  one split by m: its inner part unrolled inside the vector loop, the outer part vectorized),
  so every select folds to one branch;
- threads (knob ``parallel``, one per kernel): the parallel loops above, or none; first
  choice: parallel only when the kernel's estimated single-thread work pays for an OpenMP
  region, so that a small model's kernels do not each wake the threads for a few
  microseconds of work; a tiny kernel, or a one-thread machine, has no knob and no threads
  (:func:`~looptune.search.auto_rules.parallel_choices`).

Register tiles, panels and widths are sized from the target's vector lanes
(``Target.vector_lanes``) and the parallel loop from its threads: the task is named
``auto_<digest of the DAG, sketch version and machine>``, so a log of one definition resumes
and applies to the same definition on the same kind of machine only; worker processes get the
DAG itself (pickled), as no module defines it.

For an OpenCL target (``auto_task(tensors, target="opencl")``) each root stage instead gets
one work-item per output element (:mod:`.auto_gpu`).

The first choice of every knob gives a valid schedule (the fallback, meant to be a good one:
the graph compiler builds it for every fused group it has no tuning record for); other
combinations that the schedule primitives refuse are recorded as invalid candidates.
Canonical configs (:mod:`.programs`) make each program one config, measured once.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..backends.target import Target
from ..errors import LooptuneError, ScheduleError
from ..lang.tensor import ComputeOp, PlaceholderOp, Tensor
from ..schedule.attach import Attach
from ..schedule.schedule import Schedule, create_schedule, topo_ops
from . import auto_cpu as cpu
from . import auto_gpu as gpu_rules
from .auto_rules import (
    Machine,
    epilogue,
    is_contraction,
    machine_of,
    feeds_one_reduction,
    materialize_first,
    parallel_choices,
    plan_tiles,
    readers_through_inlined,
    reads_along_row_tiles,
    row_consumers,
    slides_along_rows,
    table_axes,
)
from .task import Task
from .template import DagTemplate, find_template, register
from .tuners import make_tuner, tuner_class

SKETCH_VERSION = 15    # 2: row statistics computed per row of their output
                      # 3: epilogue chains (contraction -> bias -> activation)
                      # 4: multi-level tiling, packing, the rfactor rule, sized by the machine
                      # 5: knob 'parallel' (small kernels on one thread)
                      # 6: a transpose's 2-D tile pairs the axis its load reads along
                      # 7: a padding per parallel tile of its conv (knob <pad>.at), whole
                      #    short reduction loops; the LLC size that gates streaming stores
                      #    is the task machine's (in the task name), not the host's
                      # 8: a row sum fused into its source's loop (knob <stage>.with)
                      # 9: register-tile rows and micro-kernel steps unrolled within a
                      #    budget (UNROLL_VECTORS, UNROLL_BODY), not whole; a depthwise
                      #    conv's padding per parallel tile first (<pad>.at "tile"); a
                      #    pooling's padding per parallel iteration and its rows in a
                      #    local accumulator (<stage>.cache)
                      # 10: a fallback register tile within the machine's accumulators
                      #    (registers less 4: 12 with AVX2, where 16 spilled), and a tile
                      #    of all of them (28 with AVX-512) among the row knobs' values
                      # 11: unpacking epilogues (NCHWc -> NCHW) fused into the tiles; the
                      #    register tile's vector-operand rows innermost; row tiles that
                      #    divide the loop (14, 28 of 56); a pack per tile first only
                      #    where it is read along every row tile
                      # 12: a stencil producer read through a window of its reader's rows
                      #    may be computed per row and stored per parallel strip
                      #    (<stage>.slide: store_at, each row computed once per strip)
                      # 13: the streamed operand's prefetch unclamped (bound="nonfaulting")
                      # 14: coefficient tables (selects on an axis, or an axis modulo m,
                      #    equal to constants) unrolled so the selects fold, kept at root
                      # 15: ... and never inlined (knob <table>.inline has one value)

# ---- the DAG ---------------------------------------------------------------------------------

def _check_args(tensors) -> list[Tensor]:
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence) or not tensors:
        raise LooptuneError("auto_schedule: pass the build arguments as a list of tensors "
                            "(placeholders and outputs, in call order), e.g. [A, B, C]; got "
                            f"{tensors!r}")
    out = list(tensors)
    for k, t in enumerate(out):
        if not isinstance(t, Tensor):
            raise LooptuneError(f"auto_schedule: argument {k} is {type(t).__name__} "
                                f"{t!r}, not a tensor; pass lt.placeholder/lt.compute results")
        for s in t.shape:
            if not isinstance(s, int) and not isinstance(getattr(s, "value", None), int):
                raise LooptuneError(f"auto_schedule: tensor '{t.name}' has the symbolic size "
                                    f"{s}; a tuning task needs concrete sizes (define the "
                                    "tensors with integer shapes)")
    outputs = [t for t in out if not isinstance(t.op, PlaceholderOp)]
    if not outputs:
        raise LooptuneError("auto_schedule: the arguments hold no computed tensor; add the "
                            "output (an lt.compute result) to the list")
    given = {id(t) for t in out}
    for op in topo_ops(outputs):
        if isinstance(op, PlaceholderOp) and id(op.output) not in given:
            raise LooptuneError(f"auto_schedule: placeholder '{op.output.name}' is read by "
                                f"the computation but is not among the arguments; add it to "
                                "the list")
    return out


def _sketch_of(outputs) -> int:
    """The sketch version that names a DAG's task: SKETCH_VERSION, but 13 for a DAG without
    a coefficient table (sketches 14 and 15 changed only their spaces, so the logs of every
    other task still apply)."""
    has_table = any(isinstance(op, ComputeOp) and table_axes(op) for op in topo_ops(outputs))
    return SKETCH_VERSION if has_table else 13


def dag_digest(tensors: Sequence[Tensor], machine: Machine | None = None) -> str:
    """A digest of the computation (ops in order: names, shapes, dtypes, bodies) and of the
    argument order: equal for equal definitions, in any process. With ``machine`` (what the
    tiles are sized for), a task name: another vector width or thread count is another
    space."""
    outputs = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
    lines = []
    ids = {}
    for op in topo_ops(outputs):
        ids[id(op)] = len(ids)
        t = op.output
        body = str(op.body) if isinstance(op, ComputeOp) else "placeholder"
        red = [(str(r.var.name), str(r.min), str(r.extent)) for r in
               getattr(op, "reduce_axis", ())]
        lines.append(f"{t.name}|{list(t.shape)}|{t.dtype}|{body}|{red}")
    lines.append("args:" + ",".join(str(ids.get(id(t.op), -1)) for t in tensors))
    lines.append(f"sketch:{_sketch_of(outputs)}")   # a new sketch's space: a new task
    if machine is not None:
        lines.append(f"machine:{machine}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


# ---- the sketch ------------------------------------------------------------------------------

def _knob_prefix(name: str, used: set[str]) -> str:
    base, k = name, 1
    while name in used:
        k += 1
        name = f"{base}{k}"
    used.add(name)
    return name


def sketch(cfg, tensors: list[Tensor], gpu: bool = False,
           machine: Machine | None = None) -> tuple[Schedule, list[Tensor]]:
    """The auto template: a schedule of ``tensors``' computation for config ``cfg``
    (``gpu``: bound to OpenCL work-groups and work-items instead of parallel/vector loops;
    ``machine``: vector width and threads the tiles are sized for, the C target's default).

    Every knob is defined before any is read (a config space is the same for every config),
    from the compute ops' loops; then the choices are applied."""
    machine = machine or machine_of("opencl" if gpu else "c")
    outputs = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
    plan = _plan(create_schedule(outputs), outputs, gpu, machine)
    _define_knobs(cfg, plan)
    _apply_choices(cfg, plan)
    return plan.s, tensors


@dataclass
class _Plan:
    """What the sketch rules make of a schedule's stages, before any knob is read."""

    s: Schedule
    gpu: bool
    machine: Machine
    stages: list            # the compute stages, producers first
    names: dict             # id(stage) -> its knobs' prefix
    epis: dict              # id(contraction) -> its Epilogue
    chained: list           # epilogue stages, inlined into their output
    fused: set              # ids of epilogue outputs and chained stages
    inlinable: list         # injective intermediates (knob <stage>.inline)
    rooted: list            # stages scheduled at root, consumers first
    per_row: dict           # id(stage) -> the output it may be computed per row of
    plans: dict             # id(contraction) -> its TilePlan (C target)
    inline_first: dict      # id(inlinable stage) -> the fallback inlines it
    threads: list           # the knob 'parallel''s choices (none: no knob)
    tile_fed: dict          # id(padding stage) -> the tiled contraction stage, its one reader
    slide_fed: dict         # id(stencil producer) -> its one reader, read through row windows
    lanes: set = field(default_factory=set)   # stages with a knob <stage>.lanes (rfactor)
    ahead: set = field(default_factory=set)   # row outputs with a knob <stage>.ahead


def _plan(s: Schedule, outputs: list[Tensor], gpu: bool, machine: Machine) -> _Plan:
    out_ids = {id(t) for t in outputs}
    stages = [st for st in s.stages if isinstance(st.op, ComputeOp)]
    used: set[str] = set()
    names = {id(st): _knob_prefix(st.name, used) for st in stages}
    epis = {id(st): e for st in stages if is_contraction(st.op)
            and (e := epilogue(s, st, out_ids, splits=not gpu)) is not None}
    chained = [c for e in epis.values() for c in e.chain]
    fused = {id(e.out) for e in epis.values()} | {id(c) for c in chained}
    inlinable = [st for st in stages if id(st.tensor) not in out_ids and not st.op.reduce_axis
                 and id(st) not in fused]
    rooted = [st for st in reversed(stages) if id(st) not in fused]
    per_row = {} if gpu else row_consumers(s, stages, outputs, fused)
    plans = {id(st): plan_tiles(st.op, machine) for st in rooted
             if not gpu and is_contraction(st.op)}
    inline_first = {id(st): not materialize_first(s, st) for st in inlinable}
    inlined = {id(c.op) for c in chained} | {id(st.op) for st in inlinable
                                             if inline_first[id(st)]}     # by the fallback
    threads = [] if gpu else parallel_choices([st.op for st in stages], machine, inlined)
    tile_fed = {id(st): r for st in inlinable if id(st) not in per_row
                and (r := feeds_one_reduction(s, st)) is not None
                and (id(r) in plans or (not gpu and id(r) not in per_row
                                        and id(r) not in fused))}
    slide_fed = {} if gpu else {
        id(st): r for st in inlinable if id(st) not in per_row and id(st) not in tile_fed
        and (r := slides_along_rows(s, st)) is not None and id(r) not in per_row
        and id(r) not in fused and id(r) not in plans}
    return _Plan(s, gpu, machine, stages, names, epis, chained, fused, inlinable, rooted,
                 per_row, plans, inline_first, threads, tile_fed, slide_fed)


def _define_knobs(cfg, p: _Plan) -> None:
    """Define every knob, in a fixed order (the config space's), and note in ``p.lanes``
    the stages that got a knob ``<stage>.lanes``."""
    for st in p.inlinable:
        first = p.inline_first[id(st)]
        table = bool(table_axes(st.op))
        # a coefficient table stays at root: inlined, its selects would no longer fold (and
        # inlined into a contraction's unrolled micro-kernel, a Winograd input transform
        # made 4 MB of C that took 100 s to compile)
        cfg.define_knob(f"{p.names[id(st)]}.inline", [first] if table else [first, not first])
        if id(st) in p.slide_fed:
            cfg.define_knob(f"{p.names[id(st)]}.slide", [False, True])
        if id(st) in p.tile_fed:
            r = p.tile_fed[id(st)]
            at = ["tile", "root"] if (id(r) not in p.plans or reads_along_row_tiles(
                r.op, st.op, p.plans[id(r)])) and not table else ["root", "tile"]
            # (a coefficient table at root: per tile its table loops may start at a tile's
            # offset, where its selects no longer fold)
            cfg.define_knob(f"{p.names[id(st)]}.at", at)
    for st in p.stages:
        if id(st) in p.per_row and cpu.row_knobs(cfg, st.op, p.names[id(st)], p.machine,
                                                 cpu.row_source(p.s, st, p.per_row)):
            p.lanes.add(id(st))
    row_outputs = {id(o) for o in p.per_row.values()}
    for st in p.rooted:
        name = p.names[id(st)]
        if id(st) in row_outputs and p.threads and any(
                isinstance(t.op, PlaceholderOp) for r in p.stages
                if p.per_row.get(id(r)) is st for t in r.op.inputs):
            cfg.define_knob(f"{name}.ahead", [1, 0])   # rows its row passes prefetch ahead
            p.ahead.add(id(st))
        if p.gpu:
            gpu_rules.gpu_knobs(cfg, st.op, name, is_contraction(st.op) and id(st) not in p.epis)
        elif id(st) in p.plans:
            cpu.contraction_knobs(cfg, name, p.plans[id(st)], id(st) in p.epis)
        elif cpu.simple_knobs(cfg, st.op, name, p.machine, lanes=id(st) not in p.per_row,
                              output=st.is_output):
            p.lanes.add(id(st))
    if p.threads:
        cfg.define_knob("parallel", p.threads)


def _apply_choices(cfg, p: _Plan) -> None:
    """Schedule the stages as ``cfg`` chooses: inlining, rows, then each root stage."""
    for st in p.chained:
        st.compute_inline()
    slides: dict = {}           # id(reader) -> the producers it computes per row (store_at)
    for st in p.inlinable:
        if id(st) in p.slide_fed and cfg[f"{p.names[id(st)]}.slide"].val:
            slides.setdefault(id(p.slide_fed[id(st)]), []).append(st)
        elif cfg[f"{p.names[id(st)]}.inline"].val:
            st.compute_inline()
    at_row = _rows_attached(cfg, p.s, p.stages, p.per_row, p.names)
    attached = {id(x) for xs in at_row.values() for x in xs}
    par = bool(p.threads) and cfg["parallel"].val
    tile_loops: dict = {}        # id(reduction) -> (stage, loop) of its parallel iteration
    for st in p.rooted:
        if st.attach is Attach.INLINE or id(st) in attached or st.stored_at is not None:
            continue                     # (stored_at: computed per row of its reader)
        name, epi, t = p.names[id(st)], p.epis.get(id(st)), st.tensor
        if p.gpu:
            gpu_rules.gpu_bind(cfg, p.s, t, name, is_contraction(st.op), epi)
        elif id(st) in p.plans:
            tile_loops[id(st)] = cpu.tile_contraction(cfg, p.s, t, name, p.plans[id(st)],
                                                      epi, par)
        elif id(st) in p.tile_fed and cfg[f"{name}.at"].val == "tile" and \
                id(p.tile_fed[id(st)]) in tile_loops:
            cpu.per_tile(p.s, st, *tile_loops[id(p.tile_fed[id(st)])])
        elif id(st) in at_row:
            cpu.per_row(cfg, p.s, t, p.names, at_row[id(st)], p.lanes, p.machine, par,
                        cfg[f"{name}.ahead"].val if id(st) in p.ahead else 0)
        elif (at := cpu.vectorize_parallel(cfg, p.s, t, name, id(st) in p.lanes, p.machine,
                                           par, slides.get(id(st), ()))) is not None:
            tile_loops[id(st)] = at


def _rows_attached(cfg, s: Schedule, stages, per_row: dict, names: dict) -> dict:
    """Output stage -> its stages computed per row, in order. Consumers decide first, as a
    stage can be computed per row only if each of its readers is that output or computed
    per row too (else its knob is ignored and it stays at root)."""
    attached: set[int] = set()
    for st in reversed(stages):
        if id(st) in per_row and st.attach is not Attach.INLINE and \
                cfg[f"{names[id(st)]}.at"].val == "row" and \
                all(r is per_row[id(st)] or id(r) in attached
                    for r in readers_through_inlined(s, st)):
            attached.add(id(st))
    at_row: dict[int, list] = {}
    for st in stages:
        if id(st) in attached:
            at_row.setdefault(id(per_row[id(st)]), []).append(st)
    return at_row


# ---- the task ---------------------------------------------------------------------------------

def _template_for(tensors: list[Tensor], digest: str, gpu: bool, machine: Machine
                  ) -> DagTemplate:
    """The registered DAG template of ``tensors`` (these very objects), else a new one."""
    name = f"auto_{'gpu_' if gpu else ''}{digest}"
    tpl = find_template(name)
    if isinstance(tpl, DagTemplate) and tpl.holds(tensors):
        return tpl
    options = {"gpu": gpu, "simd_bytes": machine.simd_bytes, "threads": machine.threads,
               "llc_bytes": machine.llc_bytes}
    return register(DagTemplate(name, tensors, machine_sketch, options))


def machine_sketch(cfg, tensors: list[Tensor], gpu: bool, simd_bytes: int | None,
                   threads: int, llc_bytes: int | None = None) -> tuple[Schedule, list[Tensor]]:
    """:func:`sketch` for the machine of ``simd_bytes`` and ``threads``: the sketch of the
    auto tasks' :class:`DagTemplate` (whose options are JSON values, a machine's fields)."""
    return sketch(cfg, tensors, gpu=gpu, machine=Machine(simd_bytes, threads, llc_bytes))


def auto_task(tensors: Sequence[Tensor], target="c") -> Task:
    """The tuning task of ``tensors`` (the build arguments, in call order) with the generated
    space; tune it with any tuner, as a template's task."""
    args = _check_args(tensors)
    gpu = Target.parse(target).kind == "opencl"
    machine = machine_of(target)
    return Task(_template_for(args, dag_digest(args, machine), gpu, machine), (), target)


def auto_schedule(tensors: Sequence[Tensor], trials: int = 200, log_file: str | None = None,
                  *, target="c", tuner="gbt", measure_option=None, seed: int = 0,
                  resume: bool = True, progress: bool = False) -> Schedule:
    """Tune a schedule for ``tensors`` (placeholders and outputs, in call order) without a
    template, and return the best one found; ``lt.build(s, tensors)`` builds it.

    ``trials`` measurements with ``tuner`` ("gbt", "ga", "sa", "random", "grid", "optuna" or
    a Tuner class), the first of them the fallback (config 0, what the graph compiler builds
    without a log), so the result is never worse than it as measured; every one is appended
    to ``log_file`` when given, and with ``resume``
    (default) the trials that log already holds for this definition count and are not
    measured again. ``trials=0`` only reads the log: the schedule of its best record.
    """
    from .callbacks import log_to_file, progress_bar
    from .log import load_best
    from .measure import MeasureOption
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
        raise LooptuneError(f"auto_schedule: trials must be a non-negative int; got {trials!r}")
    if trials == 0 and not log_file:
        raise LooptuneError("auto_schedule: trials=0 reads the best schedule from log_file; "
                            "give log_file, or trials >= 1")
    tuner_class(tuner, "auto_schedule")
    task = auto_task(tensors, target)
    best_index = None
    if trials > 0:
        t = make_tuner(tuner, task, seed)
        callbacks = [log_to_file(log_file)] if log_file else []
        resume = bool(resume and log_file and os.path.exists(log_file))
        opt = measure_option or MeasureOption()
        _fallback_first(t, opt, callbacks, log_file if resume else None)
        if progress:
            callbacks.append(progress_bar())
        res = t.tune(trials, opt, callbacks=callbacks, resume=resume)
        if res is not None and res.ok:
            best_index = res.config.index
    if log_file and os.path.exists(log_file):       # every trial of this definition, resumed
        rec = load_best(log_file, task)                # ones included
        if rec is not None:
            best_index = rec.index
    if best_index is None:
        where = f" in '{log_file}'" if log_file else ""
        raise LooptuneError(f"auto_schedule: no correct schedule was measured for task "
                            f"{task.key}{where}; look at the candidates' errors (run with a "
                            "log_file and `looptune report`), or raise trials")
    try:
        s, _ = task.instantiate(best_index)
    except ScheduleError as e:       # a log written by another version of the sketch
        raise LooptuneError(f"auto_schedule: the best logged config {best_index} of "
                            f"{task.key} no longer gives a valid schedule ({e}); tune again "
                            "with a new log_file") from e
    return s


def _fallback_first(tuner, opt, callbacks: list, log_file: str | None) -> None:
    """Measure config 0 as the first trial (unless the log holds it): the tuner learns from
    it and the log callbacks write it. It is also an anchor of the final re-measure: timed
    again beside the best configs, so that one slow first measurement (a cold process) cannot
    leave a pick slower than the fallback."""
    from .callbacks import LogToFile
    from .log import load_records
    from .measure import measure_configs
    tuner.anchors.add(0)
    if log_file and any(r.index == 0 for r in load_records(log_file, tuner.task)):
        return
    (res,) = measure_configs(tuner.task, [0], opt)
    tuner.load_history([res])
    for cb in callbacks:
        if isinstance(cb, LogToFile):
            cb(tuner, res)
