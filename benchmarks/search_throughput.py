"""Tuning throughput and quality on sgemm: GA vs random search.

    python benchmarks/search_throughput.py [--n 512] [--trials 200] [--tuners ga,random]

The space is search_efficiency.py's sgemm template (three-level tiles, optional packing of
B, the parallel loop as a knob). For each tuner: best GFLOP/s, the trial at which 95% of that
best was first reached, and candidates measured per minute (wall clock, workers' start-up
included), with the 1-minute load average before and after (other work on the machine makes
timings noisy). Logs go to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import time

from looptune.search import (
    MeasureOption,
    Measurer,
    create_task,
    load_records,
    log_to_file,
    progress_bar,
)
from looptune.search.tuners import make_tuner
from search_efficiency import TASKS  # its sgemm template (se_matmul): one template for both


def run(name: str, task, trials: int, log: str, opt: MeasureOption) -> dict:
    if os.path.exists(log):
        os.remove(log)
    tuner = make_tuner(name, task, seed=0)
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    tuner.tune(trials, opt, callbacks=[log_to_file(log), progress_bar()])
    wall = time.monotonic() - t0
    recs = load_records(log, task)
    rates = [r.gflops or 0.0 for r in recs]
    best = max(rates)
    reach = next(n for n, g in enumerate(rates, 1) if g >= 0.95 * best)
    errors: dict[str, int] = {}
    for r in recs:
        if not r.ok:
            errors[r.error_kind] = errors.get(r.error_kind, 0) + 1
    return {"tuner": name, "trials": len(recs), "best_gflops": round(best, 2),
            "best_ms": round(2 * task.args[0] * task.args[1] * task.args[2] / best / 1e6, 3),
            "trials_to_95pct": reach, "wall_s": round(wall, 1),
            "candidates_per_min": round(len(recs) / wall * 60, 1), "errors": errors,
            "timing_cut_short": sum("cut short" in r.error_msg for r in recs),
            "load_avg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def verify(task, logs: dict[str, str], top: int, rounds: int, opt: MeasureOption) -> dict:
    """Re-measure each tuner's ``top`` configs, interleaved, ``rounds`` times: the best median
    per tuner under the same machine conditions (tuning-time bests are single noisy samples)."""
    picks = {}
    for name, log in logs.items():
        recs = sorted((r for r in load_records(log, task) if r.ok), key=lambda r: r.cost)
        picks[name] = [r.index for r in recs[:top]]
    order = []                                  # interleaved: 1st of each, 2nd of each, ...
    for k in range(top):
        order += [(name, idxs[k]) for name, idxs in picks.items() if k < len(idxs)]
    best: dict[str, float] = {}
    with Measurer(task, opt) as m:
        for _ in range(rounds):
            for name, idx in order:
                (res,) = m.measure([task.config_space.get(idx)])
                if res.ok:
                    best[name] = max(best.get(name, 0.0), res.gflops)
    return {name: round(g, 2) for name, g in best.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--tuners", default="ga,random")
    ap.add_argument("--out", default="build/bench")
    ap.add_argument("--number", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--verify", type=int, default=5, help="re-measure each tuner's top N")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    task = create_task(TASKS["matmul"][0], (args.n, args.n, args.n))
    print(task.config_space)
    opt = MeasureOption(number=args.number, repeat=args.repeat, timeout=10, n_parallel=2)
    results, logs = [], {}
    for name in args.tuners.split(","):
        logs[name] = os.path.join(args.out, f"matmul{args.n}_{name}.jsonl")
        results.append(run(name, task, args.trials, logs[name], opt))
        print(json.dumps(results[-1]), flush=True)
    if args.verify:
        vopt = MeasureOption(number=args.number, repeat=5, timeout=10, n_parallel=1,
                             slow_cutoff=None)
        again = verify(task, logs, args.verify, 3, vopt)
        for r in results:
            r["best_gflops_remeasured"] = again.get(r["tuner"])
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
