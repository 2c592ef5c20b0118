"""torch eager and torch.compile rows of benchmarks/models.py, where torch is installed.

```python
extra = models_torch.extra_systems("cnn", "cnn.onnx", inputs, workdir, threads=2)
res = bench_model("cnn.onnx", model, inputs, threads=2, extra=extra)   # the same rounds
models_torch.cells(row)        # "0.123 (0.91x) | 0.101 (0.75x)", an error, or not installed
```

Each model runs as its torch twin (:mod:`torch_twins`: a ``torch.nn.Module`` built from the
ONNX model's initializers, op for op). Each torch system is a worker process, this file run as
a script (``python benchmarks/models_torch.py SPEC_JSON``) that speaks the JSON-lines protocol
of graph/_bench_worker.py, so :func:`looptune.graph.model_bench.bench_model` times it in the
same interleaved rounds as the exported library and ONNX Runtime:

- ``torch eager``: the twin called under ``torch.inference_mode()``;
- ``torch.compile``: ``torch.compile(twin)`` (mode default, inductor), compiled by its first
  call before any timing.

Both run with ``torch.set_num_threads(threads)``, one inter-op thread and the benchmark's
OpenMP environment. Before timing, each worker checks its outputs against ONNX Runtime's
(computed here, in the parent, by :func:`extra_systems`): the largest absolute difference over
the largest absolute reference value must stay within ``RTOL`` (1e-4). A worker whose check
fails, or whose ``torch.compile`` fails, answers its error instead of ``ready``; bench_model
then leaves it out of the rounds and the row carries the error. The worker imports neither
looptune nor ONNX Runtime (graph/_bench_worker.py's helpers are loaded from their file). Its
baseline memory is taken after ``import torch`` (and ``torch._dynamo`` for torch.compile):
the growth counts the weights, the compiled code and the compiler's caches.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
EAGER, COMPILE = "torch eager", "torch.compile"
SYSTEMS = (EAGER, COMPILE)
RTOL = 1e-4


class WorkerError(RuntimeError):
    """A torch system that cannot be timed (outputs off, or torch.compile failed)."""


def available() -> bool:
    """Whether torch can be imported here (it is not a dependency of looptune)."""
    return importlib.util.find_spec("torch") is not None


def note() -> str:
    """One line for the benchmark's start: which torch rows it will have."""
    if not available():
        return "note: torch is not installed: the torch eager / torch.compile rows say so"
    from importlib.metadata import PackageNotFoundError, version
    try:
        v = version("torch")
    except PackageNotFoundError:
        v = "unknown version"
    return f"note: torch {v}: torch eager and torch.compile rows (each in its own process)"


def reference(onnx_path, inputs: dict[str, np.ndarray], threads: int) -> list[np.ndarray]:
    """ONNX Runtime's outputs (CPU execution provider) for ``inputs``."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: inputs[i.name] for i in sess.get_inputs()})


def rel_diff(outs, ref) -> float:
    """The largest absolute difference over the largest absolute reference value, over all
    outputs (a norm-wise relative error: element-wise ones blow up on near-zero values)."""
    if len(outs) != len(ref):
        raise WorkerError(f"{len(outs)} outputs against onnxruntime's {len(ref)}")
    worst = 0.0
    for o, r in zip(outs, ref):
        o, r = np.asarray(o, np.float64), np.asarray(r, np.float64)
        if o.shape != r.shape:
            raise WorkerError(f"an output of shape {o.shape} against onnxruntime's {r.shape}")
        if r.size:
            worst = max(worst, float(np.max(np.abs(o - r)) / max(np.max(np.abs(r)), 1e-30)))
    return worst


def extra_systems(name: str, onnx_path, inputs: dict[str, np.ndarray], workdir,
                  threads: int, backend: str = "inductor") -> dict[str, tuple[str, dict]]:
    """bench_model's ``extra`` for model ``name`` (benchmarks/models.py's MODELS key) saved at
    ``onnx_path``: the two torch workers (script, spec), or nothing without torch. Writes ONNX
    Runtime's outputs for ``inputs`` into ``workdir`` as the workers' reference."""
    if not available():
        return {}
    ref = Path(workdir) / f"{name}.onnxruntime_outputs.npz"
    np.savez(ref, *reference(onnx_path, inputs, threads))
    base = {"name": name, "model": str(onnx_path), "reference": str(ref), "rtol": RTOL}
    me = str(Path(__file__).resolve())
    return {EAGER: (me, {**base, "system": "torch_eager", "mode": "eager"}),
            COMPILE: (me, {**base, "system": "torch_compile", "mode": "compile",
                           "backend": backend})}


def cells(row: dict) -> str:
    """The torch eager and torch.compile cells of a benchmarks/models.py row ("ms (ratio to
    ONNX Runtime)", the system's error, or "torch not installed"), ending with a ``|``."""
    out = []
    for s in SYSTEMS:
        if not available():
            out.append("torch not installed")
        elif s in row.get("errors", {}):
            out.append(row["errors"][s].replace("|", "/")[:160])
        elif f"{s}_ms" in row:
            ms = row[f"{s}_ms"]
            out.append(f"{ms:.3f} ({ms / row['onnxruntime_ms']:.2f}x)")
        else:
            out.append("-")
    return " | ".join(out) + " |"


