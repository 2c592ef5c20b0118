"""Template-free auto scheduling: a config space generated from the compute DAG alone.

```python
s = lt.search.auto_schedule([A, B, C], trials=200, log_file="auto.jsonl")
f = lt.build(s, [A, B, C])
```

:func:`auto_task` turns the build arguments (placeholders and outputs, in call order) into a
:class:`~looptune.search.task.Task` whose template is a *sketch* of each stage, after Ansor's
rules, simplified:

- an injective (reduction-free) intermediate stage is inlined into its readers or computed at
  root (knob ``<stage>.inline``; inlining a stencil's producer recomputes it, so both stay);
- a *contraction* (a reduction whose body multiplies loads, with at least two spatial loops
  longer than 1: matmul, batch matmul, conv2d) gets multi-level tiling: every spatial loop
  split in two, the inner loops forming a register tile accumulated in a ``local``
  cache_write buffer computed inside the fused, parallel outer loops (knob ``cache``); an
  elementwise output reading it alone (bias, activation: an epilogue) takes the tiled loops
  instead, and the contraction is computed per tile into it (fused, no extra pass; a chain of
  elementwise intermediates between them, each read by the next alone, as a fused group's
  bias then activation, is inlined into that output); every
  reduction loop split in two; the order of the reduction loops around the tile, unrolling
  (the tile rows or the inner reduction) and the vector width of the innermost spatial loop
  are knobs;
- a row statistic or row-wise intermediate (softmax's max, exponentials and sum; a
  normalisation's mean and variance) may be computed per row of the elementwise output that
  alone reads it (knob ``<stage>.at``: ``root`` or ``row``), the row reductions rfactored over
  vector lanes (knob ``<stage>.lanes``); the output then runs row by row, rows in parallel;
- any other stage (elementwise, transpose, row reductions, pooling, stencils): the innermost
  spatial loop split by a vector width (tails allowed) and the inner part vectorized — moved
  inside the reduction, where there is one, so the lanes are independent outputs (knob
  ``vec``) — the loop above it split too, for 2-D tiles (knob ``rows``; a transpose wants
  them), and the outer spatial loops fused and parallel.

For an OpenCL target (``auto_task(tensors, target="opencl")``) each root stage instead gets
one work-item per output element: the last two spatial loops split into work-groups x
work-items (knobs ``tx``, ``ty``), the reduction loops in each work-item (split, the inner
part optionally unrolled), accumulating in private memory (knob ``cache``, or in the fused
epilogue's tile).

The first choice of every knob gives a valid schedule (the fallback); other combinations
that the schedule primitives refuse are recorded as invalid candidates. The task is named
``auto_<digest of the DAG>``, so a log of one definition resumes and applies to the same
definition only; worker processes get the DAG itself (pickled), as no module defines it.
"""
from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Sequence

from ..backends.target import Target
from ..errors import LooptuneError, ScheduleError
from ..lang.expr import BinKind, Const
from ..lang.tensor import ComputeOp, PlaceholderOp, Tensor
from ..lang.visitor import ExprVisitor, collect_loads
from ..schedule.schedule import Schedule, _topo_ops, create_schedule
from .task import Task
from .template import _REGISTRY, Template
from .tuners import TUNERS, make_tuner

SKETCH_VERSION = 3     # 2: row statistics computed per row of their output
                      # 3: epilogue chains (contraction -> bias -> activation)

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
    for op in _topo_ops(outputs):
        if isinstance(op, PlaceholderOp) and id(op.output) not in given:
            raise LooptuneError(f"auto_schedule: placeholder '{op.output.name}' is read by "
                                f"the computation but is not among the arguments; add it to "
                                "the list")
    return out


