"""What measurement workers do: build a candidate (builders) and run it (the runner).

Both rebuild the task from its spec (importing the template's module or script). A builder
instantiates the config, lowers and compiles it (the compiled object lands in the on-disk
build cache) and reports the steps applied. The runner instantiates and builds the same config
again — a cache hit costing only lowering and hashing — loads it, runs it once on inputs from
a fixed seed, compares the outputs with the reference (the task's default schedule, computed
once per task and kept on disk for restarted runners) and times it.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

from ..backends.build import build
from ..backends.module import pin_openmp_runtime, warm_up
from ..errors import BuildError, ScheduleError
from ..lang.tensor import PlaceholderOp
from ..schedule.schedule import create_schedule
from ..schedule.steps import dumps
from .coreload import ForeignProbe
from .task import Task, task_from_spec

_TOLERANCE = {"float16": (1e-2, 1e-3), "float32": (1e-3, 1e-4), "float64": (1e-7, 1e-9)}


# ---- builder -------------------------------------------------------------------------------

def builder_init(spec: dict) -> Task:
    """Load the task once per builder process."""
    pin_openmp_runtime()
    return task_from_spec(spec)


def builder_job(task: Task, index: int) -> dict[str, Any]:
    """Instantiate and compile config ``index``; never raises for a bad config."""
    try:
        s, tensors = task.instantiate(task.config_space.get(index))
        steps = dumps(s.steps)
    except ScheduleError as e:
        return {"kind": "invalid_config", "msg": str(e)}
    except Exception as e:  # noqa: BLE001 - a template bug is this candidate's build error
        return {"kind": "build_error", "msg": f"the template raised {type(e).__name__}: {e}"}
    try:
        f = build(s, tensors, target=task.target, name=task.func_name)
    except ScheduleError as e:
        return {"kind": "invalid_config", "msg": str(e), "steps": steps}
    except BuildError as e:
        return {"kind": "build_error", "msg": str(e), "steps": steps}
    except Exception as e:  # noqa: BLE001
        return {"kind": "build_error", "msg": f"{type(e).__name__}: {e}", "steps": steps}
    return {"kind": "none", "steps": steps, "lib": str(getattr(f, "lib_path", ""))}


# ---- runner --------------------------------------------------------------------------------

def make_inputs(tensors, seed: int) -> dict[int, np.ndarray]:
    """Arrays for the placeholders among ``tensors`` (by position), from a fixed seed."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, t in enumerate(tensors):
        if not isinstance(t.op, PlaceholderOp):
            continue
        shape = _shape(t)
        d = np.dtype(t.dtype)
        if d.kind == "f":
            out[k] = rng.uniform(-1.0, 1.0, size=shape).astype(d)
        elif d.kind == "b":
            out[k] = rng.random(size=shape) < 0.5
        else:
            lo = 0 if d.kind == "u" else -8
            out[k] = rng.integers(lo, 8, size=shape, dtype=d)
    return out


def _shape(t) -> tuple[int, ...]:
    shape = []
    for s in t.shape:
        v = s if isinstance(s, int) else getattr(s, "value", None)
        if not isinstance(v, int):
            raise ValueError(f"tensor '{t.name}' has the symbolic size {s}; a tuning task "
                             "needs concrete sizes (pass them as template arguments)")
        shape.append(v)
    return tuple(shape)


def _output_arrays(tensors) -> dict[int, np.ndarray]:
    """Outputs prefilled with canaries, so that an element never written is a mismatch."""
    out = {}
    for k, t in enumerate(tensors):
        if isinstance(t.op, PlaceholderOp):
            continue
        d = np.dtype(t.dtype)
        out[k] = np.full(_shape(t), _canary(d), dtype=d)
    return out


# Where the runner's arrays start, in bytes past a 64-byte cache line. A kernel's vector loads
# and stores can split lines at one placement and not at another: one auto-scheduled
# depthwise_conv2d ran 0.17 ms with its output at 0 and 0.27 ms at 16, where numpy puts large
# arrays (a fresh mmap plus its 16-byte header). Each candidate is timed at both (the mean), so
# a config that is fast only on aligned arrays does not win on the runs that happened to get
# them, and the graph level's aligned buffers are covered too.
PLACEMENTS = (0, 16)


