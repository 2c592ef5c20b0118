"""Template-free auto scheduling against the hand schedules and numpy, for every example.

    python benchmarks/auto_schedule.py [--ops matmul,softmax,...] [--trials 200] [--tuner gbt]
        [--out build/auto] [--rounds 7] [--args matmul=256,256,256;softmax=512,1024]

For each example operator (every operator of examples/*.py by default, at its default,
benchmark size unless ``--args`` gives others) this tunes
``lt.search.auto_schedule(algorithm(*args))`` for ``--trials`` trials (all tuning first, so
that no tuning worker runs during the timings), then times, in one run and with the same
inputs, the auto-scheduled best, the example's hand schedule and the numpy reference in
``--rounds`` interleaved rounds (``report.timed_side_by_side``: each round times every side
once, in a rotated order, after a pause; each result checked against numpy first). Printed:
medians over the rounds with their spread (half the range), the auto schedule's GFLOP/s, and
``auto/hand`` = hand time / auto time (above 1: the auto schedule is faster). The fallback
schedule (config 0, what the graph compiler builds without a log) is timed too.

Logs go to ``--out``; a rerun resumes them (with as many trials, it only times: "tune s" is
then the time to read the log). Timings taken while other work shares the machine are not
trustworthy; compare only ratios from one quiet run.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import looptune as lt
from looptune.operators import load_operators
from looptune.report import timed_side_by_side
from looptune.search import MeasureOption, auto_task
from looptune.search.coreload import StealMeter, steal_note

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _operators() -> dict:
    return {op.name: op for f in sorted(EXAMPLES.glob("*.py"))
            for op in load_operators(str(f))}


def _sizes(text: str) -> dict[str, tuple]:
    out = {}
    for part in filter(None, (text or "").split(";")):
        name, _, vals = part.partition("=")
        out[name.strip()] = tuple(int(v) for v in vals.split(","))
    return out


def _tensors(op, args) -> list:
    out = op.algorithm(*args)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _tune(ops, sizes, a) -> dict:
    """Tune every operator first (no worker process survives into the timings)."""
    tuned = {}
    for name in ops:
        op, args = ops[name], sizes.get(name, ops[name].default_args)
        tensors = _tensors(op, args)
        t0 = time.perf_counter()
        s = lt.search.auto_schedule(tensors, trials=a.trials, tuner=a.tuner,
                                    log_file=os.path.join(a.out, f"{name}.jsonl"),
                                    measure_option=MeasureOption(number=3, repeat=3,
                                                                 timeout=20),
                                    progress=a.progress)
        tuned[name] = (args, s, tensors, time.perf_counter() - t0)
    return tuned


def _trials(log: str) -> int:
    """The distinct configs measured in ``log`` (fewer than ``--trials`` when the space, or
    the programs it holds, ran out first)."""
    with open(log) as f:
        return len({json.loads(line)["config"]["index"] for line in f
                    if line.strip() and json.loads(line).get("kind", "measure") == "measure"})


def _row(op, args, s, tensors, tune_s, a) -> tuple:
    fallback, ftensors = auto_task(_tensors(op, args)).instantiate(0)
    hs, htensors = op.hand_schedule(*args)
    t, flop = timed_side_by_side(op, args, {"auto": (s, tensors), "fallback":
                                            (fallback, ftensors), "hand": (hs, htensors)},
                                 "c", a.rounds)
    gf = f"{flop / t['auto'].median / 1e9:.1f}" if flop else "-"
    return (op.name, "x".join(map(str, args)),
            str(_trials(os.path.join(a.out, f"{op.name}.jsonl"))), f"{tune_s:.0f}", str(t["auto"]),
            str(t["fallback"]), str(t["hand"]), str(t["numpy"]), gf,
            f"{t['hand'].median / t['auto'].median:.2f}",
            f"{t['numpy'].median / t['auto'].median:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="", help="comma-separated operator names (default: all)")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--tuner", default="gbt")
    ap.add_argument("--out", default="build/auto")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--args", default="", help="sizes per operator: name=1,2,3;name2=4,5")
    ap.add_argument("--progress", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    every = _operators()
    names = [n for n in a.ops.split(",") if n] or list(every)
    unknown = [n for n in names if n not in every]
    if unknown:
        ap.error(f"unknown operators {unknown}; the examples define {sorted(every)}")
    steal = StealMeter()
    tuned = _tune({n: every[n] for n in names}, _sizes(a.args), a)
    tuning_steal = steal.share()
    time.sleep(2)                                # the tuning's worker processes are gone
    steal = StealMeter()
    rows = [("operator", "sizes", "trials", "tune s", "auto ms", "fallback ms", "hand ms",
             "numpy ms", "auto GFLOP/s", "auto/hand", "auto/numpy")]
    for name, (args, s, tensors, tune_s) in tuned.items():
        rows.append(_row(every[name], args, s, tensors, tune_s, a))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    print("\n".join("  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in rows))
    print(f"(medians of {a.rounds} interleaved rounds, ± half the range; auto/hand and "
          "auto/numpy are speedups of the auto schedule: > 1 is faster)")
    print(f"tuning: {steal_note(tuning_steal)}")
    print(f"timing: {steal_note(steal.share())}")


if __name__ == "__main__":
    main()