def dag_digest(tensors: Sequence[Tensor]) -> str:
    """A digest of the computation (ops in order: names, shapes, dtypes, bodies) and of the
    argument order: equal for equal definitions, in any process."""
    outputs = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
    lines = []
    ids = {}
    for op in _topo_ops(outputs):
        ids[id(op)] = len(ids)
        t = op.output
        body = str(op.body) if isinstance(op, ComputeOp) else "placeholder"
        red = [(str(r.var.name), str(r.min), str(r.extent)) for r in
               getattr(op, "reduce_axis", ())]
        lines.append(f"{t.name}|{list(t.shape)}|{t.dtype}|{body}|{red}")
    lines.append("args:" + ",".join(str(ids.get(id(t.op), -1)) for t in tensors))
    lines.append(f"sketch:{SKETCH_VERSION}")     # a new sketch's space: a new task
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


# ---- the sketch ------------------------------------------------------------------------------

def _extent(iv) -> int:
    e = iv.extent
    return int(e.value) if isinstance(e, Const) else int(e)


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
    if len(_long_axes(op)) < 2:
        return False
    v = _MulOfLoads()
    v.visit(op.body.source)
    return v.found


def _knob_prefix(name: str, used: set[str]) -> str:
    base, k = name, 1
    while name in used:
        k += 1
        name = f"{base}{k}"
    used.add(name)
    return name


def sketch(cfg, tensors: list[Tensor], gpu: bool = False) -> tuple[Schedule, list[Tensor]]:
    """The auto template: a schedule of ``tensors``' computation for config ``cfg``
    (``gpu``: bound to OpenCL work-groups and work-items instead of parallel/vector loops).

    Every knob is defined before any is read (a config space is the same for every config),
    from the compute ops' loops; then the choices are applied."""
    outputs = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
    s = create_schedule(outputs)
    out_ids = {id(t) for t in outputs}
    stages = [st for st in s.stages if isinstance(st.op, ComputeOp)]
    used: set[str] = set()
    names = {id(st): _knob_prefix(st.name, used) for st in stages}
    epilogue = {}                  # contraction stage -> the elementwise output it feeds
    chained: list = []             # elementwise stages between them: always inlined
    for st in stages:
        if is_contraction(st.op):
            end, chain = _epilogue_chain(s, st, out_ids)
            if end is not None:
                epilogue[id(st)] = end
                chained += chain
    fused = {id(r) for r in epilogue.values()} | {id(c) for c in chained}
    inlinable = [st for st in stages if id(st.tensor) not in out_ids and not st.op.reduce_axis
                 and id(st) not in fused]
    rooted = [st for st in reversed(stages) if id(st) not in fused]
    per_row = _row_consumers(s, stages, outputs, fused)
    # 1. the knobs
    for st in inlinable:
        cfg.define_knob(f"{names[id(st)]}.inline", [True, False])
    for st in stages:
        if id(st) in per_row:
            _row_knobs(cfg, st.op, names[id(st)])
    for st in rooted:
        if gpu:
            _gpu_knobs(cfg, st.op, names[id(st)], is_contraction(st.op) and
                       id(st) not in epilogue)
        elif is_contraction(st.op):
            _contraction_knobs(cfg, st.op, names[id(st)], id(st) in epilogue)
        else:
            _simple_knobs(cfg, st.op, names[id(st)])
    # 2. the choices
    for st in chained:
        st.compute_inline()
    for st in inlinable:
        if cfg[f"{names[id(st)]}.inline"].val:
            st.compute_inline()
    # computed per row of their output: consumers decide first, as a stage can be computed
    # per row only if each of its readers is that output or computed per row too (else its
    # knob is ignored and it stays at root)
    attached: set[int] = set()
    for st in reversed(stages):
        if id(st) in per_row and st.attach[0] != "inline" and \
                cfg[f"{names[id(st)]}.at"].val == "row" and \
                all(r is per_row[id(st)] or id(r) in attached for r in _readers(s, st)):
            attached.add(id(st))
    at_row: dict[int, list] = {}       # output stage -> its stages computed per row, in order
    for st in stages:
        if id(st) in attached:
            at_row.setdefault(id(per_row[id(st)]), []).append(st)
    for st in rooted:
        if st.attach[0] == "inline" or id(st) in attached:
            continue
        if gpu:
            _gpu_bind(cfg, s, st.tensor, names[id(st)], epilogue.get(id(st)))
        elif is_contraction(st.op):
            _tile_contraction(cfg, s, st.tensor, names[id(st)], epilogue.get(id(st)))
        elif id(st) in at_row:
            _per_row(cfg, s, st.tensor, names, at_row[id(st)])
        else:
            _vectorize_parallel(cfg, s, st.tensor, names[id(st)])
    return s, tensors


