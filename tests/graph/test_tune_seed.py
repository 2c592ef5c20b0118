"""A task's first round in ``lt.graph.tune``: the fallback (config 0, what compile builds
without a log) and configs one knob away from it, measured and learnt from, so that a tuned
model is never worse than the untuned one as measured and the search starts from plausible
configs; the seeded rounds go on until the cost model has the measurements it starts from
(the gbt tuner's n_init); resumed logs are not measured again."""
from __future__ import annotations

import pytest

import looptune as lt
from looptune.graph.tune import ModelTask, extract_tasks, fallback_neighbourhood, tune_tasks
from looptune.search import MeasureOption, load_records
from tune_models import twin

FAST = MeasureOption(number=2, repeat=2, timeout=20, n_parallel=2, remeasure_top=0)


def _matmul_task():
    A = lt.placeholder((33, 47), "float32", name="A")
    B = lt.placeholder((47, 65), "float32", name="B")
    k = lt.reduce_axis(47, name="k")
    C = lt.compute((33, 65), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return lt.search.auto_task([A, B, C])


def test_the_neighbourhood_is_config_0_then_one_knob_at_a_time():
    space = _matmul_task().config_space
    dims = space.dims
    idx = fallback_neighbourhood(space, 10_000, seed=3)
    assert idx[0] == 0 and len(set(idx)) == len(idx)
    assert len(idx) == 1 + sum(d - 1 for d in dims)          # every one-knob move, once
    levels = []
    for i in idx[1:]:
        vec = space.vector(i)
        moved = [v for v in vec if v]
        assert len(moved) == 1                                # one knob off its first choice
        levels.append(moved[0])
    assert levels == sorted(levels)                           # second choices first
    assert fallback_neighbourhood(space, 5, seed=3) == idx[:5]
    assert fallback_neighbourhood(space, 5, seed=3) == fallback_neighbourhood(space, 5, seed=3)


@pytest.mark.slow
def test_each_task_starts_with_the_fallback_and_its_neighbours(tmp_path):
    g = twin()
    tasks = {mt.task.key: mt.task for mt in extract_tasks(g)}
    log = tmp_path / "twin.jsonl"
    s = lt.graph.tune(g, trials=6, log_file=log, measure_option=FAST, round_trials=3)
    assert s.new_trials == 6
    recs = [r for r in load_records(log) if r.kind == "measure"]
    by_task: dict = {}
    for r in recs:
        by_task.setdefault(r.task, []).append(r)
    assert len(by_task) == 2                                  # a round of 3 each
    for key, task_recs in by_task.items():
        space = tasks[key].config_space
        assert task_recs[0].index == 0                        # the fallback first
        assert all(sum(1 for v in space.vector(r.index) if v) == 1 for r in task_recs[1:])
    # a tuned task's best is never worse than its fallback as measured
    for t in s.tasks:
        zero = [r.cost for r in recs if r.task.name == t.name and r.index == 0]
        assert not zero or t.best <= zero[0]
    model = lt.graph.compile(g, log=log)
    tuned = [k for k in model.kernels if k.task is not None and k.task.key in by_task]
    assert tuned and {k.schedule for k in tuned} == {"log"}


@pytest.mark.slow
def test_a_resumed_task_continues_the_neighbourhood(tmp_path):
    task = _matmul_task()
    log = tmp_path / "mm.jsonl"
    first = tune_tasks([ModelTask(task, 1, ("mm",))], trials=2, log_file=log,
                       measure_option=FAST, round_trials=2)
    assert first.new_trials == 2
    again = tune_tasks([ModelTask(task, 1, ("mm",))], trials=4, log_file=log,
                       measure_option=FAST, round_trials=2)
    idx = [r.index for r in load_records(log) if r.kind == "measure"]
    assert again.new_trials == 2 and len(idx) == len(set(idx)) == 4
    assert idx[:2] == fallback_neighbourhood(task.config_space, 2)
    # the second run measured the next neighbours: the seed round continues where it stopped
    assert idx[2:] == [i for i in fallback_neighbourhood(task.config_space, 4) if i not in
                       idx[:2]][:2]


@pytest.mark.slow
def test_rounds_are_seeded_until_the_cost_model_can_start(tmp_path):
    task = _matmul_task()
    n_init = 12                                    # the gbt tuner's default
    s = tune_tasks([ModelTask(task, 1, ("mm",))], trials=n_init, log_file=tmp_path / "m.jsonl",
                   measure_option=FAST, round_trials=4)
    recs = [r for r in load_records(tmp_path / "m.jsonl") if r.kind == "measure"]
    assert s.rounds >= 3 and len(recs) == n_init           # a duplicate program is no trial
    near = set(fallback_neighbourhood(task.config_space, 10_000))
    assert all(r.index in near for r in recs)       # no random config among them
