"""Whole models end to end: looptune (tuned or not) against ONNX Runtime, in one run.

    python benchmarks/models.py [--models cnn,resnet_stage,mlp,transformer] \
        [--trials N | --seconds S] [--log-dir build/model_logs] [--rounds 7] [--threads 2]

The four models of issue 18, built with onnx.helper (looptune.graph.zoo's builders, at
benchmark sizes; batch 1 unless said):

``--no-winograd`` compiles every convolution in its direct form (``lt.graph.compile(...,
winograd=False)``; by default a 3x3 stride-1 one with enough channels runs by Winograd).

- ``cnn``: the small CNN, (Conv-BN-Relu-MaxPool) x 3 (32, 64, 128 channels) on a batch of 8
  3x32x32 images, GlobalAveragePool, Gemm,
  Softmax;
- ``resnet_stage``: a ResNet-18 stage block, Conv-BN-Relu, Conv-BN, the residual Add, Relu on
  64x56x56;
- ``mlp``: batch 64, Gemm 1024 -> 4096 + Relu, Gemm 4096 -> 1024;
- ``transformer``: one encoder layer, sequence 128, d 256, 4 heads, feed-forward 1024 (GELU in
  its Erf form, a decomposed second layer norm, as torch exports it).

With ``--trials``/``--seconds`` each model is first tuned (``lt.graph.tune``: one budget per
model, its log in ``--log-dir``, resumed when the log exists), then compiled with its log.
Each model is then timed by :func:`looptune.graph.model_bench.bench_model`: the exported C
library, ``model(...)`` from Python and an ONNX Runtime session (CPU execution provider,
``--threads`` intra-op threads), each in its own process, ``--rounds`` interleaved rounds,
medians. The closing table gives each median, the ratio to ONNX Runtime, the spread, the
planned arena against the unplanned intermediates, and each system's peak resident memory
growth (the model's weights, arena and runtime buffers; the runtime's code excluded). torch
eager / torch.compile rows are added only where torch is installed (it is not a dependency).
On a machine shared with other work the figures are indicative: compare ratios, run twice.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import models_torch  # benchmarks/models_torch.py: the torch rows (torch optional)

from looptune.graph import zoo as test_models


def mlp(batch: int = 64, d: int = 1024, hidden: int = 4096) -> onnx.ModelProto:
    """Gemm(transB=1) + Relu, Gemm(transB=1): torch.nn.Linear as exported."""
    rng = np.random.default_rng(5)

    def w(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype("float32"),
                                       name)
    inits = [w("fc1.weight", (hidden, d), d ** -0.5), w("fc1.bias", (hidden,), 0.1),
             w("fc2.weight", (d, hidden), hidden ** -0.5), w("fc2.bias", (d,), 0.1)]
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, d])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    return m


MODELS = {
    "cnn": lambda: test_models.cnn(batch=8, size=32, channels=(32, 64, 128)),
    "resnet_stage": lambda: test_models.residual(batch=1, channels=64, size=56),
    "mlp": mlp,
    "transformer": lambda: test_models.transformer(batch=1, seq=128, d=256, heads=4, ffn=1024),
}


def run_model(name: str, work: Path, ns) -> dict:
    """Tune (optionally), compile and time one model; its row of the closing table."""
    import looptune as lt
    from looptune.graph.model_bench import bench_model
    proto = MODELS[name]()
    path = work / f"{name}.onnx"
    onnx.save(proto, path)
    g = lt.graph.from_onnx(path)
    log = None
    tuned = ""
    if ns.trials or ns.seconds:
        log = Path(ns.log_dir) / f"{name}.jsonl"
        log.parent.mkdir(parents=True, exist_ok=True)
        src = g if ns.winograd else lt.graph.compile(g, winograd=False)   # its own tasks
        s = lt.graph.tune(src, trials=ns.trials, seconds=ns.seconds, log_file=log,
                          progress=True)
        print(s, file=sys.stderr)
        tuned = f"{s.trials} trials"
    t0 = time.perf_counter()
    model = lt.graph.compile(g, log=str(log) if log else None, winograd=ns.winograd)
    compile_s = time.perf_counter() - t0
    inputs = test_models.random_inputs(proto)
    extra = models_torch.extra_systems(name, path, inputs, work, ns.threads)
    res = bench_model(path, model, inputs, log=str(log) if log else None, rounds=ns.rounds,
                      threads=ns.threads, min_block=ns.min_block, extra=extra)
    print(f"\n== {name}: {len(model.steps)} kernel calls, {len(model.kernels)} kernels, "
          f"compiled in {compile_s:.1f} s{', ' + tuned if tuned else ''}")
    print(res.table())
    sys.stdout.flush()
    sy = res.systems
    mem = res.memory
    return {"model": name, "tuned": tuned or "no", "kernels": len(model.kernels),
            "steps": len(model.steps),
            **{f"{k}_ms": v.median * 1e3 for k, v in sy.items()},
            **{f"{k}_spread": v.spread for k, v in sy.items()},
            **{f"{k}_rss": v.rss_growth for k, v in sy.items()},
            "ratio": res.ratio("looptune"), "arena": mem["arena_bytes"],
            "naive": mem["naive_bytes"], "weights": mem["weight_bytes"],
            "max_abs_diff": res.max_abs_diff, "errors": res.errors}


def table(rows: list[dict]) -> str:
    head = ("| model | tuned | looptune ms | ONNX Runtime ms | looptune / ORT | looptune "
            "(python) ms | arena KiB (unplanned) | peak RSS growth looptune / ORT MiB | "
            "torch eager ms | torch.compile ms |")
    out = [head, "|" + "---|" * 10]
    for r in rows:
        out.append(f"| {r['model']} | {r['tuned']} | {r['looptune_ms']:.3f} "
                   f"(±{100 * r['looptune_spread']:.0f}%) | {r['onnxruntime_ms']:.3f} "
                   f"(±{100 * r['onnxruntime_spread']:.0f}%) | {r['ratio']:.2f}x | "
                   f"{r['looptune (python)_ms']:.3f} | {r['arena'] / 1024:.0f} "
                   f"({r['naive'] / 1024:.0f}) | {r['looptune_rss'] / 2**20:.1f} / "
                   f"{r['onnxruntime_rss'] / 2**20:.1f} | " + models_torch.cells(r))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--trials", type=int, default=None, help="tune each model first")
    ap.add_argument("--seconds", type=float, default=None, help="tune each model first")
    ap.add_argument("--log-dir", default="build/model_logs")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-block", type=float, default=0.2, help="seconds per timed block")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--no-winograd", dest="winograd", action="store_false",
                    help="no 3x3 convolution by Winograd (lt.graph.compile(winograd=False))")
    ns = ap.parse_args(argv)
    names = [n for n in ns.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    print(models_torch.note(), file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory(prefix="looptune-models-") as tmp:
        for n in names:
            rows.append(run_model(n, Path(tmp), ns))
    print("\n" + table(rows))
    print(f"\n(host: {os.cpu_count()} CPUs; {ns.threads} threads per system; {ns.rounds} "
          "interleaved rounds; medians)")
    if ns.json:
        Path(ns.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