def placed(a: np.ndarray, offset: int) -> np.ndarray:
    """A copy of ``a`` whose data starts ``offset`` bytes past a 64-byte boundary."""
    buf = np.empty(a.nbytes + 64 + offset, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _canary(d: np.dtype):
    """The value an output is prefilled with: one a kernel is unlikely to compute."""
    return np.nan if d.kind == "f" else (True if d.kind == "b" else np.iinfo(d).max)


class RunnerState:
    """The runner's per-process state: the task, its inputs and its reference outputs, and
    the noise guard's reference kernel."""

    def __init__(self, task: Task, option, ref_dir: str | None):
        self.task, self.option = task, option
        _, tensors = task.instantiate(None)
        self.inputs = make_inputs(tensors, option.seed)
        self.reference: dict[int, np.ndarray] | None = None
        if option.check_correctness:
            self.reference = self._reference(tensors, ref_dir)
        self._placed: dict[int, tuple[dict, dict]] = {}    # placement -> (inputs, outputs)
        self.noise_kernel: NoiseReference | None = None
        if getattr(option, "noise_threshold", None):
            try:
                self.noise_kernel = NoiseReference()
            except Exception as e:  # noqa: BLE001 - without it the guard is off, not the run
                print(f"looptune: the noise guard is off: its reference kernel failed: "
                      f"{type(e).__name__}: {e}", file=sys.stderr)

    def arrays(self, tensors, placement: int = 0) -> list[np.ndarray]:
        """The arguments of a call: copies of the inputs and the output arrays (refilled with
        canaries), every one starting ``PLACEMENTS[placement]`` bytes past a 64-byte line.
        Every candidate gets the same arrays, so placement (measure.py) is alike for all."""
        if placement not in self._placed:
            offset = PLACEMENTS[placement]
            self._placed[placement] = (
                {k: placed(a, offset) for k, a in self.inputs.items()},
                {k: placed(a, offset) for k, a in _output_arrays(tensors).items()})
        else:
            for a in self._placed[placement][1].values():
                a.fill(_canary(a.dtype))
        ins, outs = self._placed[placement]
        return [ins[k] if k in ins else outs[k] for k in range(len(tensors))]

    def _reference(self, tensors, ref_dir: str | None) -> dict[int, np.ndarray]:
        path = os.path.join(ref_dir, "reference.npz") if ref_dir else None
        if path and os.path.exists(path):
            with np.load(path) as z:
                return {int(k[1:]): z[k] for k in z.files}
        outputs = [t for t in tensors if not isinstance(t.op, PlaceholderOp)]
        f = build(create_schedule(outputs), tensors, target=self.task.target,
                  name=self.task.func_name + "_ref")
        outs = _output_arrays(tensors)
        f(*[self.inputs[k] if k in self.inputs else outs[k] for k in range(len(tensors))])
        if path:
            fd, tmp = tempfile.mkstemp(dir=ref_dir, suffix=".npz")
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **{f"o{k}": v for k, v in outs.items()})
            os.replace(tmp, path)
        return outs


def runner_init(arg: tuple) -> RunnerState:
    """Load the task, make the inputs, compute (or load) the reference."""
    spec, option, ref_dir = arg
    pin_openmp_runtime()
    return RunnerState(task_from_spec(spec), option, ref_dir)


class NoiseReference:
    """A small fixed kernel (a parallel, vectorized 128^3 float32 matmul) that the runner
    times right before and right after each candidate: how far its time strays from its
    recent median says how disturbed the machine was meanwhile (see measure.py). The kernel
    never changes, so its own speed is constant; only the machine's state moves it."""

    N = 128
    BLOCK_MS = 2.0

    def __init__(self):
        from ..lang import compute, placeholder, reduce_axis
        n = self.N
        A = placeholder((n, n), "float32", name="A")
        B = placeholder((n, n), "float32", name="B")
        k = reduce_axis(n, name="k")
        from ..lang.ops import sum as lt_sum
        C = compute((n, n), lambda i, j: lt_sum(A[i, k] * B[k, j], axis=k), name="C")
        s = create_schedule(C)
        i, j = s[C].op.axis
        s[C].reorder(i, k, j)
        s[C].vectorize(j)
        s[C].parallel(i)
        self.f = build(s, [A, B, C], target="c", name="noise_reference_kernel")
        rng = np.random.default_rng(0)
        self.args = [rng.uniform(-1, 1, (n, n)).astype(np.float32) for _ in range(2)] + \
            [np.empty((n, n), np.float32)]
        t = self.f.time(*self.args, number=1, repeat=3).median
        self.number = max(1, int(self.BLOCK_MS / 1e3 / max(t, 1e-7)))

    def time(self) -> float:
        """Seconds per call: the median of 3 blocks of about ``BLOCK_MS`` each."""
        return self.f.time(*self.args, number=self.number, repeat=3, warmup=1).median


