"""Whole-model tuning: task extraction with weights, one budget and one log for all tasks,
resume (also after kill -9), the progress lines, and the errors."""
from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import looptune as lt
import numpy as np
import pytest
from graph_util import kill_9_when
from looptune.errors import GraphError, LooptuneError
from looptune.graph.tune import ModelTask, extract_tasks, tune_tasks
from looptune.search import MeasureOption, load_records
from tune_models import inputs_for, twin

FAST = MeasureOption(number=2, repeat=2, timeout=20, n_parallel=2)


@pytest.fixture(scope="module")
def twin_graph():
    return twin()


def _measures(path) -> list:
    return [r for r in load_records(path) if r.kind == "measure"]


def test_extract_tasks_counts_identical_groups_once_with_their_weight(twin_graph):
    model = lt.graph.compile(twin_graph)
    tasks = extract_tasks(model)
    runs: dict = {}
    for st in model.steps:
        key = model.kernels[st.kernel].task.key
        runs[key] = runs.get(key, 0) + 1
    assert [(t.task.key, t.weight) for t in tasks] == list(runs.items())
    conv = [t for t in tasks if "conv" in t.label]
    assert len(conv) == 1 and conv[0].weight == 2            # the two Conv+Relu groups
    assert sum(t.weight for t in tasks) == len(model.steps)
    # from a Graph: the same tasks (it is compiled without a log)
    assert [(t.task.key, t.weight) for t in extract_tasks(twin_graph)] == list(runs.items())