def _row_consumers(s: Schedule, stages, outputs, fused) -> dict:
    """Stages that may be computed per row of an output (knob ``<stage>.at``), mapped to it:
    row statistics and row-wise intermediates (softmax's max, exponentials and sum; a
    normalisation's mean and variance) of an elementwise output, the only output reading
    them, whose shape is theirs plus a last axis, or theirs. Computed at that output's row
    loop, such a stage reads its inputs once per row while they are in cache, instead of
    a whole pass over memory per stage."""
    out = {}
    cpu_outputs = [s[t] for t in outputs]
    for st in stages:
        if st.is_output or id(st) in fused or is_contraction(st.op):
            continue
        readers = [o for o in cpu_outputs if s._reads_transitively(o, st)]
        if len(readers) != 1:
            continue
        o = readers[0]
        if o.op.reduce_axis or id(o) in fused or len(o.op.axis) < 2:
            continue
        shape, oshape = [_extent(a) for a in st.op.axis], [_extent(a) for a in o.op.axis]
        if shape in (oshape, oshape[:-1]):
            out[id(st)] = o
    return out


def _readers(s: Schedule, st) -> list:
    """The stages reading ``st``, looking through inlined ones."""
    out = []
    for r in s.readers(st):
        out += _readers(s, r) if r.attach[0] == "inline" else [r]
    return out


def _row_knobs(cfg, op, name: str) -> None:
    cfg.define_knob(f"{name}.at", ["root", "row"])
    if _has_lanes(op):
        cfg.define_knob(f"{name}.lanes", [16, 8, 1])     # rfactor lanes of the row reduction


def _has_lanes(op) -> bool:
    return len(op.reduce_axis) == 1 and _extent(op.reduce_axis[0]) > 1


def _per_row(cfg, s: Schedule, T: Tensor, names: dict, producers: list) -> None:
    """Output ``T`` row by row (the loops above its last fused and parallel), its last loop
    vectorized; ``producers`` computed at the row loop, in order: row reductions rfactored
    over ``lanes`` vector lanes (the partials vectorize, then are combined), row-wise
    intermediates vectorized along the row."""
    st = s[T]
    axes = list(st.op.axis)
    row = _fuse_parallel(st, axes[:-1])
    name = names[id(st)]
    if _extent(axes[-1]) > 1 and cfg[f"{name}.vec"].val == "inner":
        _, i = cfg[f"{name}.width"].apply(s, T, axes[-1])
        st.vectorize(i)
    for p in producers:
        pname = names[id(p)]
        lanes = cfg[f"{pname}.lanes"].val if _has_lanes(p.op) else 1
        if lanes > 1:
            (k,) = p.op.reduce_axis
            _, ki = p.split(k, factor=lanes)
            rf = s[s.rfactor(p.tensor, ki)]
            rf.compute_at(st, row)
            lane, _ = rf.op.axis
            (ko,) = rf.op.reduce_axis
            rf.reorder(ko, lane)
            rf.vectorize(lane)
        p.compute_at(st, row)
        if not p.op.reduce_axis and p.op.axis and _extent(p.op.axis[-1]) > 1:
            p.vectorize(p.op.axis[-1])


def _epilogue_chain(s: Schedule, st, out_ids) -> tuple:
    """The elementwise output that contraction ``st`` feeds (its epilogue) and the
    elementwise intermediates on the way, each read by the next alone (a fused group's bias
    then activation); (None, []) when there is no such output."""
    chain, cur = [], st
    while True:
        readers = s.readers(cur)
        if len(readers) != 1 or not _same_loops(readers[0], st):
            return None, []
        if id(readers[0].tensor) in out_ids:
            return readers[0], chain
        chain.append(readers[0])
        cur = readers[0]


