"""Template-free auto scheduling: a config space generated from the compute DAG alone.

```python
s = lt.search.auto_schedule([A, B, C], trials=200, log_file="auto.jsonl")
f = lt.build(s, [A, B, C])
```

:func:`auto_task` turns the build arguments (placeholders and outputs, in call order) into a
:class:`~looptune.search.task.Task` whose template is a *sketch* of each stage, after Ansor's
rules. Op patterns decide (:mod:`.auto_rules`), the CPU rules apply them (:mod:`.auto_cpu`):

- an injective (reduction-free) intermediate stage is inlined into its readers or computed at
  root (knob ``<stage>.inline``; first choice: inlined, except a padding feeding a
  contraction, or a math-heavy value read twice, as softmax's exponentials);
- a *contraction* (a reduction whose body multiplies loads, with at least two spatial loops
  longer than 1: matmul, batch matmul, conv2d) gets multi-level tiling, S-R-S-R-S: each tiled
  loop split into parallel, middle and register levels (knobs ``tile<k>``: register tile,
  ``mid<k>``: tiles per parallel iteration), each reduction loop into a K-block and a
  micro-kernel loop (``red<k>``); the register tile accumulates in a ``local`` cache_write
  buffer (``cache``) computed per tile, or per parallel iteration with the K-blocks outside
  the middle tiles (``order``: "tile" / "kblock"); its rows unrolled (``unroll``, also the
  micro-kernel's K loop), its vector loop vectorized; an operand may be packed into a
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
import pickle
from collections.abc import Sequence

from ..backends.target import Target
from ..errors import LooptuneError, ScheduleError
from ..lang.tensor import ComputeOp, PlaceholderOp, Tensor
from ..schedule.schedule import Schedule, _topo_ops, create_schedule
from . import auto_cpu as cpu
from . import auto_gpu as gpu_rules
from .auto_rules import (
    Machine,
    epilogue,
    is_contraction,
    machine_of,
    materialize_first,
    parallel_choices,
    plan_tiles,
    readers_through_inlined,
    row_consumers,
)
from .task import Task
from .template import _REGISTRY, Template
from .tuners import TUNERS, make_tuner

SKETCH_VERSION = 6     # 2: row statistics computed per row of their output
                      # 3: epilogue chains (contraction -> bias -> activation)
                      # 4: multi-level tiling, packing, the rfactor rule, sized by the machine
                      # 5: knob 'parallel' (small kernels on one thread)
                      # 6: a transpose's 2-D tile pairs the axis its load reads along

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


def dag_digest(tensors: Sequence[Tensor], machine: Machine | None = None) -> str:
    """A digest of the computation (ops in order: names, shapes, dtypes, bodies) and of the
    argument order: equal for equal definitions, in any process. With ``machine`` (what the
    tiles are sized for), a task name: another vector width or thread count is another
    space."""
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
    s = create_schedule(outputs)
    out_ids = {id(t) for t in outputs}
    stages = [st for st in s.stages if isinstance(st.op, ComputeOp)]
    used: set[str] = set()
    names = {id(st): _knob_prefix(st.name, used) for st in stages}
    epis = {id(st): e for st in stages if is_contraction(st.op)
            and (e := epilogue(s, st, out_ids)) is not None}
    chained = [c for e in epis.values() for c in e.chain]
    fused = {id(e.out) for e in epis.values()} | {id(c) for c in chained}
    inlinable = [st for st in stages if id(st.tensor) not in out_ids and not st.op.reduce_axis
                 and id(st) not in fused]
    rooted = [st for st in reversed(stages) if id(st) not in fused]
    per_row = {} if gpu else row_consumers(s, stages, outputs, fused)
    plans = {id(st): plan_tiles(st.op, machine) for st in rooted
             if not gpu and is_contraction(st.op)}
    lanes: set[int] = set()          # stages with a knob <stage>.lanes (the rfactor rule)
    # 1. the knobs
    inlined = {id(c.op) for c in chained}          # by the fallback
    for st in inlinable:
        first = not materialize_first(s, st)
        cfg.define_knob(f"{names[id(st)]}.inline", [first, not first])
        if first:
            inlined.add(id(st.op))
    for st in stages:
        if id(st) in per_row and cpu.row_knobs(cfg, st.op, names[id(st)], machine):
            lanes.add(id(st))
    for st in rooted:
        name = names[id(st)]
        if gpu:
            gpu_rules.gpu_knobs(cfg, st.op, name, is_contraction(st.op) and id(st) not in epis)
        elif id(st) in plans:
            cpu.contraction_knobs(cfg, name, plans[id(st)], id(st) in epis)
        elif cpu.simple_knobs(cfg, st.op, name, machine, lanes=id(st) not in per_row):
            lanes.add(id(st))
    threads = [] if gpu else parallel_choices([st.op for st in stages], machine, inlined)
    if threads:
        cfg.define_knob("parallel", threads)
    # 2. the choices
    for st in chained:
        st.compute_inline()
    for st in inlinable:
        if cfg[f"{names[id(st)]}.inline"].val:
            st.compute_inline()
    at_row = _rows_attached(cfg, s, stages, per_row, names)
    attached = {id(p) for ps in at_row.values() for p in ps}
    par = bool(threads) and cfg["parallel"].val
    for st in rooted:
        if st.attach[0] == "inline" or id(st) in attached:
            continue
        name = names[id(st)]
        if gpu:
            gpu_rules.gpu_bind(cfg, s, st.tensor, name, is_contraction(st.op), epis.get(id(st)))
        elif id(st) in plans:
            cpu.tile_contraction(cfg, s, st.tensor, name, plans[id(st)], epis.get(id(st)),
                                 par)
        elif id(st) in at_row:
            cpu.per_row(cfg, s, st.tensor, names, at_row[id(st)], lanes, par)
        else:
            cpu.vectorize_parallel(cfg, s, st.tensor, name, id(st) in lanes, par)
    return s, tensors


def _rows_attached(cfg, s: Schedule, stages, per_row: dict, names: dict) -> dict:
    """Output stage -> its stages computed per row, in order. Consumers decide first, as a
    stage can be computed per row only if each of its readers is that output or computed
    per row too (else its knob is ignored and it stays at root)."""
    attached: set[int] = set()
    for st in reversed(stages):
        if id(st) in per_row and st.attach[0] != "inline" and \
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
                  ) -> Template:
    name = f"auto_{'gpu_' if gpu else ''}{digest}"
    tpl = _REGISTRY.get(name)
    if tpl is not None and getattr(tpl, "auto_tensors", None) is not None:
        old = tpl.auto_tensors
        if len(old) == len(tensors) and all(a is b for a, b in zip(old, tensors)):
            return tpl

    def auto(cfg):
        return sketch(cfg, tensors, gpu=gpu, machine=machine)
    auto.__qualname__ = auto.__name__ = name
    tpl = Template(name, auto)
    tpl.steps_identify_program = True
    tpl.auto_tensors = tensors
    tpl.dag = pickle.dumps(tensors)
    _REGISTRY[name] = tpl
    return tpl


def auto_task(tensors: Sequence[Tensor], target="c") -> Task:
    """The tuning task of ``tensors`` (the build arguments, in call order) with the generated
    space; tune it with any tuner, as a template's task."""
    args = _check_args(tensors)
    gpu = Target.parse(target).kind == "opencl"
    machine = machine_of(target)
    return Task(_template_for(args, dag_digest(args, machine), gpu, machine), (), target)


