"""The statistics and the report of benchmarks/search_efficiency.py (no measuring here).

A run is one row of ``<out>/runs.jsonl``: per trial its *incumbent* (the config the run
would return if it stopped after that trial, by the project's median rule,
``looptune.search.log.rank_configs``) and its wall-clock time since the run started. A
workload's re-measure maps every incumbent config to a re-measured median GFLOP/s; a run's
curve is that value at every trial. Everything below works on those plain lists, so it is
tested with synthetic data.

Intervals are percentile bootstraps over seeds (numpy, ``N_RESAMPLES`` resamples, a fixed
seed so that a report prints the same figures twice).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from looptune.search.log import Record, rank_configs

N_RESAMPLES = 2000
LEVEL = 0.95
CHECKPOINTS = (10, 25, 50, 100, 200, 500, 1000, 2000, 5000)
WALL_FRACTIONS = (0.1, 0.25, 0.5, 1.0)

# ---- incumbents and curves ---------------------------------------------------------------


def incumbents(records: Sequence[Record]) -> list[int | None]:
    """Per trial (each ``kind == "measure"`` record, in log order), the index of the config
    ``rank_configs`` ranks first over the records so far (None before a correct one).
    Re-measure records count where the log has them: a race (the tuner's incumbent against
    the challengers of the batch just measured, ``Tuner`` step 2b) at the trial it follows,
    the final re-measure at the last trial, whose incumbent is then what the tuner returns."""
    seen: dict[int, list[Record]] = {}
    done: list[Record] = []
    out: list[int | None] = []
    inc: int | None = None
    for r in records:
        done.append(r)
        seen.setdefault(r.index, []).append(r)
        if r.kind != "measure" or r.index == inc:   # a re-measure, or the incumbent measured
            ranked = rank_configs(done)              # again (or found wrong): rank all
            inc = ranked[0].index if ranked else None
        elif r.ok:                 # one more correct config: it beats the incumbent or not
            ranked = rank_configs(seen[r.index] + (seen[inc] if inc is not None else []))
            inc = ranked[0].index if ranked else inc
        if r.kind == "measure":
            out.append(inc)        # a failed other config changes nothing
        elif out:
            out[-1] = inc          # re-measures decide the incumbent after the trial before
    return out


def curve(incumbent: Sequence[int | None], values: dict[int, float]) -> list[float]:
    """A run's re-measured GFLOP/s per trial: its incumbent's value (0 before a correct
    trial, or when the incumbent failed to re-measure)."""
    return [values.get(i, 0.0) if i is not None else 0.0 for i in incumbent]


def reach(values: Sequence[float], target: float) -> int | None:
    """The first trial (1-based) whose value is >= ``target``; None if none. Re-measured
    curves can fall (a later incumbent that only looked faster), so this is the first time
    the run *would have returned* a config that good."""
    return next((n for n, g in enumerate(values, 1) if g >= target), None)


def reach_seconds(values: Sequence[float], elapsed: Sequence[float],
                  target: float) -> float | None:
    """The wall-clock seconds at the first trial that reaches ``target`` (None if none)."""
    n = reach(values, target)
    return None if n is None else float(elapsed[n - 1])


def at_trial(values: Sequence[float], t: int) -> float:
    """The curve's value after ``t`` trials (its last value for a shorter run)."""
    return float(values[min(t, len(values)) - 1]) if values else 0.0


def at_seconds(values: Sequence[float], elapsed: Sequence[float], s: float) -> float:
    """The curve's value at wall time ``s``: that of the last trial done by then (0 if none)."""
    done = [g for g, e in zip(values, elapsed) if e <= s]
    return float(done[-1]) if done else 0.0


def censor(counts: Sequence[float | None], cap: float) -> tuple[list[float], int]:
    """Counts with the runs that never reached (None) counted as ``cap``; and how many did
    reach. The mean is then a lower bound when any did not."""
    return [cap if c is None else float(c) for c in counts], sum(c is not None for c in counts)


# ---- bootstrap ------------------------------------------------------------------------------


def bootstrap(values: Sequence[float], stat: Callable = np.mean, n_resamples: int = N_RESAMPLES,
              level: float = LEVEL, seed: int = 0) -> tuple[float, float, float]:
    """``(stat(values), low, high)``: a percentile bootstrap interval, resampling the values
    (one per seed) with replacement ``n_resamples`` times."""
    x = _check_sample(values, "bootstrap")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_resamples, len(x)))
    stats = stat(x[idx], axis=1)
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(stat(x)), float(lo), float(hi)