def runner_job(state: RunnerState, job: tuple) -> dict[str, Any]:
    """Build (a cache hit), check and time config ``index``; ``best`` is the best cost so far
    (for ``slow_cutoff``); with ``guard`` the noise reference is timed before and after.
    ``("round", indices, guard)`` is one interleaved re-measure round (``round_job``)."""
    if job[0] == "round":
        return round_job(state, job[1], job[2])
    index, best = job[0], job[1]
    guard = len(job) > 2 and job[2] and state.noise_kernel is not None
    opt = state.option
    f, tensors, arrays, first, msg = _load_and_check(state, index)
    if msg:
        _release(f)
        return {"kind": "wrong_result", "msg": msg}
    if (best is not None and opt.slow_cutoff is not None and first * 1e3 > opt.cutoff_min_ms
            and first > opt.slow_cutoff * best):
        _release(f)
        return {"kind": "none", "costs": [first],
                "msg": f"timing cut short: the first call took {first * 1e3:.3f} ms, over "
                       f"{opt.slow_cutoff:g}x the best so far ({best * 1e3:.3f} ms)"}
    sets = [arrays] + [state.arrays(tensors, p) for p in range(1, len(PLACEMENTS))]
    out = {"kind": "none", **_probed(state, guard, lambda: _time(f, sets, opt))}
    _release(f)
    return out


def _release(f) -> None:
    """Frees the workspaces a C function keeps between calls (backends/build.py): a runner
    times hundreds of configs, each library stays loaded, and each would keep its own."""
    release = getattr(f, "release_workspaces", None)
    if release is not None:
        release()


def round_job(state: RunnerState, indices: list[int], guard: bool) -> dict[str, Any]:
    """One re-measure round: every config of ``indices`` built (cache hits), checked once,
    then timed interleaved: at each placement, after a shared warm-up, ``repeat`` passes that
    each time one block of ``number`` calls of every config, the order rotated from pass to
    pass. Returns ``{"results": {index: {"kind", "costs" | "msg"}}, "ref", "busy"}``. Why
    in turns: measure.py's module docstring, "Interleaving"."""
    guard = guard and state.noise_kernel is not None
    results: dict[int, dict[str, Any]] = {}
    funcs: dict[int, Any] = {}
    for index in indices:
        f, tensors, _, _, msg = _load_and_check(state, index)
        if msg:
            _release(f)
            results[index] = {"kind": "wrong_result", "msg": msg}
        else:
            funcs[index] = f
    if not funcs:
        return {"results": results}
    sets = [state.arrays(tensors, p) for p in range(len(PLACEMENTS))]
    timed = _probed(state, guard, lambda: _time_interleaved(funcs, sets, state.option))
    for f in funcs.values():
        _release(f)
    results.update({i: {"kind": "none", "costs": c} for i, c in timed.pop("costs").items()})
    return {"results": results, **timed}


def _load_and_check(state: RunnerState, index: int):
    """Config ``index`` built (a cache hit) and called once on the first placement's arrays:
    (function, tensors, those arrays, the call's seconds, what differs from the reference or
    None)."""
    task, opt = state.task, state.option
    s, tensors = task.instantiate(task.config_space.get(index))
    f = build(s, tensors, target=task.target, name=task.func_name)
    arrays = state.arrays(tensors)
    t0 = time.perf_counter()
    f(*arrays)
    first = time.perf_counter() - t0
    msg = next(filter(None, (compare(tensors[k].name, arrays[k], ref, opt.rtol, opt.atol)
                             for k, ref in (state.reference or {}).items())), None)
    return f, tensors, arrays, first, msg


def _probed(state: RunnerState, guard: bool, timing) -> dict[str, Any]:
    """``{"costs": timing()}``, with the noise reference's times before and after (``ref``,
    with ``guard``) and the other processes' CPU time meanwhile (``busy``, coreload.py)."""
    probe = ForeignProbe()
    before = state.noise_kernel.time() if guard else None
    out: dict[str, Any] = {"costs": timing()}
    if guard:
        out["ref"] = [before, state.noise_kernel.time()]
    busy = probe.stop()
    if busy is not None:
        out["busy"] = list(busy)
    return out


