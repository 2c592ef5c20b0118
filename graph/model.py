"""The compiled model: kernels run in order over one planned arena.

```python
model = lt.graph.compile(g)
outs = model(xin)                 # positional in the graph's input order, or model(x=xin)
print(model)                      # the steps: group, kernel, arguments
model.memory_report()
print(model.profile(xin))         # seconds per step, slowest first, and the call overhead
```

The arena (every intermediate value, see :mod:`looptune.graph.memory`) is allocated once, when
the model is built, 64-byte aligned; each intermediate is a fixed view into it, so a call
allocates only its outputs (fresh arrays the caller keeps). Calls are serialised by a lock:
the arena is shared, so two threads calling one model take turns (build one model per thread
to run them at once).
"""
from __future__ import annotations

import statistics
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GraphError
from .compile import Kernel, Step, elementwise_inplace
from .ir import Graph
from .memory import ALIGNMENT, MemoryPlan, plan_memory
from .reference import bind_inputs
from .registry import call_of, get_op

if TYPE_CHECKING:
    from .profile import ModelProfile


class Model:
    """A graph compiled to kernels; call it with numpy arrays, get a list of numpy arrays."""

    winograd: bool = True     # compiled with lt.graph.compile(..., winograd=...)

    def __init__(self, graph: Graph, source_graph: Graph, groups, kernels: list[Kernel],
                 steps: list[Step], target: str):
        self.graph = graph
        self.source_graph = source_graph
        self.groups = list(groups)
        self.kernels = kernels
        self.steps = steps
        self.target = target
        self.name = source_graph.name
        self._check_io()
        self.plan = self._plan()
        read = {v for st in steps for v in st.inputs}
        self.weights = {k: a for k, a in graph.consts.items() if k in read}
        self._arena = np.empty(self.plan.arena_bytes + ALIGNMENT, np.uint8)
        base = (-self._arena.ctypes.data) % ALIGNMENT
        self._views = {v: self._view(base + off, nbytes, graph.types[v])
                       for v, (off, nbytes) in self.plan.offsets.items()}
        self._fixed_env = {**graph.consts, **self._views}
        self._launches = [self._launch(st) for st in steps]
        self._lock = threading.Lock()
        g = graph
        self._written = list(dict.fromkeys(v for v in g.outputs if v not in g.consts
                                           and v not in source_graph.inputs))

    # ---- building ------------------------------------------------------------------------

    def _check_io(self) -> None:
        src, g = self.source_graph, self.graph
        if src is g:
            return
        for n in src.inputs:
            if n in g.types and g.types[n] != src.types[n]:
                raise GraphError(f"compile: the optimized graph changed the type of input '{n}'")
        if len(g.outputs) != len(src.outputs):
            raise GraphError("compile: the optimized graph has a different number of outputs "
                             f"({len(g.outputs)}) than graph '{src.name}' ({len(src.outputs)})")

    def _plan(self) -> MemoryPlan:
        g = self.graph
        outside = set(g.inputs) | set(g.consts) | set(g.outputs)
        nbytes = {v: g.types[v].nbytes for st in self.steps for v in st.outputs
                  if v not in outside}
        def inplace(k: int):       # the pairs the step's C kernel was built to allow
            st = self.steps[k]
            mod = self.kernels[st.kernel].module if st.kernel is not None else None
            names = set(getattr(mod, "may_alias", ()))
            ok = {v for v, t in zip(st.args, getattr(mod, "args", ())) if t.name in names}
            return [(o, i) for o, i in elementwise_inplace(st, g.types) if {o, i} <= ok]
        steps = [(st.inputs, st.outputs) for st in self.steps]
        return plan_memory(steps, nbytes, inplace)

    @property
    def arena(self) -> np.ndarray:
        """The arena's bytes (read-only view), from its aligned start."""
        base = (-self._arena.ctypes.data) % ALIGNMENT
        v = self._arena[base:base + self.plan.arena_bytes]
        v.flags.writeable = False
        return v

    def _view(self, off: int, nbytes: int, t) -> np.ndarray:
        return self._arena[off:off + nbytes].view(np.dtype(t.dtype)).reshape(t.shape)

    def _launch(self, st: Step):
        """How to run one step: a function of the call's value environment."""
        if st.kernel is None:
            return _host_launch(self.graph, st, self._fixed_env)
        mod = self.kernels[st.kernel].module
        if not hasattr(mod, "bind"):                 # an OpenCL module: its own checked call
            fixed = self._fixed_env
            return lambda env: mod(*[env[v] if v in env else fixed[v] for v in st.args])
        return _c_launch(mod, st, self._views, self.weights)

    # ---- running -------------------------------------------------------------------------

    def __call__(self, *inputs, **named) -> list[np.ndarray]:
        """Run the model: inputs positional (the graph's order) or by name; returns the
        outputs as a list of new arrays. Inputs are checked (names, shapes, dtypes)."""
        env, outs = self._bind(inputs, named)
        with self._lock:
            for launch in self._launches:
                launch(env)
            return self._results(env, outs)

    def _bind(self, inputs, named) -> tuple[dict, dict]:
        """The values that change from call to call (the inputs, checked and C-contiguous;
        fresh arrays for the outputs the steps write), and those output arrays."""
        given = inputs[0] if len(inputs) == 1 and isinstance(inputs[0], dict) else list(inputs)
        env = bind_inputs(self.source_graph, given, named, f"model '{self.name}'")
        env = {k: a if a.flags.c_contiguous else np.array(a, order="C")     # 0-d stays 0-d
               for k, a in env.items()}
        g = self.graph
        outs = {v: np.empty(g.types[v].shape, g.types[v].dtype) for v in self._written}
        env.update(outs)               # weights and arena views: bound once, in _fixed_env
        return env, outs

    def _results(self, env: dict, outs: dict) -> list[np.ndarray]:
        result = []
        for v in self.graph.outputs:
            a = env[v] if v in env else self._fixed_env[v]
            result.append(a if outs.get(v) is a and not any(a is r for r in result)
                          else np.array(a))
        return result

    def profile(self, *inputs, repeat: int = 10, warmup: int = 1, **named) -> ModelProfile:
        """Where a call's time goes: the model runs ``warmup`` then ``repeat`` times on these
        inputs with each step timed alone (its kernel or numpy reference, in place, on the
        call's real data), then ``repeat`` whole calls are timed; medians. The result's
        ``steps`` are per-step times, ``call_seconds`` a whole call, ``overhead_seconds`` what
        a call costs beyond its steps (input checks, output arrays, dispatch); ``print(prof)``
        shows a table, slowest steps first."""
        from .profile import ModelProfile, StepTime
        if repeat < 1 or warmup < 0:
            raise GraphError(f"model '{self.name}'.profile(repeat={repeat}, warmup={warmup}): "
                             "repeat must be at least 1 and warmup at least 0")
        env, _ = self._bind(inputs, named)
        times: list[list[float]] = [[] for _ in self._launches]
        clock = time.perf_counter
        with self._lock:
            for r in range(warmup + repeat):
                for k, launch in enumerate(self._launches):
                    t0 = clock()
                    launch(env)
                    if r >= warmup:
                        times[k].append(clock() - t0)
        calls = []
        for _ in range(repeat):
            t0 = clock()
            self(*inputs, **named)
            calls.append(clock() - t0)
        steps = [StepTime(k, st.group.name, self._kernel_of(st), statistics.median(ts))
                 for k, (st, ts) in enumerate(zip(self.steps, times))]
        return ModelProfile(self.name, self.target, steps, statistics.median(calls), repeat)

    def _kernel_of(self, st: Step):
        return self.kernels[st.kernel] if st.kernel is not None else None

    def memory_report(self) -> dict:
        """The memory plan as data: ``arena_bytes`` (planned), ``naive_bytes`` (the sum of
        all intermediates), per buffer and per value offsets, sizes and lifetimes (in steps),
        the in-place pairs; plus the bytes of inputs, outputs and weights (outside the
        arena)."""
        rep = self.plan.report()
        g = self.graph
        rep["input_bytes"] = sum(g.types[v].nbytes for v in g.inputs)
        rep["output_bytes"] = sum(g.types[v].nbytes for v in dict.fromkeys(g.outputs))
        rep["weight_bytes"] = sum(a.nbytes for a in self.weights.values())
        rep["steps"] = [{"group": st.group.name, "kernel": None if st.kernel is None else
                         self.kernels[st.kernel].name, "args": list(st.args)}
                        for st in self.steps]
        return rep

    def __str__(self) -> str:
        lines = [f"model {self.name}: {len(self.steps)} steps, {len(self.kernels)} kernels, "
                 f"target {self.target}, arena {self.plan.arena_bytes} B (naive "
                 f"{self.plan.naive_bytes} B)"]
        for k, st in enumerate(self.steps):
            kern = self.kernels[st.kernel] if st.kernel is not None else None
            how = f"{kern.name} [{kern.schedule}, {kern.target}]" if kern else "numpy reference"
            lines.append(f"  {k}: {how}({', '.join(st.inputs)}) -> {', '.join(st.outputs)}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Model({self.name!r}, {len(self.steps)} steps, {len(self.kernels)} kernels, "
                f"target={self.target!r})")


