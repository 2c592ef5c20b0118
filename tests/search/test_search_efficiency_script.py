"""benchmarks/search_efficiency.py: the statistics on synthetic data (exact values), the
report, the argument errors, and a --quick smoke run end to end (slow)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from looptune.search import (ErrorKind, MeasureOption, MeasureResult, TuningError, create_task,
                             measure_configs)
from looptune.search.log import Record, rank_configs
from looptune.search.template import TaskKey

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import search_efficiency as se
import search_efficiency_stats as st

KEY = TaskKey("synthetic", (), "c")


def rec(index: int, cost: float, kind: str = "measure", error: str = "none") -> Record:
    """A log record of config ``index`` that took ``cost`` seconds (1 GFLOP)."""
    return Record(KEY, {"index": index, "knobs": {}}, [cost], error, flop=1e9, kind=kind)


# ---- incumbents -------------------------------------------------------------------------------


def test_incumbents_follow_the_median_rule_trial_by_trial():
    log = [rec(3, 1.0, error="build_error"),      # no correct config yet
           rec(5, 2.0), rec(7, 3.0),               # 5 is faster
           rec(9, 1.0),                            # 9 takes over
           rec(9, 0.5, error="wrong_result"),      # ... until it is found wrong: back to 5
           rec(5, 2.5, kind="remeasure"),          # the tuner's re-measure: 5 -> 2.25 median
           rec(7, 1.0, kind="remeasure")]          # 7 -> median(3, 1) = 2.0: returned
    assert st.incumbents(log) == [None, 5, 5, 9, 7]


def test_incumbents_count_a_race_at_the_trial_it_follows():
    log = [rec(1, 1.0), rec(2, 0.5),               # 2's one timing beats 1's: a race
           rec(1, 1.0, kind="remeasure"), rec(2, 1.5, kind="remeasure"),
           rec(1, 1.0, kind="remeasure"), rec(2, 1.5, kind="remeasure"),   # 2 lost
           rec(3, 0.4),                            # unconfirmed, 1 (confirmed) would stay,
           rec(1, 1.0, kind="remeasure"), rec(3, 0.6, kind="remeasure"),   # but 3 wins its
           rec(4, 2.0)]                                                    # race at once
    assert st.incumbents(log) == [1, 1, 3, 3]
    assert st.incumbents(log[:7]) == [1, 1, 1]     # before 3's race
    # without the race records 2 would have held from trial 2
    assert st.incumbents([r for r in log if r.kind == "measure"]) == [1, 2, 3, 3]


def test_incumbents_without_remeasure_and_ties_to_the_lower_index():
    assert st.incumbents([rec(4, 1.0), rec(2, 1.0), rec(8, 0.5)]) == [4, 2, 8]
    assert st.incumbents([]) == []


def test_incumbents_equal_rank_configs_over_every_prefix():
    rng = np.random.default_rng(7)
    kinds = ["none"] * 6 + ["wrong_result", "timeout"]
    log = []
    for _ in range(60):
        err = kinds[rng.integers(len(kinds))]
        log.append(rec(int(rng.integers(25)), float(rng.uniform(0.5, 3.0)), error=err))
    expected = []
    for n in range(1, len(log) + 1):
        ranked = rank_configs(log[:n])
        expected.append(ranked[0].index if ranked else None)
    assert st.incumbents(log) == expected


def test_incumbents_with_races_equal_rank_configs_after_each_trials_records():
    """Re-measure records anywhere in the log: the incumbent after a trial is rank_configs
    over every record up to the next trial."""
    rng = np.random.default_rng(11)
    log = []
    for _ in range(80):
        kind = "remeasure" if rng.random() < 0.3 and log else "measure"
        err = "wrong_result" if rng.random() < 0.05 else "none"
        log.append(rec(int(rng.integers(20)), float(rng.uniform(0.5, 3.0)), kind, err))
    trial_ends = [n for n in range(1, len(log) + 1) if n == len(log) or
                  log[n].kind == "measure"]
    expected = []
    for n in trial_ends:
        if any(r.kind == "measure" for r in log[:n]):
            ranked = rank_configs(log[:n])
            expected.append(ranked[0].index if ranked else None)
    assert len(expected) > 40 and st.incumbents(log) == expected


# ---- curves and reaching ----------------------------------------------------------------------


def test_curve_maps_incumbents_to_remeasured_values():
    assert st.curve([None, 1, 1, 2, 3], {1: 10.0, 2: 30.0}) == [0.0, 10.0, 10.0, 30.0, 0.0]


def test_reach_is_the_first_trial_at_or_above_the_target():
    c = [0.0, 10.0, 30.0, 20.0, 40.0]          # a re-measured curve may fall
    assert st.reach(c, 30.0) == 3
    assert st.reach(c, 0.95 * 40.0) == 5
    assert st.reach(c, 41.0) is None
    assert st.reach_seconds(c, [0.5, 1.0, 2.0, 2.5, 4.0], 25.0) == 2.0
    assert st.reach_seconds(c, [0.5, 1.0, 2.0, 2.5, 4.0], 99.0) is None


def test_values_at_a_trial_and_at_a_wall_time():
    c, e = [0.0, 10.0, 30.0], [1.0, 2.0, 3.0]
    assert [st.at_trial(c, t) for t in (1, 2, 3, 10)] == [0.0, 10.0, 30.0, 30.0]
    assert [st.at_seconds(c, e, s) for s in (0.5, 1.0, 2.9, 99.0)] == [0.0, 0.0, 10.0, 30.0]
    assert st.at_trial([], 5) == 0.0


def test_censor_counts_the_runs_that_never_reached_as_the_cap():
    assert st.censor([3, None, 5], 11) == ([3.0, 11.0, 5.0], 2)


# ---- bootstrap --------------------------------------------------------------------------------


def test_bootstrap_exact_values():
    assert st.bootstrap([3.0, 3.0, 3.0]) == (3.0, 3.0, 3.0)
    assert st.bootstrap([7.5]) == (7.5, 7.5, 7.5)
    # two seeds: resampled means are 0, 5, 10 with probabilities 1/4, 1/2, 1/4
    assert st.bootstrap([0.0, 10.0]) == (5.0, 0.0, 10.0)
    assert st.bootstrap([0.0, 10.0], stat=np.median) == (5.0, 0.0, 10.0)
    assert st.bootstrap_ratio([1.0, 1.0], [2.0, 2.0]) == (0.5, 0.5, 0.5)
    assert st.bootstrap_ratio([0.0, 10.0], [5.0]) == (1.0, 0.0, 2.0)


def test_bootstrap_interval_is_reproducible_and_covers_the_mean():
    x = np.random.default_rng(0).normal(100.0, 5.0, size=50)
    m, lo, hi = st.bootstrap(x)
    assert st.bootstrap(x) == (m, lo, hi)
    assert m == pytest.approx(x.mean()) and lo < m < hi
    assert hi - lo == pytest.approx(2 * 1.96 * x.std() / np.sqrt(50), rel=0.15)


def test_bootstrap_errors():
    with pytest.raises(ValueError, match=r"bootstrap: needs a non-empty list of numbers"):
        st.bootstrap([])
    with pytest.raises(ValueError, match=r"bootstrap: values must be finite; got \[1.0, nan\]"):
        st.bootstrap([1.0, float("nan")])
    with pytest.raises(ValueError, match=r"bootstrap_ratio: the denominator's mean must be > 0"):
        st.bootstrap_ratio([1.0], [0.0, 0.0])


# ---- the verdict --------------------------------------------------------------------------------


def test_verdict_yes_no_and_not_shown():
    yes = st.verdict([2] * 5, [10] * 5, 11, 11)
    assert yes.startswith("YES, gbt reaches 95% in <= 0.5x random's trials: gbt/random "
                          "trials to 95% = 0.20 (95% CI 0.20-0.20; gbt 2.0 vs random 10.0")
    assert st.verdict([10] * 5, [10] * 5, 11, 11).startswith(
        "NO, gbt does not reach 95% in <= 0.5x random's trials: gbt/random trials to 95% = 1.00")
    assert st.verdict([1, 9, 1, 9, 1], [10, 2, 10, 2, 10], 11, 11).startswith(
        "NOT SHOWN: the interval includes 0.5, more seeds are needed to tell")
    assert st.verdict([None] * 3, [4, 5, 6], 11, 11) == \
        "NO: gbt never reached 95% of the best in 3 seeds"
    assert st.verdict([], [4], 11, 11) == "no verdict: gbt has no runs"
    assert st.verdict([4], [], 11, 11, frac=0.9) == "no verdict: random has no runs"


def test_verdict_with_runs_that_never_got_there():
    # random never reached on every seed: its counts are lower bounds, so YES still holds
    v = st.verdict([2] * 5, [None] * 5, 11, 11)
    assert v.startswith("YES") and "5 of 5 random seeds never got there (counted as 11: " \
        "the ratio is an upper bound)" in v
    # gbt censored once: the ratio is a lower bound, so NO still holds
    v = st.verdict([9, 9, 9, 9, None], [10] * 5, 11, 11)
    assert v.startswith("NO, gbt does not") and "= 0.94" in v and "1 of 5 gbt seeds" in v
    # random censored and the ratio above 0.5: the true ratio may be lower, so open
    v = st.verdict([10] * 5, [8, 8, 8, 8, None], 11, 11)
    assert v.startswith("NOT SHOWN: runs that never got there leave it open")


# ---- the report ---------------------------------------------------------------------------------


def _row(tuner: str, seed: int, inc: list, wall: float = 5.0) -> dict:
    n = len(inc)
    return {"workload": "w", "args": [1], "tuner": tuner, "seed": seed, "n_trial": n,
            "trials": n, "incumbent": inc, "elapsed": [wall * (t + 1) / n for t in range(n)],
            "wall_s": wall, "model_s": 1.0}


def test_report_on_synthetic_runs():
    values = {1: 10.0, 2: 20.0, 3: 40.0}
    rows = [_row("random", s, [None, 1, 1, 2, 2, 2, 2, 3]) for s in range(5)]
    rows += [_row("gbt", s, [1, 3, 3, 3, 3, 3, 3, 3]) for s in range(5)]
    text = st.report("w", rows, values, rounds=3)
    lines = text.splitlines()
    assert "best config found by any tuner: 40.0 GFLOP/s (re-measured: 3 incumbent configs, " \
        "3 interleaved rounds, median)" in text
    assert "| random | 5 | 40.0 [40.0, 40.0] | 8.0 [8.0, 8.0] | 8.0 [8.0, 8.0] " \
        "| 5.0 [5.0, 5.0] | 5 | 1 |" in lines
    assert "| gbt | 5 | 40.0 [40.0, 40.0] | 2.0 [2.0, 2.0] | 2.0 [2.0, 2.0] " \
        "| 1.2 [1.2, 1.2] | 5 | 1 |" in lines
    assert "| tuner | 8 |" in lines and "| gbt | 40.0 |" in lines    # after 8 trials
    assert "| tuner | 0.5 s | 1.2 s | 2.5 s | 5 s |" in lines
    assert "| random | 0.0 | 0.0 | 20.0 | 40.0 |" in lines
    assert "| gbt | 0.0 | 10.0 | 40.0 | 40.0 |" in lines
    assert "- w, 95% of the best: YES, gbt reaches 95% in <= 0.5x random's trials: " \
        "gbt/random trials to 95% = 0.25 (95% CI 0.25-0.25" in lines[-2]


def test_report_marks_runs_that_never_got_there_and_failed_remeasures():
    rows = [_row("random", s, [1, 1, 1, 1]) for s in range(2)] + [_row("gbt", 0, [1, 2, 2, 2])]
    text = st.report("w", rows, {1: 10.0, 2: 20.0, 9: 5.0}, rounds=2)
    assert "| random | 2 | 10.0 [10.0, 10.0] | >=5.0 [5.0, 5.0] (0/2 reached) |" in text
    rows.append(_row("gbt", 1, [7, 7, 7, 7]))                 # 7 failed to re-measure
    text = st.report("w", rows, {1: 10.0, 2: 20.0}, rounds=2)
    assert "(1 incumbents failed to re-measure; they count as 0 GFLOP/s)" in text
    assert "| gbt | 2 | 10.0 [0.0, 20.0] | >=3.5 [2.0, 5.0] (1/2 reached) |" in text


# ---- the command line's errors -----------------------------------------------------------------


def test_command_line_errors():
    with pytest.raises(SystemExit, match=r"unknown workload 'softmax'; choose from matmul, "
                                          r"conv2d, auto_softmax, auto_conv2d"):
        se.main(["--workloads", "softmax", "--report", "--out", "/nonexistent/x"])
    with pytest.raises(SystemExit, match=r"unknown tuner 'bayes'; use random, grid, ga"):
        se.make_tuner("bayes", None, 0, ".", "matmul")
    with pytest.raises(SystemExit, match=r"options are only for the gbt tuners; got 'ga'"):
        se.make_tuner("ga[pop=4]", None, 0, ".", "matmul")
    assert se._options("gbt[explore=64,eps=0.05,objective=reg]") == \
        ("gbt", {"explore": 64, "eps": 0.05, "objective": "reg"})


def test_settings_quick_and_full_defaults():
    a = se._settings(se._parser().parse_args(["--quick", "--seeds", "3"]))
    assert (a.tuners, a.trials, a.seeds, a.rounds) == (["random", "gbt"], 10, [3], 2)
    assert a.workloads == list(se.WORKLOADS) and a.out.endswith("search_efficiency_quick")
    a = se._settings(se._parser().parse_args(["--tuners", "random,gbt[explore=8,eps=0.1]",
                                              "--transfer", "--tasks", "matmul"]))
    assert a.tuners == ["random", "gbt[explore=8,eps=0.1]", "gbt-transfer"]
    assert (a.workloads, a.seeds, a.rounds, a.trials) == (["matmul"], [0, 1, 2, 3, 4], 5, 200)


def test_auto_workloads_are_auto_task_spaces_of_the_examples():
    task = se.make_task("auto_softmax", se.QUICK_ARGS["auto_softmax"])
    assert task.name.startswith("auto_") and task.config_space.size > 1
    assert task.flop == pytest.approx(se.make_task("auto_softmax", (13, 45)).flop)
    assert se.make_task("matmul", (24, 40, 33)).name == "se_matmul"


class _FailingTuner:
    """Stands in for a tuner whose every candidate fails (tune raises TuningError)."""

    def __init__(self, task):
        self.task = task

    def next_batch(self, n):
        return []

    def update(self, configs, results):
        return None

    def tune(self, n_trial, opt, callbacks=(), seconds=None):
        for i in range(3):
            res = MeasureResult(self.task.config_space.get(i), [], ErrorKind.BUILD_ERROR, "x")
            for cb in callbacks:
                cb(self, res)
        raise TuningError("every one of the 3 candidates failed", {"build_error": 3})


def test_a_run_whose_every_candidate_failed_is_a_row_of_zeros(tmp_path, monkeypatch, capsys):
    task = create_task("test_matmul", (5, 7, 3))
    monkeypatch.setattr(se, "make_task", lambda w, a: task)
    monkeypatch.setattr(se, "make_tuner", lambda *a: _FailingTuner(task))
    monkeypatch.setenv("LOOPTUNE_CACHE", os.environ.get("LOOPTUNE_CACHE", ""))  # run_one sets it
    opt = MeasureOption(n_parallel=1)
    row = se.run_one("matmul", (5, 7, 3), "random", 0, 3, str(tmp_path), opt)
    assert "matmul random seed 0: every one of the 3 candidates failed" in capsys.readouterr().err
    assert (row["trials"], row["incumbent"], row["errors"]) == (3, [None] * 3, {"build_error": 3})
    assert len(row["elapsed"]) == 3 and row["logged"] == [0.0] * 3
    assert st.curve(row["incumbent"], {}) == [0.0] * 3


# ---- end to end ------------------------------------------------------------------------------


def _script(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    return subprocess.run([sys.executable, str(BENCH / "search_efficiency.py"), "--quick",
                           "--out", str(out), *args], capture_output=True, text=True,
                          timeout=900, env=env, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("workload", se.WORKLOADS)
def test_every_workload_measures_correctly_at_its_quick_sizes(workload):
    task = se.make_task(workload, se.workload_args(workload, quick=True))
    rng = np.random.default_rng(3)
    picks = [0, *(int(i) for i in rng.integers(len(task.config_space), size=3))]
    res = measure_configs(task, picks, MeasureOption(number=1, repeat=1, n_parallel=1))
    assert all(r.error_kind in (ErrorKind.NONE, ErrorKind.INVALID_CONFIG) for r in res), \
        [(r.config.index, r.error_kind, r.error_msg) for r in res]
    assert res[0].ok


# A hand template and an auto space: the script's own steps (runs, budget, resume, the
# re-measure, the report) are the same for every workload, and each workload is checked at
# its quick sizes above. auto_softmax, not auto_conv2d: a conv run costs 1.5x (its builds).
WORKLOADS_E2E = ("matmul", "auto_softmax")
# 4 trials, not --quick's 10: the quick runs never train GBT's model (n_init = 12 correct
# measurements), so more trials only add random picks; a run's fixed costs (workers, the
# tuner's final re-measure) stay. Two seeds and two rounds, as the assertions need.
TRIALS_E2E = "4"


@pytest.mark.slow
def test_quick_run_end_to_end_and_resume(tmp_path):
    out = tmp_path / "se"
    wl = ("--workloads", ",".join(WORKLOADS_E2E), "--trials", TRIALS_E2E)
    p = _script(out, *wl, "--budget-s", "0")
    assert p.returncode == 0, p.stderr
    assert "the --budget-s is spent; run the same command again to resume" in p.stderr
    assert "## matmul\n\nnot re-measured yet (0 runs done" in p.stdout
    p = _script(out, *wl)
    assert p.returncode == 0, p.stderr
    for w in WORKLOADS_E2E:
        assert f"## {w}\n\nbest config found by any tuner: " in p.stdout
        assert f"- {w}, 95% of the best: " in p.stdout.split("Does GBT reach")[1]
        found = json.loads((out / f"remeasured_{w}.json").read_text())
        assert found["runs"] == ["gbt/0", "gbt/1", "random/0", "random/1"]
        assert all(len(s) == 2 for s in found["samples"].values())
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(len(r["incumbent"]) == len(r["elapsed"]) for r in rows)
    again = _script(out, *wl)                  # resumes: nothing tuned or re-measured again
    assert again.returncode == 0, again.stderr
    assert "trials, wall" not in again.stderr and "re-measured" not in again.stderr
    assert len((out / "runs.jsonl").read_text().splitlines()) == 8
    assert again.stdout == _script(out, *wl, "--report").stdout == p.stdout
