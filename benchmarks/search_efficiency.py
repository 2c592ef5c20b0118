"""Search efficiency: how fast each tuner finds a good config, judged on re-measured timings.

    python benchmarks/search_efficiency.py [--workloads matmul,conv2d,auto_softmax,auto_conv2d]
        [--tuners random,ga,sa,gbt,optuna-tpe] [--trials 200] [--seeds 0,1,2,3,4]
        [--rounds 5] [--out build/search_efficiency] [--budget-s S] [--run-seconds S]
        [--transfer] [--report] [--quick]

(``--tuners 'gbt[explore=64,random_share=0.5]'`` runs GBTTuner with other options; ``grid``
and ``optuna-<sampler>`` are also known.)

Workloads: two hand templates with spaces of 10^4-10^5 configs (``matmul``: 512^3 sgemm;
``conv2d``: a ResNet-18 3x3 layer, N=1, C=K=64, H=W=56, stride 1, pad 1; the example
templates have a few dozen configs, too few to tell tuners apart) and the template-free spaces
of ``lt.search.auto_task`` for the examples' softmax (4096 x 1024) and conv2d (the same
layer): ``auto_softmax``, ``auto_conv2d``.

**Design choice: re-measure every incumbent, after tuning, interleaved across runs.** Each
(workload, tuner, seed) run tunes ``--trials`` trials and logs everything (the tuner's own
final re-measure of its top configs included). Its *incumbent* after trial t is the config
it would return if it stopped there: ``looptune.search.log.rank_configs`` (the median rule)
over its records so far, in log order: the races of the tuner (a challenger timed in turns
beside the incumbent before it may replace it) count at the trial they follow, its final
re-measure at its last trial. When every run of a workload is done, the set of all
incumbents of all its runs (a few per run: the incumbent changes O(log t) times) is measured
again in one ``Measurer``: one warm-up
pass that builds them (discarded), then ``--rounds`` interleaved rounds
(``Measurer.remeasure``, the tuner's final re-measure: each round in a fresh process, its
configs timed in turns, block by block, so that all of them meet the same phases of the
machine; the noise guard on). A config's value is the median over the rounds, the same
value for every run that held it. A run's curve at trial t is its incumbent's value: best
GFLOP/s against trials exactly (not only at checkpoints), and against wall time (each
trial's seconds since the run started, tuner setup included). Logged maxima, the luckiest
sample of each run taken at a different moment, are never compared; every figure of one
workload comes from one stretch of interleaved measurement.

The report (markdown, per workload): per tuner the mean best GFLOP/s (the re-measured value
of what the run returned), trials to 90% and 95% of the best config any tuner found, and
seconds to 95%, each with a 95% bootstrap interval over seeds (``search_efficiency_stats``);
the mean best after N trials and after S seconds; and a plain verdict whether GBT reaches 95%
(and 90%) of the best in <= 0.5x random's trials, with the interval of the ratio.

Resumable and time-budgeted: each finished run appends a row to ``<out>/runs.jsonl`` and is
skipped on the next invocation (same sizes and trial count); ``--budget-s`` stops starting
runs when spent (a run it cuts short is discarded and redone next time; a workload's
re-measure starts only while budget is left, and is redone when its set of runs changes);
``--run-seconds`` caps each run's tuning (``tune(seconds=...)``) beside ``--trials``.
``--report`` only prints the table from ``<out>``. ``--quick``: tiny sizes, 10 trials,
random and gbt, 2 seeds, 2 rounds (a smoke run; its figures mean nothing).

The order of a seed's runs is rotated from seed to seed (a gbt-transfer run waits until
another workload has a log to learn from), so that no tuner always runs at the same point of
the sequence: on the 2-core VM of BENCHMARKS.md a tuner that always ran fourth measured the
same configs 5-27% slower than the one that ran second. Timings on a shared machine are not
trustworthy; run it on a quiet one.
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
from pathlib import Path

import looptune as lt
from looptune.search import (
    GBTTuner,
    MeasureOption,
    Measurer,
    TuningError,
    auto_task,
    create_task,
    load_records,
    log_to_file,
    template,
)
from looptune.search import make_tuner as search_make_tuner

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import search_efficiency_stats as stats
from search_efficiency_stats import incumbents

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
AUTO = {"auto_softmax": ("softmax", (4096, 1024)),
        "auto_conv2d": ("conv2d", (1, 64, 56, 56, 64, 3, 3, 1, 1))}
QUICK_ARGS = {"matmul": (24, 40, 33), "conv2d": (1, 6, 9, 9, 8, 3, 3, 1, 1),
              "auto_softmax": (13, 45), "auto_conv2d": (1, 5, 9, 11, 6, 3, 3, 1, 1)}
WORKLOADS = (*TASKS, *AUTO)
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def workload_args(name: str, quick: bool) -> tuple:
    """The sizes of workload ``name`` (tiny ones with ``quick``)."""
    if name not in WORKLOADS:
        raise SystemExit(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    return QUICK_ARGS[name] if quick else (TASKS.get(name) or AUTO[name])[1]


def make_task(name: str, args: tuple):
    """The tuning task of workload ``name`` at ``args``: a hand template's task, or the
    auto_task of an example operator's algorithm."""
    if name in TASKS:
        return create_task(TASKS[name][0], tuple(args))
    from looptune.operators import load_operators
    op_name = AUTO[name][0]
    (op,) = [op for op in load_operators(str(EXAMPLES / f"{op_name}.py")) if op.name == op_name]
    out = op.algorithm(*args)
    return auto_task(list(out) if isinstance(out, (list, tuple)) else [out])


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


