"""Compiling a graph into a callable model: optimize, fuse, one kernel per group, plan memory.

```python
model = lt.graph.compile(g, target="c", log="tiny.jsonl")
outs = model(xin)                       # or model(x=xin); a list of numpy arrays
model.memory_report()["arena_bytes"]
```

The pipeline (in this order): ``lt.graph.optimize(graph, target=target)`` (the pass pipeline
for the target: a C target's NCHWc block is its vector lanes, OpenCL keeps NCHW) and
:func:`~looptune.graph.fusion.prepack.prepack_weights` (constant weights a kernel would read
transposed, such as Gemm's B with transB=1, stored transposed once), both skipped with
``optimize=False``; :func:`~looptune.graph.fusion.empty.drop_empty_values` (a value with a
size-0 dimension is a constant: no kernel computes it, and Concat/Split drop it),
:func:`~looptune.graph.fusion.fuse`, then for each group its compute DAG
(:func:`~looptune.graph.fusion.lower_group`) and its task ``lt.search.auto_task(dag.tensors,
target)``, named by a digest of the DAG: identical groups (same op sequence, attributes,
shapes, dtypes) share one task and one kernel. A kernel's schedule is, in order of preference:

1. the best correct record of its task in ``log`` (the whole-model tuner writes such logs);
2. the auto scheduler's fallback, config 0 of the task's space (the first choice of every
   knob, valid by construction);
3. when the sketch fails or that schedule does not build: a default schedule (injective
   intermediates inlined, the innermost loop of every root stage vectorized, the outer loops
   fused and parallel), and failing that the plain loop nest.

A group whose operator has no tensor-expression compute, or that still reads an empty tensor,
runs its numpy reference ("host" step); a group whose values nobody reads (dead code, with
``optimize=False``) gets no step.
With ``target="opencl"`` each group is built for OpenCL (log, then fallback schedule of the
OpenCL sketch) where the sketch and code generator take it; any other group is built for C,
with one logged warning per group.

The interface the whole-model tuner and the exporter build on (``model`` is a
:class:`~looptune.graph.model.Model`):

- ``model.kernels``: one :class:`Kernel` per distinct task: ``name`` (a C identifier, unique in
  the model), ``task`` (the ``lt.search`` Task, None where the sketch failed), ``module`` (the
  built function: ``module.source`` is its C source, ``module.declaration`` its prototype),
  ``dag`` (the first group's :class:`~looptune.graph.fusion.GroupDAG`: ``dag.tensors`` are the
  parameters in order), ``group``/``groups`` (the first / every group it runs), ``schedule``
  (which rule above chose its schedule: "log", "fallback", "default" or "plain"), ``target``.
- ``model.steps``: the execution sequence, one :class:`Step` per group: ``group``,
  ``kernel`` (an index into ``model.kernels``, None for a host step), ``inputs`` and
  ``outputs`` (graph value names bound to the kernel's parameters, in order: ``step.args``;
  a value may appear in the inputs of several steps, each output is written by one step).
- ``model.plan``: the :class:`~looptune.graph.memory.MemoryPlan`: ``plan.offsets[value] =
  (offset, nbytes)`` in the arena for every intermediate, ``plan.arena_bytes``,
  ``plan.inplace`` (``(step, input, output)``: an elementwise C kernel whose output shares its
  dying input's bytes: its arguments alias, and the kernel was built for it, without
  ``restrict`` on the pair: ``kernel.module.may_alias`` names its parameters that may share
  a buffer); graph inputs, weights and graph outputs are not
  in the arena (a graph output that is also a graph input, a weight or repeated is a copy).
- ``model.weights``: ``{name: numpy array}``, the constants the steps read.
- ``model.graph``: the graph that was fused (after ``optimize``); ``model.source_graph``: the
  graph given to ``compile`` (its inputs and outputs are the model's).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from ..backends.target import Target
from ..errors import GraphError, LooptuneError, ScheduleError
from ..lang.tensor import PlaceholderOp
from ..schedule.attach import Attach
from ..schedule.schedule import Schedule, create_schedule
from .fusion import Group, GroupDAG, fuse, lower_group
from .fusion.empty import drop_empty_values, touches_empty
from .fusion.prepack import prepack_weights
from .ir import Graph
from .registry import OpPattern, get_op

log = logging.getLogger("looptune.graph.compile")


@dataclass
class Kernel:
    """One built function, shared by every group of its task (see the module docstring)."""

    name: str
    task: object | None
    module: object
    dag: GroupDAG
    groups: list[Group] = field(default_factory=list)
    schedule: str = "fallback"
    target: str = "c"

    @property
    def group(self) -> Group:
        return self.groups[0]

    @property
    def source(self) -> str:
        return self.module.source

    def __repr__(self) -> str:
        task = self.task.name if self.task is not None else "-"
        return (f"Kernel({self.name}, task={task}, schedule={self.schedule}, "
                f"target={self.target}, groups={[g.index for g in self.groups]})")


@dataclass(frozen=True)
class Step:
    """One group's run: kernel ``kernel`` (None: the group's numpy reference) on the values
    ``inputs`` then ``outputs``."""

    group: Group
    kernel: int | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def args(self) -> tuple[str, ...]:
        return self.inputs + self.outputs


def compile(graph: Graph, target="c", log=None, optimize: bool = True,  # noqa: A001
            winograd: bool = True):
    """Compile ``graph`` into a callable model (see the module docstring for the pipeline and
    the model's interface). ``log``: a tuning log (path, or a list of paths/Records) whose
    best record per task schedules that task's kernel. ``winograd=False``: no convolution
    by Winograd (``lt.graph.optimize``); tune with the model compiled the same way
    (``lt.graph.tune(model)``), as its kernels are other tasks. Raises GraphError for a graph
    it cannot compile, BuildError when a kernel does not compile at all."""
    from .model import Model
    if not isinstance(graph, Graph):
        raise GraphError(f"compile: expected a looptune.graph.Graph; got {type(graph).__name__}")
    tgt = Target.parse(target)
    if not graph.outputs:
        raise GraphError(f"compile: graph '{graph.name}' has no outputs; mark them with "
                         "g.output(...)")
    records = _records(log)
    g = prepack_weights(_optimize(graph, tgt, winograd)) if optimize else graph
    g = drop_empty_values(g)
    groups = fuse(g)
    kernels, steps = build_kernels(groups, tgt, records)
    model = Model(g, graph, groups, kernels, steps, str(tgt))
    model.winograd = winograd        # how it was compiled (the bench worker compiles alike)
    return model


def _optimize(graph: Graph, target: Target, winograd: bool = True) -> Graph:
    """The pass pipeline for ``target`` (its layout block is the target's vector lanes: an
    OpenCL target keeps NCHW), read from the package so that tests can stand in for it."""
    from .. import graph as pkg
    return pkg.optimize(graph, target=str(target), winograd=winograd)


def _records(log_src):
    if log_src is None:
        return None
    from ..search.log import load_records
    try:
        return load_records(log_src)
    except LooptuneError as e:
        raise GraphError(f"compile(log={log_src!r}): {e}") from None


def build_kernels(groups: list[Group], target: Target, records=None
                  ) -> tuple[list[Kernel], list[Step]]:
    """One kernel per distinct group DAG (by its auto_task digest) and one step per group
    (none for a group whose values nobody reads: dead code when the passes did not run)."""
    from ..search.auto import dag_digest
    kernels: list[Kernel] = []
    by_digest: dict[str, int] = {}
    steps = []
    names: set[str] = set()
    for grp in groups:
        if not grp.outputs:
            log.info("group %d (%s) computes nothing that is read: skipped", grp.index,
                     grp.name)
            continue
        if any(get_op(n.op_type).compute is None for n in grp.nodes):
            log.info("group %d (%s) runs on numpy: %s has no compute", grp.index, grp.name,
                     grp.master.label)
            steps.append(Step(grp, None, grp.inputs, grp.outputs))
            continue
        if touches_empty(grp):
            log.info("group %d (%s) runs on numpy: it reads or computes an empty tensor",
                     grp.index, grp.name)
            steps.append(Step(grp, None, grp.inputs, grp.outputs))
            continue
        dag = lower_group(grp)
        key = dag_digest(dag.tensors)
        if key not in by_digest:
            by_digest[key] = len(kernels)
            kernels.append(_build(dag, target, records, _kernel_name(grp, names),
                                  inplace_params(dag)))
        k = by_digest[key]
        kernels[k].groups.append(grp)
        steps.append(Step(grp, k, dag.inputs, dag.outputs))
    return kernels, steps


def _kernel_name(grp: Group, taken: set[str]) -> str:
    base = re.sub(r"[^0-9A-Za-z_]", "_", grp.name)[:56].rstrip("_")
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def inplace_params(dag: GroupDAG) -> tuple[int, ...]:
    """The parameter positions of ``dag``'s kernel that the memory planner may bind to one
    buffer (the output and the inputs of :func:`elementwise_inplace`): its C function is built
    without ``restrict`` on them (``build(may_alias=...)``). The same for every group sharing
    the kernel (an identical DAG)."""
    step = Step(dag.group, 0, dag.inputs, dag.outputs)
    pairs = elementwise_inplace(step, dag.group.graph.types)
    pos = {v: j for j, v in enumerate(dag.args)}
    return tuple(sorted({pos[v] for pair in pairs for v in pair}))


def _build(dag: GroupDAG, target: Target, records, name: str,
           alias: tuple[int, ...] = ()) -> Kernel:
    """The kernel of ``dag`` for ``target``; an OpenCL target falls back to C per group."""
    if target.kind == "opencl":
        try:
            return _build_for(dag, target, records, name, gpu=True)
        except LooptuneError as e:
            log.warning("group %d (%s) runs in C: the OpenCL sketch or code generator does "
                        "not take it (%s)", dag.group.index, dag.group.name,
                        str(e).splitlines()[0][:160])
        target = Target.parse("c")
    return _build_for(dag, target, records, name, gpu=False, alias=alias)


def _build_for(dag: GroupDAG, target: Target, records, name: str, gpu: bool,
               alias: tuple[int, ...] = ()) -> Kernel:
    """The first schedule of :func:`_schedules` that builds; raises the last failure."""
    from ..backends.build import build
    task = _task(dag, target)
    last: LooptuneError | None = None
    may_alias = [dag.tensors[j] for j in alias]
    for how, make in _schedules(dag, task, target, records, gpu):
        try:
            s = make()
            if s is None:
                continue
            module = build(s, dag.tensors, str(target), name=name, may_alias=may_alias)
            return Kernel(name, task, module, dag, schedule=how, target=str(target))
        except LooptuneError as e:
            log.info("group %d (%s): the %s schedule failed for %s (%s)", dag.group.index,
                     dag.group.name, how, target, str(e).splitlines()[0][:160])
            last = e
    if last is None:
        raise GraphError(f"group {dag.group.index} ({dag.group.name}): no schedule for "
                         f"target {target} (the auto scheduler has no task for it)")
    raise last


def _task(dag: GroupDAG, target: Target):
    from ..search.auto import auto_task
    try:
        return auto_task(dag.tensors, str(target))
    except LooptuneError as e:
        log.info("group %d (%s): no auto-scheduler task (%s)", dag.group.index,
                 dag.group.name, str(e).splitlines()[0][:160])
        return None


def _schedules(dag: GroupDAG, task, target: Target, records, gpu: bool):
    """(name, make schedule) in order of preference (OpenCL: only the sketch's, bound to
    work-groups and work-items)."""
    if task is not None and records is not None:
        yield "log", lambda: _from_log(task, records)
    if task is not None:
        yield "fallback", lambda: task.instantiate(0)[0]
    if gpu:
        return
    outputs = [t for t in dag.tensors if not isinstance(t.op, PlaceholderOp)]
    yield "default", lambda: default_schedule(outputs, _lanes(target, outputs))
    yield "plain", lambda: create_schedule(outputs)


def _from_log(task, records) -> Schedule | None:
    from ..search.log import load_best
    rec = load_best(records, task)
    if rec is None:
        return None
    try:
        return task.instantiate(rec.index)[0]
    except (ScheduleError, IndexError) as e:
        log.warning("task %s: its best logged config %d no longer gives a schedule (%s); "
                    "using the fallback", task.name, rec.index, e)
        return None


def _lanes(target: Target, outputs) -> int:
    try:
        return target.vector_lanes(outputs[0].dtype)
    except LooptuneError:
        return 8


def default_schedule(outputs, lanes: int = 8) -> Schedule:
    """Injective intermediates inlined; each root stage's innermost spatial loop split by
    ``lanes`` (whole when shorter than two vectors) and vectorized below its reduction loops,
    its outer loops fused and parallel."""
    s = create_schedule(outputs)
    out_ids = {id(t) for t in outputs}
    for st in s.stages:
        if not isinstance(st.op, PlaceholderOp) and id(st.tensor) not in out_ids \
                and not st.op.reduce_axis:
            st.compute_inline()
    for st in s.stages:
        if isinstance(st.op, PlaceholderOp) or st.attach is Attach.INLINE or not st.op.axis:
            continue
        axes, red = list(st.op.axis), list(st.op.reduce_axis)
        ext = getattr(axes[-1].extent, "value", axes[-1].extent)
        outer = axes[:-1]
        if ext >= 2 * lanes:
            o, i = st.split(axes[-1], factor=lanes)
            outer.append(o)
        else:                                     # short rows: the whole row is one vector
            i = axes[-1]
        st.reorder(*outer, *red, i)
        st.vectorize(i)
        if outer:
            st.parallel(outer[0] if len(outer) == 1 else st.fuse(*outer))
    return s


def elementwise_inplace(step: Step, types) -> list[tuple[str, str]]:
    """The (output, input) pairs ``step`` may compute in place: a C kernel of an elementwise
    or broadcast group with one output, and an input of the output's shape and dtype (every
    element of it is then read at the index of the element written, so the kernel, built
    without ``restrict`` on the pair, is exact over one buffer)."""
    grp = step.group
    if step.kernel is None or len(step.outputs) != 1 or grp.pattern > OpPattern.BROADCAST:
        return []
    out = step.outputs[0]
    return [(out, v) for v in step.inputs if types[v] == types[out]]