def _same_loops(reader, st) -> bool:
    """``reader`` is elementwise over ``st``'s loops (bias, activation, scaling)."""
    return (not reader.op.reduce_axis and len(reader.op.axis) == len(st.op.axis)
            and all(_extent(a) == _extent(b) for a, b in zip(reader.op.axis, st.op.axis)))


def _fuse_parallel(stage, loops):
    p = loops[0] if len(loops) == 1 else stage.fuse(*loops)
    stage.parallel(p)
    return p


def _define_split(cfg, knob: str, loop, max_factor: int) -> None:
    """Split ``loop`` in two: by its divisors up to ``max_factor``, or, where it has few
    (a prime extent), by powers of two with a guarded tail."""
    ext = _extent(loop)
    divisors = sum(1 for d in range(2, min(ext, max_factor) + 1) if ext % d == 0)
    if divisors >= 2:
        cfg.define_split(knob, loop, num_outputs=2, max_factor=max_factor)
    else:
        cfg.define_split(knob, loop, num_outputs=2, policy="power2", max_factor=max_factor,
                         allow_non_divisible=True)


def _long_axes(op) -> list[int]:
    """Positions of the spatial loops longer than 1 (the ones worth tiling)."""
    return [k for k, a in enumerate(op.axis) if _extent(a) > 1]


def _tiled_axes(op) -> tuple[list[int], int]:
    """Positions of the spatial loops a contraction tiles, and the last one."""
    tiled = _long_axes(op)
    return tiled, tiled[-1]


def _gpu_axes(op) -> list[int]:
    """The spatial loops the work-group sketch splits (the last one at least)."""
    return _long_axes(op) or [len(op.axis) - 1]


def _contraction_knobs(cfg, op, name: str, has_epilogue: bool) -> None:
    if not has_epilogue:
        cfg.define_knob(f"{name}.cache", [True, False])
    tiled, last = _tiled_axes(op)
    for k in tiled:
        _define_split(cfg, f"{name}.tile{k}", op.axis[k], 64 if k == last else 16)
    for k, r in enumerate(op.reduce_axis):
        _define_split(cfg, f"{name}.red{k}", r, 64)
    cfg.define_knob(f"{name}.order", ["r.tile.r", "r.r.tile", "tile.r.r"])
    cfg.define_knob(f"{name}.unroll", ["none", "tile", "r_inner"])


def _tile_contraction(cfg, s: Schedule, T: Tensor, name: str, epilogue=None) -> None:
    """Multi-level tiling of contraction ``T``. With an ``epilogue`` stage (an elementwise
    output reading T), the epilogue takes the tiled loops and T is computed per tile into
    it, as a cache_write buffer would be."""
    tiled, _ = _tiled_axes(s[T].op)
    if epilogue is not None:
        CC, T = T, epilogue.tensor
    else:
        CC = s.cache_write(T, "local") if cfg[f"{name}.cache"].val else T
    axes = list(s[T].op.axis)              # after cache_write: the write-back's loops
    outer, inner = [], []
    for k, ax in enumerate(axes):
        if k not in tiled:
            outer.append(ax)
            continue
        o, i = cfg[f"{name}.tile{k}"].apply(s, T, ax)
        outer.append(o)
        inner.append(i)
    s[T].reorder(*outer, *inner)
    par = _fuse_parallel(s[T], outer)
    if CC is not T:
        s[CC].compute_at(s[T], par)
        s[T].vectorize(inner[-1])
        spatial = [a for k, a in enumerate(s[CC].op.axis) if k in tiled]
        red = list(s[CC].op.reduce_axis)
    else:
        spatial, red = inner, list(s[T].op.reduce_axis)
    r_out, r_in = [], []
    for k, r in enumerate(red):
        ro, ri = cfg[f"{name}.red{k}"].apply(s, CC, r)
        r_out.append(ro)
        r_in.append(ri)
    rows, vec = spatial[:-1], spatial[-1]
    order = cfg[f"{name}.order"].val
    seq = {"r.tile.r": r_out + rows + r_in, "r.r.tile": r_out + r_in + rows,
           "tile.r.r": rows + r_out + r_in}[order]
    if CC is T:
        s[T].reorder(par, *seq, vec)
    else:
        s[CC].reorder(*seq, vec)
    s[CC].vectorize(vec)
    how = cfg[f"{name}.unroll"].val
    if how == "tile":
        for r in rows:
            s[CC].unroll(r)
    elif how == "r_inner" and r_in:
        s[CC].unroll(r_in[-1])