# -- the worker ----------------------------------------------------------------------------

def _bench_worker():
    """graph/_bench_worker.py's helpers (timing blocks, peak RSS), without importing the
    looptune package into the torch process."""
    spec = importlib.util.spec_from_file_location("_looptune_bench_worker",
                                                  HERE.parent / "graph" / "_bench_worker.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def prepare(spec: dict, inputs: dict[str, np.ndarray]):
    """The twin of ``spec['name']`` (eager or compiled, per ``spec['mode']``) as a call
    returning its output tensors, checked against the reference outputs in ``spec['reference']``
    within ``spec['rtol']``. Raises WorkerError (or torch_twins.TwinError) if it cannot be
    timed. Call it under ``torch.inference_mode()``."""
    import onnx
    import torch
    sys.path.insert(0, str(HERE))
    import torch_twins
    proto = onnx.load(spec["model"])
    inits = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in inits]
    module = torch_twins.build(spec["name"], proto)
    del proto
    xs = [torch.from_numpy(np.ascontiguousarray(inputs[n])) for n in names]
    with np.load(spec["reference"]) as z:
        ref = [z[k] for k in sorted(z.files, key=lambda k: int(k.split("_")[1]))]
    fn = module
    what = "torch eager"
    if spec["mode"] == "compile":
        what = "torch.compile"
        try:
            fn = torch.compile(module, backend=spec.get("backend", "inductor"))
            fn(*xs)                                       # compiles
        except Exception as e:                            # any compiler failure is the row
            raise WorkerError(f"torch.compile failed: {_one_line(e)}") from e

    def run():
        out = fn(*xs)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    d = rel_diff([t.numpy() for t in run()], ref)
    if not d <= spec["rtol"]:
        raise WorkerError(f"{what} outputs differ from onnxruntime's by {d:.3g} (relative to "
                          f"the largest output; limit {spec['rtol']:g}): not timed")
    return run


def _serve(spec: dict, out, bw) -> None:
    import torch
    with np.load(spec["inputs"]) as z:
        inputs = {k: z[k] for k in z.files}
    rss0 = bw._peak_rss()
    try:
        run = prepare(spec, inputs)
        number = bw._calibrate(run, spec["min_block"])
    except Exception as e:  # noqa: BLE001 - any failure to prepare is the row's error
        err = str(e) if isinstance(e, WorkerError) else _one_line(e)
        out.write(json.dumps({"ready": False, "error": err, "rss0": rss0}) + "\n")
        return
    out.write(json.dumps({"ready": True, "number": number, "rss0": rss0,
                          "torch": torch.__version__}) + "\n")
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "time":
            reply = {"t": bw._block(run, number, msg.get("warmup_s", 0.0))}
        elif msg["cmd"] == "save":
            np.savez(msg["path"], *[t.numpy() for t in run()])
            reply = {"saved": True}
        elif msg["cmd"] == "rss":
            reply = {"rss": bw._peak_rss()}
        else:
            break
        out.write(json.dumps(reply) + "\n")


def main(argv: list[str] | None = None) -> None:
    """The worker: ``python benchmarks/models_torch.py SPEC_JSON`` (see the module doc)."""
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                       # stray prints of the libraries go to stderr
    bw = _bench_worker()
    import torch
    torch.set_num_threads(spec["threads"])
    torch.set_num_interop_threads(1)
    if spec["mode"] == "compile":
        import torch._dynamo  # the compiler's code is not the model's memory
    with torch.inference_mode():
        _serve(spec, out, bw)


if __name__ == "__main__":
    main()