def bootstrap_ratio(num: Sequence[float], den: Sequence[float],
                    n_resamples: int = N_RESAMPLES, level: float = LEVEL,
                    seed: int = 0) -> tuple[float, float, float]:
    """``mean(num) / mean(den)`` with a percentile interval; the two samples (independent
    runs) are resampled independently."""
    a, b = _check_sample(num, "bootstrap_ratio"), _check_sample(den, "bootstrap_ratio")
    if b.mean() <= 0:
        raise ValueError(f"bootstrap_ratio: the denominator's mean must be > 0; got {b.tolist()}")
    rng = np.random.default_rng(seed)
    ma = a[rng.integers(0, len(a), size=(n_resamples, len(a)))].mean(axis=1)
    mb = b[rng.integers(0, len(b), size=(n_resamples, len(b)))].mean(axis=1)
    lo, hi = np.quantile(ma / mb, [(1 - level) / 2, (1 + level) / 2])
    return float(a.mean() / b.mean()), float(lo), float(hi)


def _check_sample(values, who: str) -> np.ndarray:
    x = np.asarray(list(values), dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{who}: needs a non-empty list of numbers (one per seed); got "
                         f"{list(values)!r}")
    if not np.isfinite(x).all():
        raise ValueError(f"{who}: values must be finite; got {x.tolist()}")
    return x


# ---- the verdict ------------------------------------------------------------------------------


def verdict(gbt: Sequence[float | None], rand: Sequence[float | None], cap_gbt: float,
            cap_rand: float, goal: float = 0.5, frac: float = 0.95) -> str:
    """Whether GBT reaches ``frac`` of the best in <= ``goal`` x random's trials, in plain
    words, from the per-seed trial counts (None: never reached; counted as the cap)."""
    pct = f"{frac:.0%}"
    if not gbt or not rand:
        return f"no verdict: {'gbt' if not gbt else 'random'} has no runs"
    g, ng = censor(gbt, cap_gbt)
    r, nr = censor(rand, cap_rand)
    if ng == 0:
        return f"NO: gbt never reached {pct} of the best in {len(g)} seeds"
    ratio, lo, hi = bootstrap_ratio(g, r)
    what = (f"gbt/random trials to {pct} = {ratio:.2f} (95% CI {lo:.2f}-{hi:.2f}; gbt "
            f"{np.mean(g):.1f} vs random {np.mean(r):.1f} trials, mean over seeds)")
    notes = []
    if ng < len(g):
        notes.append(f"{len(g) - ng} of {len(g)} gbt seeds never got there (counted as "
                     f"{cap_gbt:g}: the ratio is a lower bound)")
    if nr < len(r):
        notes.append(f"{len(r) - nr} of {len(r)} random seeds never got there (counted as "
                     f"{cap_rand:g}: the ratio is an upper bound)")
    note = "; " + "; ".join(notes) if notes else ""
    # censored gbt counts can only raise the true ratio, censored random counts only lower it
    if hi <= goal and ng == len(g):
        return f"YES, gbt reaches {pct} in <= {goal:g}x random's trials: {what}{note}"
    if lo > goal and nr == len(r):
        return f"NO, gbt does not reach {pct} in <= {goal:g}x random's trials: {what}{note}"
    why = f"the interval includes {goal:g}, more seeds are needed to tell" \
        if lo <= goal < hi else "runs that never got there leave it open, more trials are needed"
    return f"NOT SHOWN: {why}: {what}{note}"


# ---- the report ------------------------------------------------------------------------------


def _cell(values: Sequence[float], reached: int | None = None, digits: int = 1) -> str:
    """``mean [low, high]``; with ``reached`` < len: ``>=mean ... (k/n reached)``."""
    m, lo, hi = bootstrap(values)
    cell = f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
    if reached is not None and reached < len(values):
        cell = f">={cell} ({reached}/{len(values)} reached)"
    return cell


def tuner_rows(rows: list[dict], values: dict[int, float]) -> dict[str, dict]:
    """Per tuner (in order of appearance) the re-measured curves, wall times and summary
    figures of one workload's runs."""
    top = max(values.values(), default=0.0)
    out: dict[str, dict] = {}
    for tuner in dict.fromkeys(r["tuner"] for r in rows):
        tr = [r for r in rows if r["tuner"] == tuner]
        curves = [curve(r["incumbent"], values) for r in tr]
        cap = max(len(c) for c in curves) + 1
        wall_cap = max(r["wall_s"] for r in tr)
        s = {"runs": tr, "curves": curves, "best": [c[-1] if c else 0.0 for c in curves],
             "cap": cap, "wall_cap": wall_cap}
        for frac in (0.90, 0.95):
            s[f"trials{frac:.0%}"] = [reach(c, frac * top) for c in curves]
            s[f"seconds{frac:.0%}"] = [reach_seconds(c, r["elapsed"], frac * top)
                                       for c, r in zip(curves, tr)]
        out[tuner] = s
    return out