def _simple_knobs(cfg, op, name: str) -> None:
    if not op.axis or _extent(op.axis[-1]) == 1:
        return
    cfg.define_knob(f"{name}.vec", ["none", "inner"] if op.reduce_axis else ["inner", "none"])
    _define_split(cfg, f"{name}.width", op.axis[-1], 64)
    if len(op.axis) >= 2 and _extent(op.axis[-2]) > 1:
        _define_split(cfg, f"{name}.rows", op.axis[-2], 64)      # 2-D tiles (transposes)


def _vectorize_parallel(cfg, s: Schedule, T: Tensor, name: str) -> None:
    st = s[T]
    axes = list(st.op.axis)
    red = list(st.op.reduce_axis)
    if not axes:                                  # a scalar: nothing to tile
        return
    if _extent(axes[-1]) == 1 or cfg[f"{name}.vec"].val == "none":
        _fuse_parallel(st, axes)
        return
    o, i = cfg[f"{name}.width"].apply(s, T, axes[-1])
    rows: list = []
    if len(axes) >= 2 and _extent(axes[-2]) > 1:
        yo, yi = cfg[f"{name}.rows"].apply(s, T, axes[-2])
        outer, rows = axes[:-2] + [yo, o], [yi]
    else:
        outer = axes[:-1] + [o]
    st.reorder(*outer, *rows, *red, i)            # lanes = independent outputs
    st.vectorize(i)
    _fuse_parallel(st, outer)


def _gpu_knobs(cfg, op, name: str, cacheable: bool) -> None:
    if not op.axis:
        return
    tiled = _gpu_axes(op)
    if cacheable:
        cfg.define_knob(f"{name}.cache", [False, True])
    cfg.define_split(f"{name}.tx", op.axis[tiled[-1]], num_outputs=2, policy="power2",
                     max_factor=64, allow_non_divisible=True)
    if len(tiled) >= 2:
        cfg.define_split(f"{name}.ty", op.axis[tiled[-2]], num_outputs=2, policy="power2",
                         max_factor=16, allow_non_divisible=True)
    for k, r in enumerate(op.reduce_axis):
        _define_split(cfg, f"{name}.red{k}", r, 16)
    if op.reduce_axis:
        cfg.define_knob(f"{name}.unroll", [False, True])


