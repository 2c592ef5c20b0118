"""Timing a compiled model end to end against ONNX Runtime, each system in its own process.

```python
res = bench_model("cnn.onnx", model, rounds=7, threads=2)
print(res.table())
```

The systems, each a worker process (:mod:`looptune.graph._bench_worker`) started before any
timing and then asked in turn, round after round (the order rotated each round), to time one
block of calls (a warm-up call, then as many calls as fill ``min_block`` seconds):

- ``looptune``: the model exported with ``lt.export_library`` and called through ``ctypes``
  (one C call per inference: the deployed form; the worker imports no looptune);
- ``looptune (python)``: ``model(...)`` of ``lt.graph.compile`` (a Python dispatch per kernel);
- ``onnxruntime``: an ``InferenceSession`` on the CPU execution provider with
  ``intra_op_num_threads=threads``, one inter-op thread, all graph optimizations.

Each system's figure is the median over the rounds of its blocks' seconds per call; the
spread is half the range of the rounds, relative to the median. Before each block the harness
waits ``SETTLE_S`` (the previous system's idle threads go to sleep: the rounds rotate the order
but the systems keep their cyclic order, so without the pause the exported library always ran
right after torch.compile's spinning threads, 1.56 ms against 1.14 for the same kernels from
Python on a ResNet stage, while alone, in one process or in a fresh one, the two ran alike), and
the worker calls the model for ``WARMUP_S`` untimed (its own threads awake) first. Every worker
runs with ``OMP_NUM_THREADS=threads``; the looptune workers with this process's OpenMP settings
(looptune's short spin, ``runtime_env``, unless you set your own), the others (ONNX Runtime,
torch) with their libraries' own (``runtime_env.peer_environment``: torch's bundled libgomp
spins as libgomp does by default; ONNX Runtime keeps its own thread pool's spinning). Memory:
each worker's peak resident set growth from its baseline (inputs loaded, libraries imported) to
after the runs; and the plan's arena. The per-kernel breakdown times each kernel alone (random
inputs of its shapes) in the python worker.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import LooptuneError
from ..runtime_env import peer_environment

SETTLE_S = 0.2       # before each block, as report.SETTLE_S (OpenBLAS, libgomp, ONNX Runtime
WARMUP_S = 0.1       # spin after a call) and report.WARMUP_MS

LIB, PY, ORT = "looptune", "looptune (python)", "onnxruntime"
SYSTEMS = (LIB, PY, ORT)
_KIND = {LIB: "lib", PY: "python", ORT: "onnxruntime"}
_WORKER = Path(__file__).with_name("_bench_worker.py")


@dataclass
class SystemResult:
    """One system's seconds per call in each round, and its peak memory growth."""

    name: str
    times: list[float] = field(default_factory=list)
    rss_growth: int | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def spread(self) -> float:
        return (max(self.times) - min(self.times)) / 2 / self.median if self.times else 0.0