def _c_launch(mod, st: Step, views: dict, weights: dict):
    """A C kernel's call bound once (``module.bind``): the arena views and weights are fixed
    and checked when the model is built (shapes and dtypes are static); the graph inputs and
    outputs of each call are passed without checks (``__call__`` checked the inputs and
    allocated the outputs). An in-place step binds one buffer to an input and the output,
    which the kernel was built to allow (``may_alias``)."""
    fixed = [views.get(v, weights.get(v)) for v in st.args]
    run = mod.bind(*fixed)
    free = [v for v, a in zip(st.args, fixed) if a is None]
    if not free:
        return lambda env: run()
    return lambda env: run(*[env[v] for v in free])


def _host_launch(graph: Graph, st: Step, fixed: dict):
    """A group without a compute: its nodes' numpy references, results copied into place
    (``fixed``: the weights and arena views; the call's values are in its environment)."""
    calls = [(call_of(graph, n), get_op(n.op_type).reference, n) for n in st.group.nodes]
    outs = set(st.outputs)

    def launch(env):
        local = {**fixed, **env}
        for ctx, ref, node in calls:
            vals = ref(ctx, [local[i] if i else None for i in node.inputs])
            for v, a in zip(node.outputs, vals):
                if not v:
                    continue
                if v in outs:
                    np.copyto(local[v], np.asarray(a, dtype=local[v].dtype))
                else:
                    local[v] = np.asarray(a)
    return launch