@pytest.mark.slow
def test_tune_spends_the_budget_in_one_log_then_compile_uses_it(twin_graph, tmp_path):
    log = tmp_path / "twin.jsonl"
    out = io.StringIO()
    s = lt.graph.tune(twin_graph, trials=8, log_file=log, measure_option=FAST, round_trials=2,
                      progress=out)
    recs = _measures(log)
    assert s.trials == s.new_trials == len(recs) == 8
    keys = {t.task.key for t in extract_tasks(twin_graph)}
    assert {r.task for r in recs} == keys                  # both tasks, one log
    assert len({(r.task, r.index) for r in recs}) == 8     # no config measured twice
    lines = out.getvalue().splitlines()
    assert len(lines) == s.rounds >= 4                     # one progress line per round
    assert all("model est." in ln and "trials" in ln for ln in lines)
    assert "warmup" in lines[0] and "warmup" in lines[1]
    best = {t.name: t.best for t in s.tasks}
    for t in s.tasks:
        ok = [r.cost for r in load_records(log) if r.task.name == t.name and r.ok]
        assert min(ok) <= t.best <= max(ok)
    assert s.estimated_latency == pytest.approx(sum(t.weight * best[t.name] for t in s.tasks))
    assert "estimated model latency" in str(s)
    model = lt.graph.compile(twin_graph, log=log)
    assert {k.schedule for k in model.kernels} == {"log"}
    xs = inputs_for(twin_graph)
    for a, b in zip(model(xs), twin_graph.run_reference(xs)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # the same call again: the log already holds the budget, nothing is measured
    again = lt.graph.tune(twin_graph, trials=8, log_file=log, measure_option=FAST)
    assert again.new_trials == 0 and again.trials == 8 and len(_measures(log)) == 8
    assert "trial budget of 8 reached" in again.stopped


@pytest.mark.slow
def test_a_time_budget_stops_after_the_round_in_flight(twin_graph, tmp_path):
    s = lt.graph.tune(twin_graph, seconds=0.01, log_file=tmp_path / "t.jsonl",
                      measure_option=FAST, round_trials=2)
    assert s.rounds == 1 and s.trials == 2
    assert "time budget of 0.01 s reached" in s.stopped


@pytest.mark.slow
def test_an_exhausted_space_ends_the_run_before_the_budget(tmp_path):
    A = lt.placeholder((3, 1), name="A")
    B = lt.compute((3, 1), lambda i, j: A[i, j] * 2.0, name="B")    # a space of 1 config
    task = lt.search.auto_task([A, B])
    assert len(task.config_space) == 1
    s = tune_tasks([ModelTask(task, 1, ("double",))], trials=5, log_file=tmp_path / "x.jsonl",
                   measure_option=FAST)
    assert s.trials == 1 and s.stopped == "every task's space is exhausted"


@pytest.mark.slow
def test_records_of_other_tasks_in_the_log_are_ignored(twin_graph, tmp_path):
    log = tmp_path / "mixed.jsonl"
    A = lt.placeholder((5, 2), name="A")
    B = lt.compute((5, 2), lambda i, j: A[i, j] + 1.0, name="B")
    lt.search.auto_schedule([A, B], trials=2, log_file=str(log),
                            measure_option=FAST)
    # no final re-measure (remeasure_top=0): the claim is about which records count;
    # test_tune_spends_the_budget_in_one_log_then_compile_uses_it runs the re-measure
    s = lt.graph.tune(twin_graph, trials=2, log_file=log, round_trials=2,
                      measure_option=dataclasses.replace(FAST, remeasure_top=0))
    assert s.new_trials == 2 and len(_measures(log)) == 4


@pytest.mark.parametrize("kwargs, match", [
    (dict(), "give a budget: trials=N"),
    (dict(trials=-1), "trials must be a non-negative int; got -1"),
    (dict(trials=2.5), "trials must be a non-negative int; got 2.5"),
    (dict(seconds=0), "seconds must be a positive number; got 0"),
    (dict(trials=4, tuner="nope"), "tuner must be one of gbt, .*; got 'nope'"),
])
def test_bad_arguments(twin_graph, kwargs, match):
    with pytest.raises(LooptuneError, match=match):
        lt.graph.tune(twin_graph, **kwargs)


def test_not_a_graph():
    with pytest.raises(GraphError, match="tune: expected a looptune.graph.Graph .*; got str"):
        lt.graph.tune("model.onnx", trials=4)


# ---- resume after kill -9 ----------------------------------------------------------------------

_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    import looptune as lt
    from looptune.search import MeasureOption
    from tune_models import twin
    if __name__ == "__main__":
        lt.graph.tune(twin(), trials={trials}, log_file={log!r}, round_trials=2,
                      measure_option=MeasureOption(number=2, repeat=2, timeout=20,
                                                   n_parallel=2, remeasure_top=0))
""")


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n") if path.exists() else []


def _parsed(path: Path) -> list[dict]:
    """The log's whole lines as JSON (a line torn by the kill is left out)."""
    out = []
    for ln in _lines(path):
        try:
            out.append(json.loads(ln))
        except ValueError:
            pass
    return out


@pytest.mark.slow
def test_resume_after_kill9_loses_no_record_and_measures_nothing_twice(tmp_path):
    # 10 trials, killed after 5, and no final re-measure (remeasure_top=0 above: its records
    # come after the budget's and are no trials; test_tune_spends_the_budget_in_one_log_...
    # runs it): the resume is what is checked (was 14 trials and a re-measure of every task)
    log = tmp_path / "killed.jsonl"
    total = 10
    script = tmp_path / "tune_twin.py"
    script.write_text(_SCRIPT.format(tests=str(Path(__file__).parent), trials=total,
                                     log=str(log)))
    kill_9_when([sys.executable, str(script)],
                lambda: sum(1 for ln in _lines(log) if ln.strip()) >= 5)
    whole = _parsed(log)
    assert 5 <= len(whole) < total
    subprocess.run([sys.executable, str(script)], check=True, timeout=600,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    recs = _measures(log)
    after = _parsed(log)
    assert after[:len(whole)] == whole                       # every earlier record kept
    assert len(recs) == total                                # the budget, resumed ones counted
    assert len({(r.task, r.index) for r in recs}) == total   # nothing measured twice
