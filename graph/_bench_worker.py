"""One system of a model benchmark, in its own process (see :mod:`looptune.graph.model_bench`).

Run as a script (``python _bench_worker.py SPEC_JSON``): the process of the exported C library
or of ONNX Runtime imports neither looptune nor the other system. It answers JSON lines on its
stdout (one per command read from stdin):

- at start: ``{"ready": true, "number": calls per timed block, "rss0": baseline bytes, ...}``;
- ``{"cmd": "time", "warmup_s": W}`` -> ``{"t": seconds per call}`` (untimed calls for W
  seconds, at least one, then ``number`` timed calls);
- ``{"cmd": "save", "path": P}`` -> the outputs of one call written to the ``.npz`` ``P``;
- ``{"cmd": "rss"}`` -> ``{"rss": peak resident bytes}``;
- ``{"cmd": "kernels"}`` (python only) -> per kernel: calls, seconds per call;
- ``{"cmd": "quit"}``.
"""
from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
import time


def _peak_rss() -> int:
    """This process image's peak resident bytes (VmHWM; ``ru_maxrss`` would carry over the
    parent's peak from before ``exec``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _lib_runner(spec: dict, inputs: dict):
    import numpy as np
    lib = ctypes.CDLL(spec["so"])
    fn = getattr(lib, spec["prefix"] + "_run")
    fn.restype = ctypes.c_int
    ins = [np.ascontiguousarray(inputs[n]) for n in spec["input_names"]]
    outs = [np.empty(tuple(s), d) for s, d in spec["outputs"]]
    ptrs = [ctypes.c_void_p(a.ctypes.data) for a in ins + outs]
    fn.argtypes = [ctypes.c_void_p] * len(ptrs)

    def run():
        rc = fn(*ptrs)
        if rc != 0:
            raise RuntimeError(f"{spec['prefix']}_run returned {rc}")
        return outs
    return run


def _ort_runner(spec: dict, inputs: dict):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = spec["threads"]
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(spec["model"], so, providers=["CPUExecutionProvider"])
    feeds = {i.name: inputs[i.name] for i in sess.get_inputs()}
    return lambda: sess.run(None, feeds)


class _Python:
    """The compiled model called from Python (``model(...)``), and its kernels one by one."""

    def __init__(self, spec: dict, inputs: dict):
        import looptune as lt
        g = lt.graph.from_onnx(spec["model"], shapes={k: tuple(v) for k, v in
                                                       spec.get("shapes", {}).items()})
        self.model = lt.graph.compile(g, log=spec.get("log"),
                                      winograd=spec.get("winograd", True))
        self.inputs = [inputs[n] for n in g.inputs]

    def run(self):
        return self.model(*self.inputs)

    def kernels(self, min_block: float) -> list[dict]:
        import numpy as np
        rng = np.random.default_rng(0)
        out = []
        for k, kern in enumerate(self.model.kernels):
            calls = sum(1 for st in self.model.steps if st.kernel == k)
            mod = kern.module
            arrays = [rng.uniform(-1, 1, tuple(int(s) for s in t.shape)).astype(t.dtype)
                      if np.dtype(t.dtype).kind == "f" else
                      np.zeros(tuple(int(s) for s in t.shape), t.dtype) for t in mod.args]
            res = mod.time(*arrays, number=1, repeat=5, min_repeat_ms=min_block * 1e3 / 5)
            out.append({"name": kern.name, "schedule": kern.schedule, "calls": calls,
                        "t": res.median, "task": kern.task.name if kern.task else None})
        return out


def _calibrate(run, min_block: float) -> int:
    run()
    n, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            run()
        t = time.perf_counter() - t0
        if t >= min_block / 4 or n >= 1 << 20:
            break
        n *= 2
    return max(1, int(n * min_block / max(t, 1e-9)))


def _block(run, number: int, warmup_s: float = 0.0) -> float:
    """Seconds per call of ``number`` calls, after at least one untimed call and
    ``warmup_s`` of them."""
    run()
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        run()
    t0 = time.perf_counter()
    for _ in range(number):
        run()
    return (time.perf_counter() - t0) / number


def main() -> None:
    spec = json.loads(sys.argv[1])
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                       # stray prints of the libraries go to stderr
    import numpy as np
    with np.load(spec["inputs"]) as z:
        inputs = {k: z[k] for k in z.files}
    if spec["system"] == "onnxruntime":      # the runtime's code is not the model's memory
        import onnxruntime  # noqa: F401
    elif spec["system"] == "python":
        import looptune  # noqa: F401
    rss0 = _peak_rss()
    py = None
    if spec["system"] == "lib":
        run = _lib_runner(spec, inputs)
    elif spec["system"] == "onnxruntime":
        run = _ort_runner(spec, inputs)
    else:
        py = _Python(spec, inputs)
        run = py.run
    number = _calibrate(run, spec["min_block"])
    out.write(json.dumps({"ready": True, "number": number, "rss0": rss0}) + "\n")
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg["cmd"]
        if cmd == "time":
            reply = {"t": _block(run, number, msg.get("warmup_s", 0.0))}
        elif cmd == "save":
            outs = run()
            np.savez(json.loads(line)["path"], *[np.asarray(o) for o in outs])
            reply = {"saved": True}
        elif cmd == "rss":
            reply = {"rss": _peak_rss()}
        elif cmd == "kernels" and py is not None:
            reply = {"kernels": py.kernels(spec["min_block"])}
        else:
            break
        out.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