def split_tuners(text: str) -> list[str]:
    """``"random,gbt[eps=0.2,explore=32]"`` -> ``["random", "gbt[eps=0.2,explore=32]"]``."""
    return re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text)


def make_tuner(name: str, task, seed: int, out: str, workload: str):
    """A fresh tuner ``name`` for ``task``; ``gbt[key=value,...]`` passes GBTTuner options."""
    name, kw = _options(name)
    if kw and not name.startswith("gbt"):
        raise SystemExit(f"options are only for the gbt tuners; got {name!r} with {kw}")
    if name == "gbt":
        return GBTTuner(task, seed=seed, **kw)
    if name == "gbt-transfer":
        return GBTTuner(task, seed=seed, transfer_logs=transfer_logs(out, workload), **kw)
    if name.startswith("optuna-"):
        return search_make_tuner("optuna", task, seed, sampler=name.split("-", 1)[1])
    if name in ("random", "ga", "sa", "grid"):
        return search_make_tuner(name, task, seed)
    raise SystemExit(f"unknown tuner {name!r}; use random, grid, ga, sa, gbt, gbt-transfer, "
                     "optuna-<sampler> or gbt[key=value,...]")


def transfer_logs(out: str, workload: str) -> list[str]:
    """The logs of the other workloads' random and GBT runs in ``out``."""
    return [os.path.join(out, f) for other in WORKLOADS if other != workload
            for f in sorted(os.listdir(out)) if f.startswith(f"{other}_")
            and f.endswith(".jsonl") and ("_random_" in f or "_gbt_" in f)]


def run_order(tuners: list[str], workloads: list[str], seed: int, out: str):
    """The (tuner, workload) runs of one seed, rotated by the seed; a gbt-transfer run whose
    workload has nothing to learn from yet (no random or GBT log of another workload in
    ``out``) waits until the runs that write such logs are done."""
    runs = [(t, k) for t in tuners for k in workloads]
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


class _Elapsed:
    """A tuning callback: the seconds since ``t0`` at which each trial's result came."""

    def __init__(self, t0: float):
        self.t0, self.times = t0, []

    def __call__(self, tuner, res) -> None:
        if res.kind == "measure":
            self.times.append(round(time.perf_counter() - self.t0, 3))