def summary_table(stats: dict[str, dict]) -> list[str]:
    """The per-tuner markdown table: best, trials and seconds to 90% / 95%, wall time."""
    head = ("| tuner | seeds | best GFLOP/s | trials to 90% | trials to 95% | seconds to 95% "
            "| wall s | model s |")
    lines = [head, "|---|" + "---|" * 7]
    for tuner, s in stats.items():
        cells = [_cell(s["best"])]
        for key, cap in (("trials90%", s["cap"]), ("trials95%", s["cap"]),
                         ("seconds95%", s["wall_cap"])):
            vals, k = censor(s[key], cap)
            cells.append(_cell(vals, k))
        wall = np.mean([r["wall_s"] for r in s["runs"]])
        model = np.mean([r["model_s"] for r in s["runs"]])
        lines.append(f"| {tuner} | {len(s['runs'])} | {' | '.join(cells)} | {wall:.0f} "
                     f"| {model:.0f} |")
    return lines


def curve_tables(stats: dict[str, dict]) -> list[str]:
    """Mean re-measured best GFLOP/s (over seeds) against trials and against wall time."""
    n = max(len(c) for s in stats.values() for c in s["curves"])
    marks = [t for t in CHECKPOINTS if t < n] + [n]
    wall = max(r["wall_s"] for s in stats.values() for r in s["runs"])
    secs = [round(f * wall, 1) for f in WALL_FRACTIONS]
    lines = ["", "best GFLOP/s (re-measured, mean over seeds) after N trials:", "",
             "| tuner | " + " | ".join(f"{t}" for t in marks) + " |",
             "|---|" + "---|" * len(marks)]
    for tuner, s in stats.items():
        lines.append(f"| {tuner} | " + " | ".join(
            f"{np.mean([at_trial(c, t) for c in s['curves']]):.1f}" for t in marks) + " |")
    lines += ["", "best GFLOP/s (re-measured, mean over seeds) after S seconds of tuning:", "",
              "| tuner | " + " | ".join(f"{x:g} s" for x in secs) + " |",
              "|---|" + "---|" * len(secs)]
    for tuner, s in stats.items():
        runs = list(zip(s["curves"], s["runs"]))
        lines.append(f"| {tuner} | " + " | ".join(
            f"{np.mean([at_seconds(c, r['elapsed'], x) for c, r in runs]):.1f}"
            for x in secs) + " |")
    return lines


def report(workload: str, rows: list[dict], values: dict[int, float], rounds: int) -> str:
    """One workload's section of the report (markdown) with the gbt-vs-random verdict."""
    stats = tuner_rows(rows, values)
    top = max(values.values(), default=0.0)
    failed = sum(1 for r in rows for i in set(r["incumbent"]) if i is not None
                 and i not in values)
    head = (f"best config found by any tuner: {top:.1f} GFLOP/s (re-measured: {len(values)} "
            f"incumbent configs, {rounds} interleaved rounds, median)")
    lines = [f"## {workload}", "", head]
    if failed:
        lines.append(f"({failed} incumbents failed to re-measure; they count as 0 GFLOP/s)")
    lines += ["", *summary_table(stats), *curve_tables(stats), ""]
    g, r = stats.get("gbt"), stats.get("random")
    for frac in (0.95, 0.90):
        key = f"trials{frac:.0%}"
        v = verdict(g[key] if g else [], r[key] if r else [], g["cap"] if g else 0,
                    r["cap"] if r else 0, frac=frac)
        lines.append(f"- {workload}, {frac:.0%} of the best: {v}")
    return "\n".join(lines)


LEGEND = """\
Figures are means over seeds with 95% percentile-bootstrap intervals (seeds resampled,
{n} resamples). A run's value at trial t is the re-measured median GFLOP/s of the config it
would return after t trials (its incumbent by the median rule); "best" is that value at its
last trial (what the tuner returned). "trials/seconds to X%": until the incumbent re-measures
at >= X% of the best config any tuner found on the workload; ">=" marks a mean where some
seeds never got there (counted as the run length + 1, or its wall time: a lower bound)."""
