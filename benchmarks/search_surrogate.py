"""Tuners replayed against a landscape fitted to logged measurements: many seeds in minutes.

    python benchmarks/search_surrogate.py --logs 'build/eff_s2*/auto_softmax_*.jsonl'
        [--workload auto_softmax] [--tuners random,gbt] [--trials 200] [--seeds 0-19]
        [--noise 0.08] [--repeat 3] [--jobs 2] [--out build/surrogate.json] [--quick]

Why: ``search_efficiency.py`` judges tuners on real timings, which is the verdict that
counts, but one seed costs ~2.5 minutes per tuner on the auto space of softmax and the
machine's noise is as large as the differences between the top configs; a change to the GBT
tuner cannot be tried on 20 seeds that way. Here the *truth* of a config is a random forest
(a model family the GBT tuner does not use) fitted to every logged measurement of the task,
keyed by program (``search.programs.canonical``: configs differing only in knobs their
program does not read are one point), on the canonical config's knob features; a
measurement is that value times ``exp(N(0, noise))``, each repeat drawn alone (the logs show
a top program's timings spread by ~10% in log space). Tuners run their real loop
(``Tuner.tune``: programs measured once, races, the final re-measure, the median rule) with
a fake measurer; model time is real.

Reported per tuner, means over seeds with 95% bootstrap intervals: the *true* value of the
config a run would return after N trials (``Tuner.incumbent``), trials until it is within
90% and 95% of the best true value any run measured (a run that never gets there counts as
the run length + 1), and whether GBT's trials to 95% are <= 0.5x random's. Figures describe
the surrogate, not the machine: a change shown here is confirmed with
``search_efficiency.py`` before it is believed.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import search_efficiency as se
from looptune.search import MeasureOption
from looptune.search.cost_model import KnobFeatures
from looptune.search.measure import MeasureResult
from looptune.search.programs import canonical
from search_efficiency_stats import at_trial, bootstrap, censor, reach, verdict

CHECKPOINTS = (10, 25, 50, 100, 200)


# ---- the landscape ----------------------------------------------------------------------------

class Landscape:
    """GFLOP/s of every config of ``task``, fitted to ``records`` (log dicts of that task)."""

    def __init__(self, task, records: list[dict], seed: int = 0):
        from sklearn.ensemble import RandomForestRegressor
        self.task, self.space = task, task.config_space
        self.knobs = KnobFeatures(self.space)
        self._canon: dict[int, int] = {}
        self._value: dict[int, float] = {}
        values: dict[int, list[float]] = {}
        for rec in records:
            if rec.get("task", {}).get("name") != task.name:
                continue
            g = rec.get("gflops") if rec.get("error") == "none" else None
            values.setdefault(self.canonical(rec["config"]["index"]), []).append(
                math.log(max(g or 0.0, 0.05)))
        if len(values) < 20:
            raise SystemExit(f"search_surrogate: {len(values)} programs of {task.name} in the "
                             f"logs; give logs with a few hundred measured programs")
        idx = sorted(values)
        y = np.array([statistics.median(values[i]) for i in idx])
        self.model = RandomForestRegressor(300, min_samples_leaf=2, random_state=seed,
                                           n_jobs=1).fit(self.knobs.matrix(idx), y)
        self.n_programs = len(idx)
        self.best_logged = float(np.exp(self.model.predict(self.knobs.matrix(idx)).max()))

    def canonical(self, index: int) -> int:
        if index not in self._canon:
            cfg, _ = canonical(self.task, self.space.get(index))
            self._canon[index] = cfg.index
        return self._canon[index]

    def gflops(self, index: int) -> float:
        """The true GFLOP/s of config ``index`` (its program's)."""
        c = self.canonical(index)
        if c not in self._value:
            self._value[c] = float(np.exp(self.model.predict(self.knobs.matrix([c]))[0]))
        return self._value[c]


class FakeMeasurer:
    """What ``Tuner.tune`` needs of a measurer; costs drawn from the landscape with noise."""

    def __init__(self, land: Landscape, rng: np.random.Generator, noise: float, repeat: int):
        self.land, self.rng, self.noise, self.repeat = land, rng, noise, repeat
        self.runs, self.busy_runs, self.busy_peak = 0, 0, 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def _result(self, cfg, kind: str) -> MeasureResult:
        flop = self.land.task.flop
        g = self.land.gflops(cfg.index)
        costs = [flop / (g * 1e9) * math.exp(self.rng.normal(0.0, self.noise))
                 for _ in range(self.repeat)]
        self.runs += 1
        return MeasureResult(cfg, costs, flop=flop, kind=kind)

    def measure(self, configs):
        return iter([self._result(c, "measure") for c in configs])

    def remeasure(self, configs, rounds, stop=None):
        configs = list(configs)
        for r in range(rounds if configs else 0):
            if stop is not None and stop():
                return
            k = r % len(configs)
            for cfg in configs[k:] + configs[:k]:
                yield self._result(cfg, "remeasure")


# ---- one run -------------------------------------------------------------------------------------

_STATE: dict = {}


def _init(workload: str, args: tuple, logs: list[str]) -> None:
    task = se.make_task(workload, args)
    records = []
    for path in logs:
        with open(path) as f:
            records += [json.loads(line) for line in f if line.strip()]
    _STATE["land"] = Landscape(task, records)
    _STATE["task"] = task


def _run(job: tuple) -> dict:
    tuner_name, seed, trials, noise, repeat = job
    land, task = _STATE["land"], _STATE["task"]
    tuner = se.make_tuner(tuner_name, task, seed, "", "")
    rng = np.random.default_rng(10_000 + seed)
    tuner.make_measurer = lambda opt: FakeMeasurer(land, rng, noise, repeat)
    curve: list[float] = []
    measured: list[float] = []

    def callback(t, res):
        if res.kind == "measure":
            measured.append(land.gflops(res.config.index))
            inc = t.incumbent()
            curve.append(land.gflops(inc.config.index) if inc is not None else 0.0)
    t0 = time.perf_counter()
    tuner.tune(trials, MeasureOption(), callbacks=[callback])
    final = land.gflops(tuner.best.config.index) if tuner.best is not None else 0.0
    if curve:
        curve[-1] = final              # what it returned, after its final re-measure
    return {"tuner": tuner_name, "seed": seed, "curve": curve, "measured": measured,
            "seconds": time.perf_counter() - t0, "best_logged": land.best_logged}


# ---- the report ----------------------------------------------------------------------------------

def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def report(runs: list[dict], trials: int) -> list[str]:
    best = max([r["best_logged"] for r in runs] + [v for r in runs for v in r["measured"]])
    tuners = list(dict.fromkeys(r["tuner"] for r in runs))
    marks = [c for c in CHECKPOINTS if c <= trials]
    lines = [f"best true GFLOP/s (the logged programs' and every run's): {best:.2f}", "",
             "| tuner | seeds | " + " | ".join(f"after {c}" for c in marks)
             + " | trials to 90% | trials to 95% | s/run |",
             "|---" * (5 + len(marks)) + "|"]
    to: dict[tuple, list] = {}
    for name in tuners:
        mine = [r for r in runs if r["tuner"] == name and r["curve"]]
        cells = [f"{statistics.mean(at_trial(r['curve'], c) for r in mine):.2f}"
                 for c in marks]
        for frac in (0.90, 0.95):
            to[name, frac] = [reach(r["curve"], frac * best) for r in mine]
            counts, reached = censor(to[name, frac], trials + 1)
            m, lo, hi = bootstrap(counts)
            cells.append(f"{m:.1f} [{lo:.1f}, {hi:.1f}] ({reached}/{len(mine)})")
        cells.append(f"{statistics.mean(r['seconds'] for r in mine):.0f}")
        lines.append(f"| {name} | {len(mine)} | " + " | ".join(cells) + " |")
    if "random" in tuners:
        lines.append("")
        for name in (t for t in tuners if t != "random"):
            for frac in (0.90, 0.95):
                lines.append(f"- {name}, {frac:.0%}: " + verdict(
                    to[name, frac], to["random", frac], trials + 1, trials + 1, frac=frac))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", required=True, nargs="+",
                    help="log files (globs) of the workload's task: the landscape's data")
    ap.add_argument("--workload", default="auto_softmax", choices=se.WORKLOADS)
    ap.add_argument("--tuners", default="random,gbt")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seeds", default="0-9", help="e.g. 0-19 or 0,3,5")
    ap.add_argument("--noise", type=float, default=0.08,
                    help="sd of a timing's log around the truth (default 0.08)")
    ap.add_argument("--repeat", type=int, default=3, help="timings per measurement")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the runs as JSON here")
    ap.add_argument("--quick", action="store_true",
                    help="the workload's tiny sizes (search_efficiency --quick's; for tests)")
    opts = ap.parse_args(argv)
    logs = sorted({p for g in opts.logs for p in glob.glob(g)})
    if not logs:
        raise SystemExit(f"search_surrogate: no log matches {opts.logs}")
    args = se.workload_args(opts.workload, opts.quick)
    tuners = se.split_tuners(opts.tuners)
    if "gbt-transfer" in tuners:
        raise SystemExit("search_surrogate: gbt-transfer learns from other workloads' logs in "
                         "an --out folder of search_efficiency.py; replay gbt, random, ga, sa, "
                         "optuna-<sampler> or gbt[key=value,...] here")
    jobs = [(t, s, opts.trials, opts.noise, opts.repeat) for s in _seeds(opts.seeds)
            for t in tuners]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(opts.jobs, initializer=_init,
                             initargs=(opts.workload, args, logs)) as pool:
        runs = list(pool.map(_run, jobs))
    print(f"{len(runs)} runs on {opts.workload} ({len(logs)} logs) in "
          f"{time.perf_counter() - t0:.0f} s, noise {opts.noise}")
    print("\n".join(report(runs, opts.trials)))
    if opts.out:
        os.makedirs(os.path.dirname(opts.out) or ".", exist_ok=True)
        with open(opts.out, "w") as f:
            json.dump(runs, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