@dataclass
class BenchResult:
    """What :func:`bench_model` measured."""

    name: str
    systems: dict[str, SystemResult]
    kernels: list[dict]
    max_abs_diff: float | None
    memory: dict
    rounds: int
    threads: int
    notes: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)    # extra systems left untimed

    def ratio(self, name: str, to: str = ORT) -> float | None:
        if name not in self.systems or to not in self.systems:
            return None
        return self.systems[name].median / self.systems[to].median

    def table(self) -> str:
        """The end-to-end table, the output check, the memory line and the kernel breakdown."""
        rows = [f"{'system':<20} {'median ms':>10} {'spread':>7} {'vs onnxruntime':>15} "
                f"{'peak RSS growth':>16}"]
        for s in self.systems.values():
            r = self.ratio(s.name)
            rows.append(f"{s.name:<20} {s.median * 1e3:>10.4f} {100 * s.spread:>6.1f}% "
                        f"{(f'{r:.2f}x' if r is not None else '-'):>15} "
                        f"{_mib(s.rss_growth):>16}")
        if self.max_abs_diff is not None:
            rows.append(f"outputs: looptune vs onnxruntime, max abs difference "
                        f"{self.max_abs_diff:.3g}")
        rows += [f"{n:<20} not timed: {e}" for n, e in self.errors.items()]
        m = self.memory
        rows.append(f"memory plan: arena {_kib(m['arena_bytes'])} (intermediates without "
                    f"planning {_kib(m['naive_bytes'])}), weights {_kib(m['weight_bytes'])}")
        if self.kernels:
            rows.append(self.kernel_table())
        rows += [f"note: {n}" for n in self.notes]
        return "\n".join(rows)

    def kernel_table(self) -> str:
        total = sum(k["calls"] * k["t"] for k in self.kernels) or 1.0
        rows = [f"per kernel (each timed alone, {self.threads} threads):",
                f"  {'kernel':<44} {'schedule':<9} {'calls':>5} {'ms/call':>9} {'ms':>9} "
                f"{'share':>6}"]
        for k in sorted(self.kernels, key=lambda k: -k["calls"] * k["t"]):
            t = k["calls"] * k["t"]
            rows.append(f"  {k['name'][:44]:<44} {k['schedule']:<9} {k['calls']:>5} "
                        f"{k['t'] * 1e3:>9.4f} {t * 1e3:>9.4f} {100 * t / total:>5.1f}%")
        rows.append(f"  {'sum':<44} {'':<9} {'':>5} {'':>9} {total * 1e3:>9.4f}")
        return "\n".join(rows)


def _kib(n) -> str:
    return f"{n / 1024:.1f} KiB"


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.1f} MiB"


