"""Re-measure the best configs of search_efficiency runs under the same machine conditions.

    python benchmarks/remeasure_best.py conv2d 0 gbt gbt-transfer [--out build/se200] [--top 5]

A tuning log's best is one noisy sample. This takes the ``--top`` configs of each named
tuner's log for one task and seed, measures them interleaved (1st of each, 2nd of each, ...)
for 3 rounds, and prints each tuner's best median GFLOP/s.
"""
from __future__ import annotations

import argparse
import os

from looptune.search import MeasureOption, create_task
from search_efficiency import TASKS
from search_throughput import verify


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", choices=sorted(TASKS))
    ap.add_argument("seed", type=int)
    ap.add_argument("tuners", nargs="+")
    ap.add_argument("--out", default="build/search_efficiency")
    ap.add_argument("--top", type=int, default=5)
    a = ap.parse_args()
    task = create_task(*TASKS[a.task])
    logs = {t: os.path.join(a.out, f"{a.task}_{t}_{a.seed}.jsonl") for t in a.tuners}
    for t, p in logs.items():
        if not os.path.exists(p):
            raise SystemExit(f"no log {p} for tuner {t!r}; run search_efficiency.py first")
    opt = MeasureOption(number=3, repeat=5, timeout=10, n_parallel=1, slow_cutoff=None)
    print(a.task, a.seed, verify(task, logs, a.top, 3, opt))


if __name__ == "__main__":
    main()
