"""Search efficiency: how many trials each tuner needs to find a good config.

    python benchmarks/search_efficiency.py [--tasks matmul,conv2d] \
        [--tuners random,ga,sa,gbt,optuna-tpe] [--trials 200] [--seeds 0,1,2] \
        [--out build/search_efficiency] [--transfer] [--report] [--remeasure R]

(``--tuners 'gbt[explore=64,random_share=0.5]'`` runs GBTTuner with other options.)

For each task (512^3 sgemm; a ResNet-18 3x3 conv2d layer: N=1, C=K=64, H=W=56, stride 1,
pad 1), every tuner runs with the same trial budget for each seed. The table gives, per task
and tuner (over the seeds): the best GFLOP/s (mean and max), the trials needed to reach 90%
and 95% of the best config found by any tuner on that task (median over seeds; ">N" where a
seed never got there, counted as N+1 in the median), and the wall time split into model time
(the tuner's ``next_batch`` + ``update``) and measurement time (the rest: build, run, log).

The templates here have spaces of 10^4-10^5 configs (the example templates have a few dozen:
too small to tell tuners apart). ``--transfer`` adds ``gbt-transfer``: GBT warm-started from
the other task's logs of this output folder (random and GBT runs of every seed).

Each run appends one line to ``<out>/results.jsonl`` and is skipped when already there, so an
interrupted benchmark resumes; ``--report`` prints the table from that file only. ``--remeasure
R`` measures the best config of every run R more times, all runs' bests of a task interleaved
in a new random order each round (same inputs, same conditions), and adds the median over the
rounds as the column "re-measured": a run's logged best is the maximum of noisy measurements,
so on a noisy machine it favours the runs that happened to be measured in a fast phase; the
re-measured best compares the configs the tuners found, not their luck. Timings are noisy on a
shared machine: compare tuners within one run. The order of the runs of a seed is rotated from
seed to seed (a gbt-transfer run waits until the other task has a log to learn from), so that
no tuner always runs at the same point of the sequence: on the 2-core VM of BENCHMARKS.md,
parallel kernels measured up to 2x slower for minutes at a time, and a tuner that always ran
fourth in a seed's sequence measured the same configs 5-27% slower (median over the configs
both runs measured) than the one that ran second.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
import time

import looptune as lt
from looptune.search import (
    GBTTuner,
    MeasureOption,
    Measurer,
    create_task,
    load_records,
    log_to_file,
    template,
)
from looptune.search.tuners import make_tuner as search_make_tuner

# ---- the templates ---------------------------------------------------------------------------


@template("se_matmul")
def se_matmul(cfg, N, M, K):
    """C = A @ B. Three-level tiles of i and j, a split k; the register tile (ii x ji)
    accumulates in a local buffer (or in C); B is packed per column panel or not; the order
    of (ko, ii, ki) above the vectorized ji; unrolling; which loop is parallel."""
    A = lt.placeholder((N, K), "float32", name="A")
    B = lt.placeholder((K, M), "float32", name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = lt.create_schedule(C)
    cfg.define_knob("cache", [True, False])
    cfg.define_knob("pack_b", [False, True])
    CC = s.cache_write(C, "local") if cfg["cache"].val else C
    BB = s.cache_read(B, "local", [CC]) if cfg["pack_b"].val else None
    i, j = s[C].op.axis
    cfg.define_split("tile_i", i, num_outputs=3, max_factor=16)
    cfg.define_split("tile_j", j, num_outputs=3, max_factor=64)
    io, im, ii = cfg["tile_i"].apply(s, C, i)
    jo, jm, ji = cfg["tile_j"].apply(s, C, j)
    s[C].reorder(jo, io, im, jm, ii, ji)
    if CC is not C:
        s[CC].compute_at(s[C], jm)
        ci, cj = s[CC].op.axis
        s[C].vectorize(ji)
    else:
        ci, cj = ii, ji
    (ck,) = s[CC].op.reduce_axis
    cfg.define_split("tile_k", ck, num_outputs=2, max_factor=64)
    ko, ki = cfg["tile_k"].apply(s, CC, ck)
    cfg.define_reorder("order", [ko, ci, ki])
    inner = cfg["order"].apply(s, CC, [ko, ci, ki])
    s[CC].reorder(*inner, cj)
    s[CC].vectorize(cj)
    cfg.define_knob("unroll", ["none", "tile_i", "k_inner"])
    if cfg["unroll"].val == "tile_i":
        s[CC].unroll(ci)
    elif cfg["unroll"].val == "k_inner":
        s[CC].unroll(ki)
    cfg.define_knob("parallel", ["jo", "io", "jo.io"])
    par = cfg["parallel"].val
    p = jo if par == "jo" else io if par == "io" else s[C].fuse(jo, io)
    s[C].parallel(p)
    if BB is not None:
        s[BB].compute_at(s[C], p if par == "jo.io" else jo)
        s[BB].vectorize(s[BB].op.axis[1])
    return s, [A, B, C]


@template("se_conv2d")
def se_conv2d(cfg, N, C, H, W, K, KH, KW, stride=1, pad=1):
    """NCHW conv2d with a padded input stage. Output channels x rows x columns tiles (the
    register tile accumulates in a local buffer), a split input-channel reduction, the order
    of the reduction loops around the tile, unrolling, and the parallel loop."""
    data = lt.placeholder((N, C, H, W), "float32", name="data")
    weight = lt.placeholder((K, C, KH, KW), "float32", name="weight")
    OH, OW = (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1

    def body(n, c, y, x):
        inside = lt.all(y >= pad, y < H + pad, x >= pad, x < W + pad)
        return lt.if_then_else(inside, data[n, c, y - pad, x - pad], 0.0)
    dp = lt.compute((N, C, H + 2 * pad, W + 2 * pad), body, name="pad")
    rc = lt.reduce_axis(C, name="rc")
    ry = lt.reduce_axis(KH, name="ry")
    rx = lt.reduce_axis(KW, name="rx")
    out = lt.compute(
        (N, K, OH, OW),
        lambda n, k, y, x: lt.sum(dp[n, rc, y * stride + ry, x * stride + rx]
                                  * weight[k, rc, ry, rx], axis=[rc, ry, rx]), name="out")
    s = lt.create_schedule(out)
    OL = s.cache_write(out, "local")
    n, k, y, x = s[out].op.axis
    cfg.define_split("tile_k", k, num_outputs=2, max_factor=16)
    cfg.define_split("tile_y", y, num_outputs=2, max_factor=4)
    cfg.define_split("tile_x", x, num_outputs=2, policy="power2", max_factor=32,
                     allow_non_divisible=True)
    ko, ki = cfg["tile_k"].apply(s, out, k)
    yo, yi = cfg["tile_y"].apply(s, out, y)
    xo, xi = cfg["tile_x"].apply(s, out, x)
    s[out].reorder(n, ko, yo, xo, yi, ki, xi)
    cfg.define_knob("parallel", ["n.ko.yo", "n.ko", "n.ko.yo.xo"])
    par = cfg["parallel"].val
    fused = s[out].fuse(*{"n.ko": (n, ko), "n.ko.yo": (n, ko, yo),
                          "n.ko.yo.xo": (n, ko, yo, xo)}[par])
    s[out].parallel(fused)
    s[out].vectorize(xi)
    s[OL].compute_at(s[out], fused if par == "n.ko.yo.xo" else xo)
    _, lk, ly, lx = s[OL].op.axis
    lc, lry, lrx = s[OL].op.reduce_axis
    cfg.define_split("tile_c", lc, num_outputs=2, max_factor=64)
    lco, lci = cfg["tile_c"].apply(s, OL, lc)
    cfg.define_knob("order", ["co.ry.rx.ci", "co.ci.ry.rx", "ry.rx.co.ci", "co.ry.ci.rx"])
    red = {"co": lco, "ci": lci, "ry": lry, "rx": lrx}
    s[OL].reorder(*[red[a] for a in cfg["order"].val.split(".")], ly, lk, lx)
    s[OL].vectorize(lx)
    cfg.define_knob("unroll", ["tile", "none", "tile+rx"])
    if cfg["unroll"].val != "none":
        s[OL].unroll(ly)
        s[OL].unroll(lk)
    if cfg["unroll"].val == "tile+rx":
        s[OL].unroll(lrx)
    pn, pc, _py, px = s[dp].op.axis
    s[dp].parallel(s[dp].fuse(pn, pc))
    s[dp].vectorize(px)
    return s, [data, weight, out]


TASKS = {"matmul": ("se_matmul", (512, 512, 512)),
         "conv2d": ("se_conv2d", (1, 64, 56, 56, 64, 3, 3, 1, 1))}


# ---- running the tuners ----------------------------------------------------------------------

def _options(name: str) -> tuple[str, dict]:
    """``"gbt[explore=64,eps=0.05]"`` -> ``("gbt", {"explore": 64, "eps": 0.05})``."""
    if not name.endswith("]") or "[" not in name:
        return name, {}
    base, _, rest = name[:-1].partition("[")
    kw = {}
    for item in filter(None, rest.split(",")):
        k, _, v = item.partition("=")
        kw[k] = json.loads(v) if v[:1].isdigit() or v[:1] in "-." else v
    return base, kw


def make_tuner(name: str, task, seed: int, out: str, task_name: str):
    """A fresh tuner ``name`` for ``task``; ``gbt[key=value,...]`` passes GBTTuner options."""
    name, kw = _options(name)
    if kw and not name.startswith("gbt"):
        raise SystemExit(f"options are only for the gbt tuners; got {name!r} with {kw}")
    if name == "gbt":
        return GBTTuner(task, seed=seed, **kw)
    if name == "gbt-transfer":
        return GBTTuner(task, seed=seed, transfer_logs=transfer_logs(out, task_name), **kw)
    if name.startswith("optuna-"):
        return search_make_tuner("optuna", task, seed, sampler=name.split("-", 1)[1])
    if name in ("random", "ga", "sa"):
        return search_make_tuner(name, task, seed)
    raise SystemExit(f"unknown tuner {name!r}")


def transfer_logs(out: str, task_name: str) -> list[str]:
    """The logs of the other tasks' random and GBT runs in ``out``."""
    logs = []
    for other in TASKS:
        if other == task_name:
            continue
        for f in sorted(os.listdir(out)):
            if f.startswith(f"{other}_") and f.endswith(".jsonl") and \
                    ("_random_" in f or "_gbt_" in f):
                logs.append(os.path.join(out, f))
    return logs