def task_from_dag(spec: dict) -> Task:
    """In a worker process: the auto task of a :meth:`Task.spec` that carries the DAG."""
    tensors = pickle.loads(spec["dag"])
    gpu = Target.parse(spec["target"]).kind == "opencl"
    digest = spec["name"][len("auto_gpu_" if gpu else "auto_"):]
    machine = machine_of(spec["target"])
    return Task(_template_for(tensors, digest, gpu, machine), (), spec["target"])


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
    if isinstance(tuner, str) and tuner not in TUNERS:
        raise LooptuneError(f"auto_schedule: tuner must be one of {', '.join(TUNERS)} (or a "
                            f"Tuner class); got {tuner!r}")
    task = auto_task(tensors, target)
    best_index = None
    if trials > 0:
        t = make_tuner(tuner, task, seed) if isinstance(tuner, str) else tuner(task, seed=seed)
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
    it and the log callbacks write it."""
    from .callbacks import LogToFile
    from .log import load_records
    from .measure import measure_configs
    if log_file and any(r.index == 0 for r in load_records(log_file, tuner.task)):
        return
    (res,) = measure_configs(tuner.task, [0], opt)
    tuner.load_history([res])
    for cb in callbacks:
        if isinstance(cb, LogToFile):
            cb(tuner, res)