def _time_interleaved(funcs: dict[int, Any], sets: list, opt) -> dict[int, list[float]]:
    """Per config, one cost per repeat (the mean over ``sets``, as ``_time``), the configs
    timed in turns block by block (``round_job``). A block is ``number`` calls, raised per
    config until it lasts ``min_repeat_ms``, after one untimed call: the config before left
    the caches in its own state (one that streams its stores leaves the output out of cache;
    the softmax 4096 x 1024 fallback's first call after such a config ran 2-4% slower than its
    later ones on a Zen 4 VM). With ``flush_cache`` the caches are evicted before every block
    instead."""
    order = list(funcs)
    blocks: dict[int, list[list[float]]] = {i: [] for i in order}
    for arrays in sets:
        per_set: dict[int, list[float]] = {i: [] for i in order}
        number = {i: opt.number for i in order}
        calls = 0
        # the threads awake, every config's code and data warm: turns of one call each
        t_end = time.perf_counter() + opt.warmup_ms / 1e3 / len(sets)
        while calls == 0 or time.perf_counter() < t_end:
            for i in order:
                t0 = time.perf_counter()
                funcs[i](*arrays)
                if not opt.flush_cache and opt.min_repeat_ms > 0:
                    dt_ms = max((time.perf_counter() - t0) * 1e3, 1e-3)
                    number[i] = max(number[i], min(1 << 20, int(opt.min_repeat_ms / dt_ms) + 1))
            calls += 1
        for rep in range(opt.repeat):
            k = rep % len(order)
            for i in order[k:] + order[:k]:
                f = funcs[i]
                if opt.flush_cache:
                    _flush_cache()
                else:
                    f(*arrays)      # untimed: the caches settle to this config's own state
                t0 = time.perf_counter()
                for _ in range(number[i]):
                    f(*arrays)
                per_set[i].append((time.perf_counter() - t0) / number[i])
        for i in order:
            blocks[i].append(per_set[i])
    return {i: [sum(b[r] for b in blocks[i]) / len(sets) for r in range(opt.repeat)]
            for i in order}


def compare(name: str, out: np.ndarray, ref: np.ndarray, rtol: float | None,
            atol: float | None) -> str | None:
    """None when ``out`` matches ``ref``; else what differs."""
    if out.dtype.kind != "f":
        bad = out != ref
        if not bad.any():
            return None
        at = tuple(int(x) for x in np.argwhere(bad)[0])
        return (f"output '{name}' differs from the reference at {int(bad.sum())} of {bad.size} "
                f"elements; first at {at}: got {out[at]}, expected {ref[at]}")
    r0, a0 = _TOLERANCE.get(str(out.dtype), (1e-3, 1e-4))
    rtol = r0 if rtol is None else rtol
    atol = a0 if atol is None else atol
    finite = np.abs(ref[np.isfinite(ref)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    o, r = out.astype(np.float64), ref.astype(np.float64)
    close = np.isclose(o, r, rtol=rtol, atol=atol * scale, equal_nan=True)
    if close.all():
        return None
    at = tuple(int(x) for x in np.argwhere(~close)[0])
    err = np.abs(o - r)
    return (f"output '{name}' differs from the reference at {int((~close).sum())} of "
            f"{close.size} elements (rtol={rtol}, atol={atol * scale:.3g}); first at {at}: got "
            f"{out[at]}, expected {ref[at]}; max abs error {np.nanmax(np.where(close, 0, err))}")


_FLUSH: np.ndarray | None = None


def _flush_cache() -> None:
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = np.zeros(64 << 17, dtype=np.float64)     # 64 MiB: past the last-level cache
    _FLUSH += 1.0


def _time(f, sets, opt) -> list[float]:
    """One cost per repeat: the mean over ``sets`` (the same arguments at each of
    ``PLACEMENTS``) of a block of ``number`` calls on each.

    Each set is warmed up (its share of ``warmup_ms``, one call at least) and then timed for
    all its repeats before the next: the steady state of calls back to back on the same
    arrays, as a user's loop and the benchmarks run it. Alternating the sets block by block
    timed the first calls after each switch, when the other set's data fills the caches:
    softmax's 32 MiB sets ran 1.5-1.9 ms on those calls against 0.8 steady, which favoured
    streamed stores that lose in the steady state. With ``flush_cache`` every block starts
    from cold caches instead (the old order: set by set within each repeat)."""
    if opt.flush_cache:
        warm_up(lambda: f(*sets[0]), opt.warmup_ms)          # the threads awake
        costs = []
        for _ in range(opt.repeat):
            per = []
            for arrays in sets:
                _flush_cache()
                per += f.time(*arrays, number=opt.number, repeat=1, warmup=0,
                              min_repeat_ms=0).results
            costs.append(sum(per) / len(per))
        return costs
    blocks = []
    for arrays in sets:
        warm_up(lambda a=arrays: f(*a), opt.warmup_ms / len(sets))
        blocks.append(f.time(*arrays, number=opt.number, repeat=opt.repeat, warmup=0,
                             min_repeat_ms=opt.min_repeat_ms).results)
    return [sum(b[r] for b in blocks) / len(blocks) for r in range(opt.repeat)]