def run_paths(out: str, workload: str, tuner_name: str, seed: int) -> tuple[str, str]:
    """The log and the build-cache folder of one run."""
    tag = tuner_name.replace("[", "(").replace("]", ")").replace("=", "").replace(",", "_")
    return (os.path.join(out, f"{workload}_{tag}_{seed}.jsonl"),
            os.path.join(out, "cache", f"{workload}_{tag}_{seed}"))


def run_one(workload: str, args: tuple, tuner_name: str, seed: int, trials: int, out: str,
            opt: MeasureOption, seconds: float | None = None) -> dict:
    """Tune one workload with one tuner and seed; returns the run's row: per trial its
    incumbent (by the median rule), seconds since the start and logged GFLOP/s."""
    task = make_task(workload, args)
    log, cache = run_paths(out, workload, tuner_name, seed)
    if os.path.exists(log):
        os.remove(log)
    os.environ["LOOPTUNE_CACHE"] = cache          # no build-cache hits from earlier runs
    t0 = time.perf_counter()
    tuner = make_tuner(tuner_name, task, seed, out, workload)
    setup = time.perf_counter() - t0
    clock, elapsed = _Clock(tuner), _Elapsed(t0)
    try:
        tuner.tune(trials, opt, callbacks=[log_to_file(log), elapsed], seconds=seconds)
    except TuningError as e:         # every candidate failed: the run found nothing (0 GFLOP/s)
        print(f"{workload} {tuner_name} seed {seed}: {e}", file=sys.stderr)
    wall = time.perf_counter() - t0
    shutil.rmtree(cache, ignore_errors=True)
    recs = load_records(log, task) if os.path.exists(log) else []
    inc = incumbents(recs)
    measured = [r for r in recs if r.kind == "measure"]
    assert len(inc) == len(elapsed.times), (len(inc), len(elapsed.times))
    errors: dict[str, int] = {}
    for r in measured:
        if not r.ok:
            errors[r.error_kind] = errors.get(r.error_kind, 0) + 1
    return {"workload": workload, "args": list(args), "tuner": tuner_name, "seed": seed,
            "n_trial": trials, "trials": len(inc), "incumbent": inc, "elapsed": elapsed.times,
            "logged": [round(r.gflops or 0.0, 3) for r in measured],
            "wall_s": round(wall, 1), "model_s": round(clock.model + setup, 1),
            "measure_s": round(wall - clock.model - setup, 1), "errors": errors,
            "space": task.config_space.size, "load_avg": round(os.getloadavg()[0], 2)}


# ---- the re-measure --------------------------------------------------------------------------

def run_ids(rows: list[dict]) -> list[str]:
    """``tuner/seed`` of each row, sorted: which runs a re-measure covers."""
    return sorted(f"{r['tuner']}/{r['seed']}" for r in rows)


def remeasure(workload: str, args: tuple, rows: list[dict], rounds: int, opt: MeasureOption,
              out: str, seed: int = 0) -> dict:
    """Every incumbent config of the workload's runs measured again, all in one Measurer:
    one warm-up pass (builds; discarded), then ``rounds`` interleaved rounds. Returns (and
    writes to ``<out>/remeasured_<workload>.json``) the config -> median GFLOP/s map with
    the runs it covers."""
    task = make_task(workload, args)
    indices = sorted({i for r in rows for i in r["incumbent"] if i is not None})
    random.Random(seed).shuffle(indices)           # not in index order
    configs = [task.config_space.get(i) for i in indices]
    samples: dict[int, list[float]] = {i: [] for i in indices}
    os.environ["LOOPTUNE_CACHE"] = os.path.join(out, "cache", f"remeasure_{workload}")
    t0 = time.perf_counter()
    with Measurer(task, opt) as m:
        for k in range(0, len(configs), opt.n_parallel):
            list(m.measure(configs[k:k + opt.n_parallel]))
        for res in m.remeasure(configs, rounds):
            if res.ok and res.gflops:
                samples[res.config.index].append(res.gflops)
    shutil.rmtree(os.environ["LOOPTUNE_CACHE"], ignore_errors=True)
    found = {"workload": workload, "args": list(args), "rounds": rounds, "runs": run_ids(rows),
             "seconds": round(time.perf_counter() - t0, 1),
             "gflops": {str(i): round(statistics.median(g), 3)
                        for i, g in samples.items() if g},
             "samples": {str(i): [round(x, 3) for x in g] for i, g in samples.items()}}
    with open(os.path.join(out, f"remeasured_{workload}.json"), "w") as f:
        json.dump(found, f)
    return found


