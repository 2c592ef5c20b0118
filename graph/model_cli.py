"""``looptune compile MODEL.onnx`` and ``looptune bench MODEL.onnx``: whole models.

```
looptune compile model.onnx -o build/libmodel                  # fallback schedules
looptune compile model.onnx --tune --trials 400 --log model.jsonl -o build/libmodel
looptune compile model.onnx --tune --seconds 600 --log model.jsonl --resume -o build/libmodel
looptune compile model.onnx --log model.jsonl --memory -o build/libmodel
looptune bench model.onnx --log model.jsonl [--inputs data.npz] [--threads 2] [--repeat 7]
```

``compile`` imports the model, optionally tunes every task of it in one run
(``lt.graph.tune``: one budget, one log, a progress line per round; after a kill, the same
command with ``--resume`` continues where the log ends), compiles it with the log's best
schedules (``lt.graph.compile``) and writes one C library (``lt.export_library``):
``int <name>_run(inputs..., outputs...)`` where ``<name>`` is the file name after ``lib``.

``bench`` times the compiled model end to end (the exported library, and ``model(...)`` from
Python) against ONNX Runtime with the same number of threads, each in its own process, in
interleaved rounds, then the time of each kernel (:mod:`looptune.graph.model_bench`).

Mistakes (no such file, not an ONNX model, unsupported operators, a symbolic input shape
without ``--shape``, an ``--inputs`` file missing an input or with a wrong shape) end with one
line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from ..operators import CLIError
from ..search.tuners import TUNERS


def add_parsers(sub, bench: argparse.ArgumentParser) -> None:
    """Add ``looptune compile`` and the model options of ``looptune bench``."""
    c = sub.add_parser("compile", help="compile an ONNX model into one C library (.so .a .h)",
                       description="Import an ONNX model, optionally tune all its kernels in "
                                   "one run, compile it and export one C library.")
    c.add_argument("model", metavar="MODEL", help="an ONNX model file (.onnx)")
    c.add_argument("-o", "--output", required=True, metavar="PATH",
                   help="library path without extension, e.g. build/libmodel")
    _shape_arg(c)
    c.add_argument("--tune", action="store_true",
                   help="tune every kernel of the model first (one budget, one log)")
    c.add_argument("--trials", type=int, default=None,
                   help="with --tune: measurements over all kernels (default: 200, or no "
                        "limit with --seconds)")
    c.add_argument("--seconds", type=float, default=None,
                   help="with --tune: wall-clock budget of the tuning in seconds")
    c.add_argument("--tuner", choices=list(TUNERS), default="gbt",
                   help="with --tune: search strategy per kernel (default: gbt)")
    c.add_argument("--log", action="append", metavar="LOG",
                   help="tuning log: --tune appends to it (default PATH.jsonl); without "
                        "--tune the kernels use its best records")
    c.add_argument("--resume", action="store_true",
                   help="with --tune: continue the log's earlier run (its records count "
                        "against the budget and are not measured again)")
    c.add_argument("--memory", action="store_true",
                   help="print the memory plan: arena vs unplanned, buffers and lifetimes")
    for q in (c, bench):
        q.add_argument("--no-winograd", dest="winograd", action="store_false",
                       help="ONNX models: no 3x3 convolution by Winograd: results within "
                            "float32 rounding "
                            "of the direct sum (Winograd's: within ~1e-5 of the largest)")
    c.set_defaults(func=cmd_compile)
    _shape_arg(bench, models_only=True)
    bench.add_argument("--threads", type=int, default=2,
                       help="ONNX models: threads of looptune and of ONNX Runtime (default: 2)")
    bench.add_argument("--inputs", metavar="NPZ",
                       help="ONNX models: the input arrays by name (default: random, seed 0)")


def _shape_arg(p, models_only: bool = False) -> None:
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D,D,...",
                   help=("ONNX models: " if models_only else "") +
                   "a static shape for an input with symbolic dimensions (repeatable)")


def _logs(ns) -> list[str]:
    logs = ns.log or []
    return [logs] if isinstance(logs, str) else list(logs)


def _load(ns):
    from .cli import load, parse_shapes
    return load(ns.model, parse_shapes(ns.shape))


# ---- compile -----------------------------------------------------------------------------------

def cmd_compile(ns: argparse.Namespace) -> int:
    """Run ``looptune compile``."""
    import looptune as lt
    out = Path(ns.output)
    if out.is_dir():
        raise CLIError(f"-o {out}: it is a folder; give the library path without extension, "
                       f"e.g. {out / 'libmodel'}")
    logs = _logs(ns)
    _check_tune_args(ns, logs)
    g = _load(ns)
    log = (logs[0] if logs else str(out) + ".jsonl") if ns.tune else None
    tasks = _tasks_to_tune(g, ns, log) if ns.tune else None
    print(f"model {ns.model}: graph '{g.name}', {len(g.nodes)} nodes, inputs "
          + ", ".join(f"{v} {g.types[v]}" for v in g.inputs), file=sys.stderr)
    if ns.tune:
        status = _tune(g, ns, log, tasks)
        if status:
            return status
        logs = [log]
    model = lt.graph.compile(g, log=logs or None, winograd=ns.winograd)
    how = {}
    for k in model.kernels:
        how[k.schedule] = how.get(k.schedule, 0) + 1
    print(f"compiled: {len(model.steps)} kernel calls, {len(model.kernels)} kernels ("
          + ", ".join(f"{n} {s}" for s, n in sorted(how.items())) + " schedules)",
          file=sys.stderr)
    if ns.memory:
        print(memory_text(model.memory_report()))
    paths = lt.export_library(model, out)
    for p in paths.values():
        print(p)
    return 0


def _check_tune_args(ns, logs: list[str]) -> None:
    if not ns.tune:
        extra = [o for o, v in (("--trials", ns.trials), ("--seconds", ns.seconds),
                                ("--resume", ns.resume)) if v]
        if extra:
            raise CLIError(f"{', '.join(extra)}: only with --tune; add --tune (or drop "
                           "them to compile with the log as it is)")
        for f in logs:
            if not Path(f).is_file():
                raise CLIError(f"--log: no such tuning log: {f}")
        return
    if len(logs) > 1:
        raise CLIError(f"--tune writes one log; got --log {' --log '.join(logs)}: give one")
    if ns.trials is not None and ns.trials < 1:
        raise CLIError(f"--trials must be a positive int; got {ns.trials}")
    if ns.seconds is not None and not ns.seconds > 0:
        raise CLIError(f"--seconds must be a positive number; got {ns.seconds:g}")
    log = Path(logs[0] if logs else str(ns.output) + ".jsonl")
    if not log.parent.is_dir() and str(log.parent):
        raise CLIError(f"--log {log}: the folder {log.parent} does not exist")


def _tasks_to_tune(g, ns, log: str) -> list:
    """The model's tasks; a CLIError when ``log`` already holds some of their measurements
    and ``--resume`` is not given."""
    import looptune as lt
    from ..search.log import load_records
    from .tune import extract_tasks
    tasks = extract_tasks(lt.graph.compile(g, winograd=ns.winograd))
    if os.path.exists(log) and not ns.resume:
        keys = {t.task.key for t in tasks}
        held = sum(1 for r in load_records(log)
                   if r.task in keys and getattr(r, "kind", "measure") == "measure")
        if held:
            raise CLIError(f"--log {log} already holds {held} measurements of this model's "
                           "kernels; add --resume to continue that run (they count and are "
                           "not measured again), or give a new --log")
    return tasks


def _tune(g, ns, log: str, tasks: list) -> int:
    from .tune import tune_tasks
    trials = ns.trials if ns.trials is not None else (200 if ns.seconds is None else None)
    budget = " and ".join(([f"{trials} trials"] if trials else []) +
                          ([f"{ns.seconds:g} s"] if ns.seconds else []))
    print(f"tuning {len(tasks)} tasks (" + ", ".join(f"{t.label} x{t.weight}" for t in tasks)
          + f"): {budget} with the {ns.tuner} tuner -> {log}", file=sys.stderr)
    summary = tune_tasks(tasks, trials, ns.seconds, log, tuner=ns.tuner, progress=True,
                         name=g.name)
    print(summary, file=sys.stderr)
    if summary.stopped == "interrupted":
        print(f"looptune compile: interrupted; every measurement is in {log}: the same "
              "command with --resume continues", file=sys.stderr)
        return 130
    return 0


def memory_text(rep: dict) -> str:
    """The memory report as text: the arena against the sum of the intermediates, then each
    buffer with its offset, size, lifetime (in steps) and values."""
    arena, naive = rep["arena_bytes"], rep["naive_bytes"]
    saved = f" ({100 * (1 - arena / naive):.0f}% less)" if naive else ""
    lines = [f"memory: arena {arena} B planned vs {naive} B for every intermediate in its own "
             f"buffer{saved}; peak live {rep.get('peak_live_bytes', '-')} B; inputs "
             f"{rep.get('input_bytes', 0)} B, outputs {rep.get('output_bytes', 0)} B, "
             f"weights {rep.get('weight_bytes', 0)} B outside the arena"]
    bufs = rep.get("buffers", [])
    if bufs:
        lines.append(f"  {'buffer':>6} {'offset':>10} {'bytes':>10} {'steps':>9}  values")
        for b in bufs:
            lines.append(f"  {b['index']:>6} {b['offset']:>10} {b['bytes']:>10} "
                         f"{b['start']:>4}-{b['end']:<4}  {', '.join(b['values'])}")
    for step, inp, outp in rep.get("inplace", []):
        lines.append(f"  in place: step {step} writes {outp} over {inp}")
    return "\n".join(lines)


# ---- bench -------------------------------------------------------------------------------------

def cmd_bench_model(ns: argparse.Namespace) -> int:
    """Run ``looptune bench MODEL.onnx``."""
    import looptune as lt

    from .model_bench import bench_model
    if len(ns.files) != 1:
        raise CLIError(f"bench times one ONNX model at a time; got {len(ns.files)} files "
                       f"({', '.join(ns.files)})")
    ns.model = ns.files[0]
    if ns.threads < 1:
        raise CLIError(f"--threads must be a positive int; got {ns.threads}")
    logs = _logs(ns)
    for f in logs:
        if not Path(f).is_file():
            raise CLIError(f"--log: no such tuning log: {f}")
    g = _load(ns)
    inputs = read_inputs(g, ns.inputs) if ns.inputs else random_inputs(g)
    model = lt.graph.compile(g, log=logs or None, winograd=ns.winograd)
    print(f"bench {ns.model}: graph '{g.name}', {len(model.steps)} kernel calls, "
          f"{len(model.kernels)} kernels, log {', '.join(logs) or 'none (fallback schedules)'}"
          f"; {ns.threads} threads, {ns.repeat} interleaved rounds", file=sys.stderr)
    shapes = {v: g.types[v].shape for v in g.inputs}
    res = bench_model(ns.model, model, inputs, log=logs or None, shapes=shapes,
                      rounds=ns.repeat, threads=ns.threads)
    print(res.table())
    return 0


def random_inputs(g, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for v in g.inputs:
        t = g.types[v]
        d = np.dtype(t.dtype)
        out[v] = rng.standard_normal(t.shape).astype(d) if d.kind == "f" else \
            rng.integers(0, 2, t.shape).astype(d)
    return out


def read_inputs(g, path: str) -> dict[str, np.ndarray]:
    """The ``--inputs`` arrays, each checked against the model's input."""
    if not Path(path).is_file():
        raise CLIError(f"--inputs: no such file: {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise CLIError(f"--inputs {path}: not a .npz of arrays ({e})") from None
    held = ", ".join(sorted(arrays)) or "nothing"
    for v in g.inputs:
        t = g.types[v]
        if v not in arrays:
            raise CLIError(f"--inputs {path}: no array for input '{v}' (the file holds: "
                           f"{held}); save it with np.savez(path, **{{'{v}': array}})")
        a = arrays[v]
        if tuple(a.shape) != t.shape:
            raise CLIError(f"--inputs {path}: input '{v}' has shape {tuple(a.shape)}; the "
                           f"model declares {t.shape}")
        if a.dtype.name != t.dtype:
            raise CLIError(f"--inputs {path}: input '{v}' has dtype {a.dtype}; the model "
                           f"declares {t.dtype}")
    extra = sorted(set(arrays) - set(g.inputs))
    if extra:
        raise CLIError(f"--inputs {path}: arrays {', '.join(extra)} are not inputs of the "
                       f"model (its inputs: {', '.join(g.inputs)})")
    return {v: np.ascontiguousarray(arrays[v]) for v in g.inputs}

