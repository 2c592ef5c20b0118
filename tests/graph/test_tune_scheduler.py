"""The whole-model task scheduler on synthetic tasks (deterministic fake costs, no measuring)."""
from __future__ import annotations

import math

import pytest
from looptune.errors import LooptuneError
from looptune.graph.task_scheduler import TaskScheduler


def curve(base: float, floor: float, speed: float):
    """A task whose k-th trial costs floor + (base - floor) / (1 + speed * k): improving fast
    at first, then flattening (what tuning curves look like)."""
    return lambda k: floor + (base - floor) / (1.0 + speed * k)


def simulate(sched: TaskScheduler, costs, budget: int, per_round: int = 4):
    """Drive ``sched`` as tune_tasks does, with fake costs; the trials each task got."""
    used = 0
    picks = []
    while used < budget:
        pick = sched.pick()
        if pick is None:
            break
        k = pick.task
        n = min(per_round, budget - used)
        t0 = sched.tasks[k].trials
        sched.observe(k, [costs[k](t0 + j) for j in range(n)])
        used += n
        picks.append(pick)
    return [t.trials for t in sched.tasks], picks


def model_latency(sched: TaskScheduler) -> float:
    return sched.estimated_latency()


def test_warmup_is_round_robin_in_order():
    sched = TaskScheduler([1, 3, 2])
    picks = []
    for _ in range(3):
        p = sched.pick()
        picks.append((p.task, p.reason))
        sched.observe(p.task, [1e-3, 9e-4])
    assert picks == [(0, "warmup"), (1, "warmup"), (2, "warmup")]
    assert sched.pick().reason in ("gradient", "explore")


def test_gradient_gives_the_round_to_the_largest_weight_times_improvement():
    # same measurements, weights 1 and 5: the heavier task saves 5x more model latency
    sched = TaskScheduler([1, 5], exploration=0.0)
    for k in range(2):
        sched.pick()
        sched.observe(k, [2e-3, 1.5e-3, 1e-3])
    p = sched.pick()
    assert (p.task, p.reason) == (1, "gradient")
    assert sched.score(1) == pytest.approx(5 * sched.score(0))


def test_recent_improvement_wins_over_a_flat_task_of_the_same_weight():
    sched = TaskScheduler([1, 1], exploration=0.0, window=4, alpha=0.5)
    sched.pick()
    sched.observe(0, [4e-3, 3e-3, 2e-3, 1.5e-3, 1e-3])       # still improving
    sched.pick()
    sched.observe(1, [1e-3, 1e-3, 1e-3, 1e-3, 1e-3])         # flat at the same best
    assert sched.tasks[0].best == sched.tasks[1].best
    assert sched.tasks[0].backward(4) == pytest.approx((4e-3 - 1e-3) / 4)
    assert sched.tasks[1].backward(4) == 0.0
    assert sched.pick().task == 0


def test_weight_times_improvement_decides_between_unequal_tasks():
    # task 0: weight 1, improving 1e-4 s/trial; task 1: weight 3, improving 5e-5 s/trial:
    # 3 x 5e-5 > 1 x 1e-4, so task 1 (alpha=1: the measured improvement alone)
    sched = TaskScheduler([1, 3], exploration=0.0, window=4, alpha=1.0)
    sched.pick()
    sched.observe(0, [1e-3 - 1e-4 * k for k in range(5)])
    sched.pick()
    sched.observe(1, [1e-3 - 5e-5 * k for k in range(5)])
    assert sched.score(0) == pytest.approx(1e-4)
    assert sched.score(1) == pytest.approx(1.5e-4)
    assert sched.pick().task == 1


def test_exploration_share_is_respected_and_goes_to_the_least_tuned_task():
    costs = [curve(5e-3, 1e-3, 0.5), curve(5e-3, 1e-3, 0.5), curve(1e-3, 9e-4, 0.1)]
    sched = TaskScheduler([10, 10, 1], exploration=0.25)
    trials, picks = simulate(sched, costs, budget=400)
    after = [p for p in picks if p.reason != "warmup"]
    explored = [p for p in after if p.reason == "explore"]
    assert len(explored) == math.floor(0.25 * len(after))
    assert sched.explored == len(explored)
    assert min(trials) >= 0.25 * 400 / 3 * 0.5     # the light task is not starved
    # without exploration the light task (weight 1, flat) gets only its warm-up round
    sched0 = TaskScheduler([10, 10, 1], exploration=0.0)
    trials0, _ = simulate(sched0, costs, budget=400)
    assert trials0[2] < trials[2]


def test_budget_respected_and_heavier_tasks_get_more_trials():
    costs = [curve(4e-3, 1e-3, 0.3), curve(4e-3, 1e-3, 0.3), curve(4e-3, 1e-3, 0.3)]
    sched = TaskScheduler([1, 2, 8], exploration=0.1)
    trials, _ = simulate(sched, costs, budget=301, per_round=8)
    assert sum(trials) == 301
    assert trials[2] > trials[1] > trials[0]


def test_gradient_beats_round_robin_on_the_model_latency():
    costs = [curve(8e-3, 1e-3, 0.2), curve(1e-3, 8e-4, 0.5), curve(3e-3, 2e-4, 0.05),
             curve(2e-4, 1e-4, 1.0)]
    weights = [4, 1, 6, 2]
    sched = TaskScheduler(weights)
    simulate(sched, costs, budget=240, per_round=8)
    rr = sum(w * costs[k](60 - 1) for k, w in enumerate(weights))   # 60 trials each
    assert model_latency(sched) < rr


def test_a_round_that_measured_nothing_kills_the_task_and_all_dead_ends():
    sched = TaskScheduler([1, 2])
    sched.pick()
    sched.observe(0, [])
    assert sched.tasks[0].dead
    assert sched.pick().task == 1
    sched.observe(1, [1e-3])
    sched.kill(1)
    assert sched.pick() is None


def test_failed_candidates_count_as_trials_but_not_as_a_best():
    sched = TaskScheduler([1, 1], exploration=0.0)
    sched.pick()
    sched.observe(0, [math.inf, math.inf])            # every candidate failed
    sched.pick()
    sched.observe(1, [2e-3, 1e-3])
    assert sched.tasks[0].trials == 2 and sched.tasks[0].best == math.inf
    assert sched.score(0) == 0.0
    assert sched.estimated_latency() == math.inf
    assert sched.pick().task == 1                    # the task that has a gain


def test_resumed_records_skip_the_warmup():
    sched = TaskScheduler([1, 1])
    sched.observe(0, [1e-3, 9e-4], round_=False)     # from the log
    p = sched.pick()
    assert (p.task, p.reason) == (1, "warmup")


@pytest.mark.parametrize("kwargs, match", [
    (dict(weights=[]), "at least one task weight"),
    (dict(weights=[1, 0]), "weight 1 must be a positive number; got 0"),
    (dict(weights=[1, True]), "weight 1 must be a positive number"),
    (dict(weights=[1], exploration=1.5), r"exploration must be a share in \[0, 1\]; got 1.5"),
    (dict(weights=[1], window=0), "window must be a positive int; got 0"),
    (dict(weights=[1], alpha=-0.1), r"alpha must be in \[0, 1\]"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(LooptuneError, match=match):
        TaskScheduler(**kwargs)