def run_order(tuners: list[str], tasks: list[str], seed: int, out: str):
    """The (tuner, task) runs of one seed, rotated by the seed; a gbt-transfer run whose
    task has nothing to learn from yet (no random or GBT log of another task in ``out``)
    waits until the runs that write such logs are done."""
    runs = [(t, k) for t in tuners for k in tasks]
    shift = seed % max(1, len(runs))
    runs = runs[shift:] + runs[:shift]
    while runs:
        def ready(run):
            t, k = run
            return t != "gbt-transfer" or bool(transfer_logs(out, k)) or not any(
                tt in ("random", "gbt") and kk != k for tt, kk in runs)
        yield runs.pop(next((n for n, r in enumerate(runs) if ready(r)), 0))


class _Clock:
    """Wraps a tuner's next_batch and update to add up their time (the model time)."""

    def __init__(self, tuner):
        self.model = 0.0
        for meth in ("next_batch", "update"):
            setattr(tuner, meth, self._timed(getattr(tuner, meth)))

    def _timed(self, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.model += time.perf_counter() - t0
        return wrapper


def run_paths(out: str, task_name: str, tuner_name: str, seed: int) -> tuple[str, str]:
    """The log and the build-cache folder of one run."""
    tag = tuner_name.replace("[", "(").replace("]", ")").replace("=", "").replace(",", "_")
    return (os.path.join(out, f"{task_name}_{tag}_{seed}.jsonl"),
            os.path.join(out, "cache", f"{task_name}_{tag}_{seed}"))


def run_one(task_name: str, tuner_name: str, seed: int, trials: int, out: str,
            opt: MeasureOption) -> dict:
    """Tune one task with one tuner and seed; returns the result row (also logged)."""
    tpl, args = TASKS[task_name]
    task = create_task(tpl, args)
    log, cache = run_paths(out, task_name, tuner_name, seed)
    if os.path.exists(log):
        os.remove(log)
    os.environ["LOOPTUNE_CACHE"] = cache          # no build-cache hits from earlier runs
    t_setup = time.perf_counter()
    tuner = make_tuner(tuner_name, task, seed, out, task_name)
    setup = time.perf_counter() - t_setup
    clock = _Clock(tuner)
    t0 = time.perf_counter()
    tuner.tune(trials, opt, callbacks=[log_to_file(log)])
    wall = time.perf_counter() - t0 + setup
    shutil.rmtree(cache, ignore_errors=True)
    recs = load_records(log, task)
    curve = [round(r.gflops or 0.0, 3) for r in recs]
    errors: dict[str, int] = {}
    for r in recs:
        if not r.ok:
            errors[r.error_kind] = errors.get(r.error_kind, 0) + 1
    return {"task": task_name, "tuner": tuner_name, "seed": seed, "trials": len(recs),
            "best_gflops": max(curve, default=0.0), "curve": curve, "wall_s": round(wall, 1),
            "model_s": round(clock.model + setup, 1),
            "measure_s": round(wall - clock.model - setup, 1), "errors": errors,
            "load_avg": round(os.getloadavg()[0], 2)}


def remeasure(rows: list[dict], out: str, rounds: int, opt: MeasureOption,
              seed: int = 0) -> dict[tuple, float]:
    """The best config of each row's log measured ``rounds`` more times, every round over all
    rows of a task in a new random order (one set of worker processes per task); {(task,
    tuner, seed): median GFLOP/s}. Also written to ``<out>/remeasured.jsonl``."""
    rng = random.Random(seed)
    found: dict[tuple, float] = {}
    os.environ["LOOPTUNE_CACHE"] = os.path.join(out, "cache", "remeasure")
    for task_name in dict.fromkeys(r["task"] for r in rows):
        tpl, args = TASKS[task_name]
        task = create_task(tpl, args)
        best: dict[tuple, int] = {}
        for r in rows:
            if r["task"] != task_name:
                continue
            log, _ = run_paths(out, task_name, r["tuner"], r["seed"])
            recs = [x for x in load_records(log, task) if x.ok]
            if recs:
                top = max(recs, key=lambda x: x.gflops or 0.0)
                best[(task_name, r["tuner"], r["seed"])] = top.config["index"]
        keys = list(best)
        samples: dict[tuple, list[float]] = {k: [] for k in keys}
        with Measurer(task, opt) as m:
            for _ in range(rounds):
                rng.shuffle(keys)
                for k, res in zip(keys, m.measure([task.config_space.get(best[k])
                                                   for k in keys])):
                    if res.ok:
                        samples[k].append(res.gflops)
        for k, g in samples.items():
            if g:
                found[k] = statistics.median(g)
    with open(os.path.join(out, "remeasured.jsonl"), "w") as f:
        for (task_name, tuner, seed), g in found.items():
            f.write(json.dumps({"task": task_name, "tuner": tuner, "seed": seed,
                                "rounds": rounds, "gflops": round(g, 3)}) + "\n")
    return found


def load_remeasured(out: str) -> dict[tuple, float]:
    path = os.path.join(out, "remeasured.jsonl")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {(r["task"], r["tuner"], r["seed"]): r["gflops"]
                for r in map(json.loads, filter(str.strip, f))}


# ---- the table -------------------------------------------------------------------------------

def _reach(curve: list[float], target: float) -> int | None:
    best = 0.0
    for n, g in enumerate(curve, 1):
        best = max(best, g)
        if best >= target:
            return n
    return None


def table(rows: list[dict], trials: int, remeasured: dict | None = None) -> str:
    """The search-efficiency table (markdown) from result rows (and re-measured bests)."""
    remeasured = remeasured or {}
    lines = []
    for task_name in dict.fromkeys(r["task"] for r in rows):
        rs = [r for r in rows if r["task"] == task_name and r["trials"] > 0]
        top = max(r["best_gflops"] for r in rs)
        head = ("| tuner | seeds | best GFLOP/s mean (max) | trials to 90% | trials to 95% "
                "| wall s | model s | measure s |")
        rem = any((task_name, r["tuner"], r["seed"]) in remeasured for r in rs)
        if rem:
            head += " re-measured mean (per seed) |"
        lines += [f"\n{task_name}: best config found by any tuner {top:.1f} GFLOP/s", "",
                  head, "|---|---|---|---|---|---|---|---|" + ("---|" if rem else "")]
        for tuner in dict.fromkeys(r["tuner"] for r in rs):
            tr = [r for r in rs if r["tuner"] == tuner]
            best = [r["best_gflops"] for r in tr]
            cells = []
            for frac in (0.90, 0.95):
                reach = [_reach(r["curve"], frac * top) for r in tr]
                med = statistics.median(n if n is not None else trials + 1 for n in reach)
                per = ",".join(str(n) if n is not None else f">{trials}" for n in reach)
                cells.append(f"{med:g} ({per})" if med <= trials else f">{trials} ({per})")
            wall, model, meas = (statistics.mean(r[k] for r in tr)
                                 for k in ("wall_s", "model_s", "measure_s"))
            lines.append(f"| {tuner} | {len(tr)} | {statistics.mean(best):.1f} "
                         f"({max(best):.1f}) | {cells[0]} | {cells[1]} | {wall:.0f} "
                         f"| {model:.0f} | {meas:.0f} |")
            if rem:
                g = [remeasured.get((task_name, tuner, r["seed"])) for r in tr]
                ok = [x for x in g if x is not None]
                per = ",".join(f"{x:.1f}" if x is not None else "-" for x in g)
                lines[-1] += f" {statistics.mean(ok):.1f} ({per}) |" if ok else " - |"
    lines.append("\ntrials to X%: median over seeds (each seed's count in brackets) of the "
                 "trials until a config within X% of the task's best was measured.")
    if remeasured:
        lines.append("re-measured: each run's best config measured again, all runs of a task "
                     "interleaved; median over the rounds.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="matmul,conv2d")
    ap.add_argument("--tuners", default="random,ga,sa,gbt,optuna-tpe")
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", default="build/search_efficiency")
    ap.add_argument("--number", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n-parallel", type=int, default=2)
    ap.add_argument("--transfer", action="store_true",
                    help="also run gbt-transfer (after the other tuners of every seed)")
    ap.add_argument("--report", action="store_true", help="only print the table")
    ap.add_argument("--remeasure", type=int, default=0, metavar="R",
                    help="measure each run's best config R more times, interleaved")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    results = os.path.join(a.out, "results.jsonl")
    rows = []
    if os.path.exists(results):
        with open(results) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    opt = MeasureOption(number=a.number, repeat=a.repeat, timeout=10, n_parallel=a.n_parallel)
    if not a.report:
        tuners = re.findall(r"[^,\[]+(?:\[[^\]]*\])?", a.tuners) + \
            (["gbt-transfer"] if a.transfer else [])
        for seed in [int(x) for x in a.seeds.split(",")]:
            for tuner, task_name in run_order(tuners, a.tasks.split(","), seed, a.out):
                if any(r["task"] == task_name and r["tuner"] == tuner and r["seed"] == seed
                       and r["trials"] >= a.trials for r in rows):
                    continue
                row = run_one(task_name, tuner, seed, a.trials, a.out, opt)
                rows = [r for r in rows if not (r["task"] == task_name and
                                                r["tuner"] == tuner and r["seed"] == seed)]
                rows.append(row)
                with open(results, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"{task_name} {tuner} seed {seed}: best {row['best_gflops']:.1f} "
                      f"GFLOP/s, wall {row['wall_s']} s (model {row['model_s']} s)",
                      file=sys.stderr, flush=True)
    rows = [r for r in rows if r["trials"] > 0]
    remeasured = load_remeasured(a.out)
    if a.remeasure > 0:
        remeasured = remeasure(rows, a.out, a.remeasure, opt)
    print(table(rows, a.trials, remeasured))


if __name__ == "__main__":
    main()
