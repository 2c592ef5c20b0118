"""A tuning run in its own process, for the kill -9 and Ctrl-C tests.

usage: python helpers_tune_script.py LOG N_TRIAL SEED
Prints ``BEST <index> TRIALS <n>`` when tune returns.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import helpers_templates  # noqa: E402,F401
from looptune.search import MeasureOption, RandomTuner, create_task, log_to_file  # noqa: E402


def main(log: str, n_trial: int, seed: int) -> None:
    task = create_task("test_matmul", (32, 32, 32))
    tuner = RandomTuner(task, seed=seed)
    best = tuner.tune(n_trial, MeasureOption(number=2, repeat=2, timeout=5, n_parallel=2),
                      callbacks=[log_to_file(log)], resume=True)
    print(f"BEST {best.config.index} TRIALS {tuner.trials}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
