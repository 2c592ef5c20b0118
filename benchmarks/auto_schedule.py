"""Template-free auto scheduling against the hand schedules and numpy.

    python benchmarks/auto_schedule.py [--ops matmul,conv2d,softmax,blur] [--trials 64]
        [--tuner gbt] [--out build/auto] [--repeat 7]

For each example operator (at its default, benchmark size) this tunes
``lt.search.auto_schedule(algorithm(*args))`` for ``--trials`` trials, then times in one run,
with the same inputs, warm-up and medians as ``looptune bench``: the auto-scheduled best, the
example's hand schedule and the numpy reference (all tuning first, then all timing). Logs go
to ``--out``; a rerun resumes them (with as many trials, it only times: "tune s" is then the
time to read the log).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import looptune as lt
from looptune.operators import load_operators
from looptune.report import time_op
from looptune.search import MeasureOption

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="matmul,conv2d,softmax,blur")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--tuner", default="gbt")
    ap.add_argument("--out", default="build/auto")
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ops = {op.name: op for f in sorted(EXAMPLES.glob("*.py")) for op in load_operators(str(f))}
    rows = [("operator", "sizes", "trials", "tune s", "auto ms", "hand ms", "numpy ms",
             "auto GFLOP/s", "auto/hand")]
    tuned = {}
    for name in a.ops.split(","):               # tune everything first, then time in quiet
        op = ops[name]
        out = op.algorithm(*op.default_args)
        tensors = list(out) if isinstance(out, (list, tuple)) else [out]
        t0 = time.perf_counter()
        s = lt.search.auto_schedule(tensors, trials=a.trials, tuner=a.tuner,
                                    log_file=os.path.join(a.out, f"{name}.jsonl"),
                                    measure_option=MeasureOption(number=3, repeat=3,
                                                                 timeout=10),
                                    progress=True)
        tuned[name] = (s, tensors, time.perf_counter() - t0)
    time.sleep(2)                                # the tuning's worker processes are gone
    for name, (s, tensors, tune_s) in tuned.items():
        op = ops[name]
        args = op.default_args
        ta, tn, flop = time_op(op, args, s, tensors, "c", a.repeat)
        hs, htensors = op.hand_schedule(*args)
        th, _, _ = time_op(op, args, hs, htensors, "c", a.repeat)
        gf = f"{flop / ta / 1e9:.1f}" if flop else "-"
        rows.append((name, "x".join(map(str, args)), str(a.trials), f"{tune_s:.0f}",
                     f"{ta * 1e3:.3f}", f"{th * 1e3:.3f}", f"{tn * 1e3:.3f}", gf,
                     f"{ta / th:.2f}"))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    print("\n".join("  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows))


if __name__ == "__main__":
    main()