def worker_env(threads: int) -> dict[str, str]:
    """The environment of a looptune worker: this process's, with ``threads`` OpenMP threads
    (idle threads spin briefly, then sleep: looptune's default, see ``runtime_env``, unless you
    set OMP_WAIT_POLICY or GOMP_SPINCOUNT)."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def openmp_note(env: dict) -> str:
    pol = {k: env[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in env}
    who = "looptune's default" if env.get("LOOPTUNE_OPENMP_DEFAULTS") else "yours"
    text = ", ".join(f"{k}={v}" for k, v in pol.items()) or "libgomp's default"
    return (f"OpenMP: {env['OMP_NUM_THREADS']} threads, {text} ({who}) for looptune; the "
            "other systems with their libraries' own thread-pool settings")


class _Worker:
    """A worker process and its JSON-lines channel."""

    def __init__(self, name: str, spec: dict, env: dict, workdir: Path, script=_WORKER):
        self.name = name
        self.err_path = workdir / f"{_KIND.get(name, spec.get('system'))}.stderr"
        self._err = open(self.err_path, "wb")  # noqa: SIM115 - the worker's stderr, closed in close()
        self.proc = subprocess.Popen([sys.executable, str(script), json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, env=env, text=True, bufsize=1)
        self.hello: dict | None = None

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            tail = self.err_path.read_text(errors="replace").strip().splitlines()[-6:]
            raise LooptuneError(f"bench: the {self.name} worker stopped (exit status "
                                f"{self.proc.returncode}): " + " | ".join(tail))
        return json.loads(line)

    def ask(self, cmd: str, **kw) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._err.close()


def _specs(names, onnx_path: str, model, inputs_npz: str, lib: dict, threads: int,
           min_block: float, log, shapes) -> dict[str, dict]:
    base = {"inputs": inputs_npz, "threads": threads, "min_block": min_block}
    specs = {LIB: {**base, "system": "lib", **lib},
             PY: {**base, "system": "python", "model": onnx_path, "log": log,
                  "winograd": bool(getattr(model, "winograd", True)),
                  "shapes": {k: list(v) for k, v in (shapes or {}).items()}},
             ORT: {**base, "system": "onnxruntime", "model": onnx_path}}
    return {n: specs[n] for n in names}


def bench_model(onnx_path, model, inputs: dict[str, np.ndarray], *, log=None, shapes=None,
                rounds: int = 7, threads: int = 2, min_block: float = 0.2,
                systems=SYSTEMS, workdir=None, kernels: bool = True,
                extra: dict | None = None) -> BenchResult:
    """Time ``model`` (``lt.graph.compile`` of the ONNX model ``onnx_path`` with ``log``) and
    ONNX Runtime on ``inputs`` in interleaved rounds (see the module docstring). ``extra``:
    more systems in the same rounds, name -> (worker script speaking _bench_worker's protocol,
    spec; its spec gets ``inputs``, ``threads``, ``min_block``); one whose first line carries
    ``error`` is left out of the rounds, its error in ``BenchResult.errors``."""
    from .export import export_model
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise LooptuneError(f"bench: rounds must be a positive int; got {rounds!r}")
    names = [s for s in SYSTEMS if s in systems]
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="looptune-bench-") if own else workdir)
    workers: dict[str, _Worker] = {}
    try:
        npz = work / "inputs.npz"
        np.savez(npz, **inputs)
        paths = export_model(model, work / "libbench", prefix="bench")
        g = model.graph
        lib = {"so": str(paths["so"]), "prefix": "bench",
               "input_names": list(model.source_graph.inputs),
               "outputs": [[list(g.types[v].shape), g.types[v].dtype] for v in g.outputs]}
        specs = _specs(names, str(onnx_path), model, str(npz), lib, threads, min_block, log,
                       shapes)
        env = worker_env(threads)
        peer = peer_environment(env)       # ONNX Runtime, torch: their own pool settings
        workers = {n: _Worker(n, spec, env if n in (LIB, PY) else peer, work)
                   for n, spec in specs.items()}
        base = {"inputs": str(npz), "threads": threads, "min_block": min_block}
        workers.update({n: _Worker(n, {**base, **spec}, peer, work, script)
                        for n, (script, spec) in (extra or {}).items()})
        for w in workers.values():
            w.hello = w.read()
        errors = {n: w.hello["error"] for n, w in workers.items() if "error" in w.hello}
        names = [n for n in workers if n not in errors]
        res = {n: SystemResult(n) for n in names}
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                time.sleep(SETTLE_S)        # the previous system's idle threads go to sleep
                res[n].times.append(workers[n].ask("time", warmup_s=WARMUP_S)["t"])
        for n in names:
            res[n].rss_growth = workers[n].ask("rss")["rss"] - workers[n].hello["rss0"]
        diff = _max_diff(workers, work)
        ks = workers[PY].ask("kernels")["kernels"] if kernels and PY in workers else []
    finally:
        for w in workers.values():
            w.close()
        if own:
            shutil.rmtree(work, ignore_errors=True)
    mem = model.memory_report()
    notes = [openmp_note(env)]
    ours = [(k.name, k.schedule, k.task.name if k.task else None) for k in model.kernels]
    if ks and ours != [(k["name"], k["schedule"], k.get("task")) for k in ks]:
        notes.append("the python worker compiled other kernels or schedules than the exported "
                     "library (did the code or the log change during the run?): compare "
                     "their rows with care")
    return BenchResult(model.name, res, ks, diff, mem, rounds, threads, notes, errors)


def _max_diff(workers: dict, work: Path) -> float | None:
    if LIB not in workers or ORT not in workers:
        return None
    outs = {}
    for n in (LIB, ORT):
        path = work / f"out_{_KIND[n]}.npz"
        workers[n].ask("save", path=str(path))
        with np.load(path) as z:
            outs[n] = [z[k] for k in sorted(z.files, key=lambda k: int(k.split("_")[1]))]
    return max((float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                for a, b in zip(outs[LIB], outs[ORT]) if a.size), default=0.0)