def load_remeasured(out: str, workload: str, args: tuple) -> dict | None:
    path = os.path.join(out, f"remeasured_{workload}.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        found = json.load(f)
    return found if tuple(found["args"]) == tuple(args) else None


# ---- the command line ------------------------------------------------------------------------

def load_rows(out: str) -> dict[tuple, dict]:
    """The finished runs in ``<out>/runs.jsonl``, the last row of each (workload, tuner,
    seed) winning."""
    path = os.path.join(out, "runs.jsonl")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {(r["workload"], r["tuner"], r["seed"]): r
                for r in map(json.loads, filter(str.strip, f))}


def _settings(a: argparse.Namespace) -> argparse.Namespace:
    """Fill the options not given from the --quick or the full defaults."""
    full = {"workloads": ",".join(WORKLOADS), "tuners": "random,ga,sa,gbt,optuna-tpe",
            "trials": 200, "seeds": "0,1,2,3,4", "rounds": 5, "number": 3, "repeat": 5,
            "out": "build/search_efficiency"}
    quick = {"workloads": ",".join(WORKLOADS), "tuners": "random,gbt", "trials": 10,
             "seeds": "0,1", "rounds": 2, "number": 1, "repeat": 2,
             "out": "build/search_efficiency_quick"}
    for k, v in (quick if a.quick else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.workloads = [w for w in a.workloads.split(",") if w]
    for w in a.workloads:
        workload_args(w, a.quick)
    a.tuners = split_tuners(a.tuners) + (["gbt-transfer"] if a.transfer else [])
    a.seeds = [int(x) for x in a.seeds.split(",") if x]
    return a


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", help=f"comma-separated, of {','.join(WORKLOADS)}")
    ap.add_argument("--tasks", dest="workloads", help=argparse.SUPPRESS)   # the old name
    ap.add_argument("--tuners")
    ap.add_argument("--trials", type=int)
    ap.add_argument("--seeds", help="comma-separated seeds (>= 5 for the intervals to mean "
                                    "something)")
    ap.add_argument("--rounds", "--remeasure", type=int, dest="rounds",
                    help="interleaved re-measure rounds of every incumbent")
    ap.add_argument("--out")
    ap.add_argument("--number", type=int)
    ap.add_argument("--repeat", type=int)
    ap.add_argument("--n-parallel", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no run or re-measure after this many seconds (resume later)")
    ap.add_argument("--run-seconds", type=float, default=None,
                    help="wall-clock cap of each run's tuning, beside --trials")
    ap.add_argument("--transfer", action="store_true",
                    help="also run gbt-transfer (GBT warm-started from other workloads' logs)")
    ap.add_argument("--report", action="store_true", help="only print the report from --out")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: tiny sizes, 10 trials, random+gbt, 2 seeds, 2 rounds")
    return ap


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def tune_all(a: argparse.Namespace, rows: dict, opt: MeasureOption,
             deadline: float | None) -> bool:
    """Run every (workload, tuner, seed) not in ``rows`` yet, appending each finished run
    to ``<out>/runs.jsonl``; False when the budget ran out first."""
    wanted = {w: workload_args(w, a.quick) for w in a.workloads}
    for seed in a.seeds:
        for tuner, w in run_order(a.tuners, a.workloads, seed, a.out):
            old = rows.get((w, tuner, seed))
            if old and tuple(old["args"]) == wanted[w] and old["n_trial"] == a.trials \
                    and old.get("run_seconds") == a.run_seconds:
                continue
            left = _remaining(deadline)
            if left is not None and left <= 0:
                return False
            caps = [x for x in (a.run_seconds, left) if x is not None]
            row = run_one(w, wanted[w], tuner, seed, a.trials, a.out, opt,
                          seconds=min(caps) if caps else None)
            cut = (left is not None and _remaining(deadline) <= 0 and row["trials"] < a.trials
                   and (a.run_seconds is None or left < a.run_seconds))
            if cut:
                print(f"{w} {tuner} seed {seed}: cut short by --budget-s after "
                      f"{row['trials']} trials; discarded (redone next time)", file=sys.stderr)
                return False
            row["run_seconds"] = a.run_seconds
            rows[(w, tuner, seed)] = row
            with open(os.path.join(a.out, "runs.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{w} {tuner} seed {seed}: {row['trials']} trials, wall {row['wall_s']} s "
                  f"(model {row['model_s']} s)", file=sys.stderr, flush=True)
    return True


def workload_rows(a: argparse.Namespace, rows: dict, w: str) -> tuple[list[dict], list[str]]:
    """The finished runs of workload ``w`` this invocation asks for, and the missing ones."""
    args = workload_args(w, a.quick)
    have, missing = [], []
    for tuner in a.tuners:
        for seed in a.seeds:
            r = rows.get((w, tuner, seed))
            if r and tuple(r["args"]) == args and r["n_trial"] == a.trials:
                have.append(r)
            else:
                missing.append(f"{tuner}/{seed}")
    return have, missing


def remeasure_all(a: argparse.Namespace, rows: dict, opt: MeasureOption,
                  deadline: float | None) -> None:
    """Re-measure each workload whose runs are all done and whose stored re-measure does
    not cover exactly those runs with ``--rounds`` rounds."""
    for w in a.workloads:
        have, missing = workload_rows(a, rows, w)
        args = workload_args(w, a.quick)
        old = load_remeasured(a.out, w, args)
        if missing or (old and old["runs"] == run_ids(have) and old["rounds"] == a.rounds):
            continue
        left = _remaining(deadline)
        if left is not None and left <= 0:
            return
        found = remeasure(w, args, have, a.rounds, opt, a.out)
        print(f"{w}: re-measured {len(found['samples'])} incumbent configs in "
              f"{found['seconds']} s", file=sys.stderr, flush=True)


def print_report(a: argparse.Namespace, rows: dict) -> None:
    """The report of every asked-for workload that has a re-measure (markdown, stdout)."""
    verdicts = []
    for w in a.workloads:
        args = workload_args(w, a.quick)
        found = load_remeasured(a.out, w, args)
        have, missing = workload_rows(a, rows, w)
        if found is None:
            print(f"## {w}\n\nnot re-measured yet ({len(have)} runs done, missing: "
                  f"{', '.join(missing) or 'none'}); run without --report to finish it\n")
            continue
        covered = [r for r in have if f"{r['tuner']}/{r['seed']}" in set(found["runs"])]
        if missing or len(covered) < len(have):
            print(f"(note: {w}'s re-measure covers {len(covered)} of the asked runs)")
        values = {int(i): g for i, g in found["gflops"].items()}
        text = stats.report(w, covered, values, found["rounds"])
        print(text + "\n")
        verdicts += [line for line in text.splitlines() if line.startswith(f"- {w},")]
    print(stats.LEGEND.format(n=stats.N_RESAMPLES))
    if verdicts:
        print("\nDoes GBT reach X% of the best in <= 0.5x random's trials?\n")
        print("\n".join(verdicts))


def main(argv: list[str] | None = None) -> None:
    a = _settings(_parser().parse_args(argv))
    os.makedirs(a.out, exist_ok=True)
    rows = load_rows(a.out)
    if not a.report:
        deadline = None if a.budget_s is None else time.monotonic() + a.budget_s
        opt = MeasureOption(number=a.number, repeat=a.repeat, timeout=10,
                            n_parallel=a.n_parallel)
        done = tune_all(a, rows, opt, deadline)
        remeasure_all(a, rows, opt, deadline)
        if not done:
            print("the --budget-s is spent; run the same command again to resume",
                  file=sys.stderr)
    print_report(a, rows)


if __name__ == "__main__":
    main()
