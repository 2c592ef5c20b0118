"""benchmarks/search_surrogate.py: the landscape is fitted to the logs and keyed by program,
the fake measurer times configs around it, and a --quick run reports every tuner."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from looptune.search import MeasureOption, RandomTuner, log_to_file
from looptune.search.programs import canonical

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import search_efficiency as se
import search_surrogate as ss
from helpers_measure import FakeMeasurer


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """A log of 60 random configs of the tiny auto softmax, timed by a known cost."""
    task = se.make_task("auto_softmax", se.workload_args("auto_softmax", True))
    sp = task.config_space

    def cost(index):                      # a cost of the canonical config's knob choices
        vec = sp.vector(canonical(task, sp.get(index))[0].index)
        return 1e-5 * (1.0 + sum(vec))
    path = tmp_path_factory.mktemp("sur") / "random.jsonl"
    t = RandomTuner(task, seed=0)
    t.make_measurer = lambda option: FakeMeasurer(task, cost)
    t.tune(60, MeasureOption(n_parallel=4, remeasure_top=0, race_rounds=0),
           callbacks=[log_to_file(path)])
    return task, cost, path


def _records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_the_landscape_follows_the_logged_timings_and_is_one_value_per_program(logged):
    task, _, path = logged
    land = ss.Landscape(task, _records(path))
    assert land.n_programs >= 20
    recs = [r for r in _records(path) if r["kind"] == "measure"]
    true = np.array([r["gflops"] for r in recs])
    fitted = np.array([land.gflops(r["config"]["index"]) for r in recs])
    assert np.corrcoef(np.log(true), np.log(fitted))[0, 1] > 0.6   # a forest on ~40 points
    # configs that differ only in knobs their program does not read: one value
    sp = task.config_space
    i = recs[0]["config"]["index"]
    assert land.gflops(i) == land.gflops(land.canonical(i))
    assert land.best_logged >= fitted.max() * 0.999
    other = _records(path)[0] | {"task": {"name": "another"}}
    with pytest.raises(SystemExit, match="programs"):
        ss.Landscape(task, [other])
    assert sp.size > 1


def test_the_fake_measurer_draws_each_timing_around_the_truth(logged):
    task, _, path = logged
    land = ss.Landscape(task, _records(path))
    fm = ss.FakeMeasurer(land, np.random.default_rng(0), noise=0.1, repeat=400)
    cfg = task.config_space.get(_records(path)[0]["config"]["index"])
    (res,) = list(fm.measure([cfg]))
    assert res.kind == "measure" and len(res.costs) == 400
    assert res.gflops == pytest.approx(land.gflops(cfg.index), rel=0.03)
    assert np.std(np.log(res.costs)) == pytest.approx(0.1, rel=0.2)
    again = list(fm.remeasure([cfg, cfg], 3))
    assert len(again) == 6 and {r.kind for r in again} == {"remeasure"}


def test_a_quick_run_reports_every_tuner_and_the_verdict(logged, tmp_path, capsys):
    _, _, path = logged
    out = tmp_path / "runs.json"
    assert ss.main(["--logs", str(path), "--quick", "--tuners", "random,gbt[n_init=4]",
                    "--trials", "16", "--seeds", "0-1", "--jobs", "1", "--out",
                    str(out)]) == 0
    text = capsys.readouterr().out
    assert "| random | 2 |" in text and "| gbt[n_init=4] | 2 |" in text
    assert "gbt[n_init=4], 95%:" in text
    runs = json.loads(out.read_text())
    assert len(runs) == 4 and all(len(r["curve"]) == 16 for r in runs)
    assert ss._seeds("0-2,5") == [0, 1, 2, 5]
    with pytest.raises(SystemExit, match="no log"):
        ss.main(["--logs", str(tmp_path / "none*.jsonl"), "--quick"])
    with pytest.raises(SystemExit, match="gbt-transfer learns from other workloads"):
        ss.main(["--logs", str(path), "--quick", "--tuners", "random,gbt-transfer"])