def _gpu_bind(cfg, s: Schedule, T: Tensor, name: str, epilogue=None) -> None:
    """One work-item per output element (of the epilogue, where the contraction has one):
    the last two spatial loops split into work-groups x work-items (blockIdx/threadIdx y and
    x), the other spatial loops fused into blockIdx.y; the reduction loops run in each
    work-item (split, the inner part optionally unrolled), accumulating in a private buffer
    (knob ``cache``) or in the output."""
    op = s[T].op
    if not op.axis:
        return
    tiled = _gpu_axes(op)
    CC = None
    if epilogue is not None:
        CC, T = T, epilogue.tensor
    elif is_contraction(op) and cfg[f"{name}.cache"].val:
        CC = s.cache_write(T, "local")
    axes = list(s[T].op.axis)
    bx, tx = cfg[f"{name}.tx"].apply(s, T, axes[tiled[-1]])
    rest = [a for k, a in enumerate(axes) if k != tiled[-1] and
            (len(tiled) < 2 or k != tiled[-2])]
    if len(tiled) >= 2:
        by, ty = cfg[f"{name}.ty"].apply(s, T, axes[tiled[-2]])
        s[T].reorder(*rest, by, bx, ty, tx)
        outer = rest + [by]
        s[T].bind(outer[0] if len(outer) == 1 else s[T].fuse(*outer), "blockIdx.y")
        s[T].bind(bx, "blockIdx.x")
        s[T].bind(ty, "threadIdx.y")
    else:
        s[T].reorder(*rest, bx, tx)
        outer = rest + [bx]
        s[T].bind(outer[0] if len(outer) == 1 else s[T].fuse(*outer), "blockIdx.x")
    s[T].bind(tx, "threadIdx.x")
    R = T
    if CC is not None:
        s[CC].compute_at(s[T], tx)
        R = CC
    red = list(s[R].op.reduce_axis)
    inner = []
    for k, r in enumerate(red):
        _, ri = cfg[f"{name}.red{k}"].apply(s, R, r)
        inner.append(ri)
    if red and cfg[f"{name}.unroll"].val and inner:
        s[R].unroll(inner[-1])


# ---- the task ---------------------------------------------------------------------------------

def _template_for(tensors: list[Tensor], digest: str, gpu: bool) -> Template:
    name = f"auto_{'gpu_' if gpu else ''}{digest}"
    tpl = _REGISTRY.get(name)
    if tpl is not None and getattr(tpl, "auto_tensors", None) is not None:
        old = tpl.auto_tensors
        if len(old) == len(tensors) and all(a is b for a, b in zip(old, tensors)):
            return tpl

    def auto(cfg):
        return sketch(cfg, tensors, gpu=gpu)
    auto.__qualname__ = auto.__name__ = name
    tpl = Template(name, auto)
    tpl.auto_tensors = tensors
    tpl.dag = pickle.dumps(tensors)
    _REGISTRY[name] = tpl
    return tpl


def auto_task(tensors: Sequence[Tensor], target="c") -> Task:
    """The tuning task of ``tensors`` (the build arguments, in call order) with the generated
    space; tune it with any tuner, as a template's task."""
    args = _check_args(tensors)
    gpu = Target.parse(target).kind == "opencl"
    return Task(_template_for(args, dag_digest(args), gpu), (), target)


def task_from_dag(spec: dict) -> Task:
    """In a worker process: the auto task of a :meth:`Task.spec` that carries the DAG."""
    tensors = pickle.loads(spec["dag"])
    gpu = Target.parse(spec["target"]).kind == "opencl"
    digest = spec["name"][len("auto_gpu_" if gpu else "auto_"):]
    return Task(_template_for(tensors, digest, gpu), (), spec["target"])


def auto_schedule(tensors: Sequence[Tensor], trials: int = 200, log_file: str | None = None,
                  *, target="c", tuner="gbt", measure_option=None, seed: int = 0,
                  resume: bool = True, progress: bool = False) -> Schedule:
    """Tune a schedule for ``tensors`` (placeholders and outputs, in call order) without a
    template, and return the best one found; ``lt.build(s, tensors)`` builds it.

    ``trials`` measurements with ``tuner`` ("gbt", "ga", "sa", "random", "grid", "optuna" or
    a Tuner class); every one is appended to ``log_file`` when given, and with ``resume``
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
    if isinstance(tuner, str) and tuner not in TUNERS:
        raise LooptuneError(f"auto_schedule: tuner must be one of {', '.join(TUNERS)} (or a "
                            f"Tuner class); got {tuner!r}")
    task = auto_task(tensors, target)
    best_index = None
    if trials > 0:
        t = make_tuner(tuner, task, seed) if isinstance(tuner, str) else tuner(task, seed=seed)
        callbacks = [log_to_file(log_file)] if log_file else []
        if progress:
            callbacks.append(progress_bar())
        res = t.tune(trials, measure_option or MeasureOption(), callbacks=callbacks,
                     resume=bool(resume and log_file and os.path.exists(log_file)))
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
