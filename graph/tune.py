"""Tuning a whole model: every task of its kernels, one budget, one log, resumable.

```python
summary = lt.graph.tune(g, trials=400, log_file="tiny.jsonl")   # or seconds=600
print(summary)                       # per task: weight, trials, best; the model estimate
model = lt.graph.compile(g, log="tiny.jsonl")
```

1. Task extraction: the model is compiled once without a log; each distinct task (identical
   fused groups share one) is weighted by how many times its kernel runs per inference.
2. One tuner per task (``tuner``: "gbt" by default), each proposing configs of its auto
   scheduler space; the :class:`~looptune.graph.task_scheduler.TaskScheduler` decides which
   task gets the next round of trials (warm-up round robin, then weight x recent
   improvement of the task's best latency, with an exploration share). A task's first round
   measures the fallback (config 0: what ``compile`` builds without a log) and its
   neighbours, configs that differ from it in one knob (:func:`fallback_neighbourhood`), and
   the tuner learns from them: the log's best for the task is never worse than the untuned
   kernel as measured, and the cost model starts from plausible configs rather than random
   ones of a huge space (most of which are many times slower, each measurement seconds).
3. Every measured candidate of every task is appended to ONE JSON Lines log
   (:func:`looptune.search.log_to_file`'s format) as soon as it is measured. Records the log
   already holds count against the budget and are never measured again: after a ``kill -9``
   the same call resumes where the log ends.
4. After each round one progress line (with ``progress=True``): the task, its trials and best
   latency, and the estimated model latency ``sum(weight x best)``.
5. When the budget is spent, the best configs of each task that got new trials are measured
   again (``measure_option.remeasure_top`` of them, in interleaved rounds; these records are
   of kind ``remeasure`` and are not trials), so that a task's best is not one lucky
   measurement; ``remeasure_top=0`` skips it. With a time budget the rounds stop at 90% of
   it and the re-measure takes the rest (the tasks that weigh most in the model first).

Workers: the measurement processes (builders and a runner) of the two tasks tuned last stay
up between their rounds (starting them costs about a second); others are stopped.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from ..errors import LooptuneError
from ..search.callbacks import LogToFile
from ..search.log import load_records
from ..search.measure import MeasureOption, Measurer, MeasureResult
from ..search.task import Task
from ..search.tuner import Tuner, TuningError, StopOnSigint
from ..search.tuners import make_tuner, tuner_class
from .task_scheduler import Pick, TaskScheduler

log = logging.getLogger("looptune.graph.tune")

ROUNDS_SHARE = 0.9      # of a time budget for the rounds; the rest for the final re-measure


@dataclass
class ModelTask:
    """One distinct task of a model: the search task of a fused group's compute DAG, how many
    times its kernel runs per inference (``weight``), and the kernels that share it."""

    task: Task
    weight: int
    kernels: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.kernels[0] if self.kernels else self.task.name


def extract_tasks(graph, target="c") -> list[ModelTask]:
    """The distinct tasks of ``graph`` (a Graph, or a model from ``lt.graph.compile``) with
    their weights, in the order their kernels first run. Groups that run on numpy, and
    kernels without an auto-scheduler task (their sketch failed: they keep a default
    schedule), have nothing to tune and are left out."""
    model = graph if hasattr(graph, "kernels") and hasattr(graph, "steps") else \
        _compile(graph, target)
    weights: dict = {}
    names: dict = {}
    tasks: dict = {}
    for step in model.steps:
        if step.kernel is None:
            continue
        k = model.kernels[step.kernel]
        if k.task is None:
            log.info("tune: kernel %s has no auto-scheduler task; it keeps its %s schedule",
                     k.name, k.schedule)
            continue
        key = k.task.key
        tasks.setdefault(key, k.task)
        weights[key] = weights.get(key, 0) + 1
        if k.name not in names.setdefault(key, []):
            names[key].append(k.name)
    return [ModelTask(tasks[key], weights[key], tuple(names[key])) for key in tasks]


def _compile(graph, target):
    from ..errors import GraphError
    from .compile import compile as compile_graph
    from .ir import Graph
    if not isinstance(graph, Graph):
        raise GraphError(f"tune: expected a looptune.graph.Graph (or a model from "
                         f"lt.graph.compile); got {type(graph).__name__}")
    return compile_graph(graph, target=target, log=None)


# ---- the result ------------------------------------------------------------------------------

@dataclass
class TaskSummary:
    """One task after tuning: its trials (``new`` of them in this run) and best seconds."""

    label: str
    name: str
    weight: int
    trials: int
    new: int
    best: float

    @property
    def share(self) -> float:
        return self.weight * self.best


@dataclass
class TuneSummary:
    """What :func:`tune` did: per task, and the model estimate ``sum(weight x best)``."""

    tasks: list[TaskSummary]
    log_file: str | None
    elapsed: float
    rounds: int
    stopped: str = ""          # why the run ended
    picks: list[Pick] = field(default_factory=list)

    @property
    def estimated_latency(self) -> float:
        """Seconds per inference, summed over the kernels (``inf`` while a task has no
        measured best)."""
        return sum(t.share for t in self.tasks)

    @property
    def trials(self) -> int:
        return sum(t.trials for t in self.tasks)

    @property
    def new_trials(self) -> int:
        return sum(t.new for t in self.tasks)

    def __str__(self) -> str:
        est = self.estimated_latency
        rows = [f"{'task':<40} {'weight':>6} {'trials':>7} {'best ms':>10} {'x weight':>10} "
                f"{'share':>6}"]
        for t in self.tasks:
            ok = math.isfinite(t.best)
            share = f"{100 * t.share / est:5.1f}%" if ok and math.isfinite(est) else "     -"
            rows.append(f"{_short(t.label, 40):<40} {t.weight:>6} {t.trials:>7} "
                        f"{_ms(t.best):>10} {_ms(t.share):>10} {share:>6}")
        rows.append(f"estimated model latency {_ms(est)} ms; {self.trials} trials "
                    f"({self.new_trials} new) in {self.rounds} rounds, {self.elapsed:.1f} s"
                    + (f"; {self.stopped}" if self.stopped else ""))
        if self.log_file:
            rows.append(f"log: {self.log_file}")
        return "\n".join(rows)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 9] + "..." + text[-6:]


def _ms(sec: float) -> str:
    return f"{sec * 1e3:.4f}" if math.isfinite(sec) else "-"


# ---- one task's tuning -----------------------------------------------------------------------

class _KeepOpen:
    """What ``Tuner.tune`` gets from ``make_measurer``: the session's measurer, left open
    when the round's ``tune`` call ends (its workers serve the task's next rounds)."""

    def __init__(self, session: _Session):
        self.session = session

    def __enter__(self) -> Measurer:
        return self.session.measurer()

    def __exit__(self, *exc) -> None:
        return None


class _Session:
    """A task's tuner, and its measurement workers while it is among the tasks tuned last."""

    def __init__(self, mt: ModelTask, tuner: Tuner, option: MeasureOption):
        self.mt, self.tuner, self.option = mt, tuner, option
        # rounds measure new configs only; the final re-measure of the best ones is separate
        self.round_option = dataclasses.replace(option, remeasure_top=0) \
            if getattr(option, "remeasure_top", 0) else option
        self._measurer: Measurer | None = None
        self.resumed = 0
        self.seeded = False
        self.final: MeasureResult | None = None
        tuner.make_measurer = lambda opt: _KeepOpen(self)

    def measurer(self) -> Measurer:
        if self._measurer is None:
            self._measurer = Measurer(self.mt.task, self.option).__enter__()
        return self._measurer

    def resume(self, records) -> list[float]:
        """Load this task's logged measurements (one per config); their costs, in order."""
        results, seen = [], set()
        for rec in records:
            if rec.index in seen or getattr(rec, "kind", "measure") != "measure":
                continue
            try:
                results.append(rec.to_result(self.tuner.space))
                seen.add(rec.index)
            except (LooptuneError, IndexError) as e:
                log.warning("resume: skipping a record of %s: %s", self.mt.task.key, e)
        self.tuner.load_history(results)
        self.resumed = len(results)
        return [r.cost for r in results]

    def seed(self, n: int, callbacks: list, seed: int = 0) -> list[MeasureResult]:
        """Measure up to ``n`` configs of :func:`fallback_neighbourhood` not measured yet (as
        the tuner's own loop does: one measurement per distinct program, each logged by
        ``callbacks``), and let the tuner learn from them; their results. The task's rounds
        are seeded so until the tuner holds as many correct measurements as its cost model
        needs to start (the gbt tuner's ``n_init``; else one round), or the neighbourhood
        is spent."""
        tuner = self.tuner
        space = tuner.space
        batch = [space.get(i) for i in fallback_neighbourhood(space, n + len(tuner.visited),
                                                                seed)
                 if i not in tuner.visited][:n]
        if not batch:
            self.seeded = True
            return []
        results, new = [], []
        for res, fresh in tuner.programs.measure(self.measurer(), batch, tuner):
            if fresh:                  # else a program measured before: no new trial
                tuner._record(res)
                new.append(res)
                for cb in callbacks:
                    cb(tuner, res)
            results.append(res)
        tuner.update(batch, results)
        ok = sum(1 for r in tuner.history if r.ok)
        self.seeded = ok >= getattr(tuner, "n_init", 0) or len(batch) < n
        return new

    def run(self, n: int, callbacks: list) -> list[MeasureResult]:
        """Measure up to ``n`` new candidates (the tuner's own loop); their results."""
        first = len(self.tuner.history)
        try:
            self.tuner.tune(self.tuner.trials + n, self.round_option, callbacks=callbacks)
        except TuningError:            # every candidate of the round failed: logged as such
            pass
        return self.tuner.history[first:]

    def remeasure(self, callbacks: list) -> None:
        """Measure the best configs again (``option.remeasure_top``, interleaved rounds), so
        that the best record of the log is not one lucky measurement."""
        if self.round_option is self.option or self.tuner.best is None:
            return
        try:
            self.final = self.tuner.tune(self.tuner.trials, self.option, callbacks=callbacks)
        except TuningError:
            pass

    @property
    def interrupted(self) -> bool:
        return bool(getattr(self.tuner, "interrupted", False))

    def close(self) -> None:
        if self._measurer is not None:
            self._measurer.close()
            self._measurer = None


def fallback_neighbourhood(space, n: int, seed: int = 0) -> list[int]:
    """Up to ``n`` config indices: the fallback (every knob at its first choice), then the
    configs that differ from it in one knob: every knob's second choice (knobs in an order
    drawn from ``seed``), then every knob's third, and so on. The auto scheduler orders each
    knob's choices by preference, so these are the plausible alternatives."""
    dims = list(space.dims)
    out = [space.index_of([0] * len(dims))]
    order = [int(k) for k in np.random.default_rng(seed).permutation(len(dims))]
    for level in range(1, max(dims, default=1)):
        for k in order:
            if len(out) >= n:
                return out
            if dims[k] > level:
                vec = [0] * len(dims)
                vec[k] = level
                out.append(space.index_of(vec))
    return out[:n]


# ---- the driver --------------------------------------------------------------------------------

def _check_budget(trials, seconds) -> None:
    if trials is None and seconds is None:
        raise LooptuneError("tune: give a budget: trials=N (measurements over all tasks) "
                            "and/or seconds=S")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int)
                               or trials < 0):
        raise LooptuneError(f"tune: trials must be a non-negative int; got {trials!r}")
    if seconds is not None and (isinstance(seconds, bool) or
                                not isinstance(seconds, (int, float)) or not seconds > 0):
        raise LooptuneError(f"tune: seconds must be a positive number; got {seconds!r}")


def tune_tasks(tasks: Sequence[ModelTask], trials: int | None = None,
               seconds: float | None = None, log_file: str | os.PathLike | None = None, *,
               tuner: str = "gbt", measure_option: MeasureOption | None = None,
               round_trials: int | None = None, exploration: float = 0.1, window: int = 24,
               seed: int = 0, resume: bool = True, progress: bool | TextIO = False,
               name: str = "model") -> TuneSummary:
    """Tune ``tasks`` (from :func:`extract_tasks`) under one budget; see :func:`tune`."""
    _check_budget(trials, seconds)
    if not tasks:
        raise LooptuneError("tune: the model has no kernels to tune")
    tuner_class(tuner, "tune")
    option = measure_option or MeasureOption()
    rt = round_trials or _round_size(trials, len(tasks), option.n_parallel)
    sessions = [_Session(mt, make_tuner(tuner, mt.task, seed), option) for mt in tasks]
    sched = TaskScheduler([mt.weight for mt in tasks], exploration, window)
    path = os.fspath(log_file) if log_file is not None else None
    if path and resume and os.path.exists(path):
        _resume(sessions, sched, path)
    stream = (sys.stderr if progress is True else progress) or None
    run = _Run(sessions, sched, trials, seconds, rt, path, stream, name, seed=seed)
    try:
        run.loop()
    finally:
        run.close()
    return run.summary()


def _round_size(trials: int | None, n_tasks: int, n_parallel: int) -> int:
    """Trials per round: 8 (the gbt tuner's plan), fewer when the budget is under 16 per
    task, so that the warm-up takes at most half of it."""
    if trials is None or trials >= 16 * n_tasks:
        return 8
    n = max(1, trials // (2 * n_tasks))
    return min(8, n - n % n_parallel if n >= n_parallel else n)


def _resume(sessions: list[_Session], sched: TaskScheduler, path: str) -> None:
    by_key: dict = {}
    for rec in load_records(path):
        by_key.setdefault(rec.task, []).append(rec)
    for k, s in enumerate(sessions):
        costs = s.resume(by_key.get(s.mt.task.key, []))
        if costs:
            sched.observe(k, costs, round_=False)
        if not s.tuner.has_next():
            sched.kill(k)


class _Run:
    """The loop of one tune call: pick a task, measure a round, report, until the budget."""

    def __init__(self, sessions, sched, trials, seconds, round_trials, path, stream, name,
                 keep_open: int = 2, seed: int = 0):
        self.sessions, self.sched = sessions, sched
        self.trials, self.seconds, self.round_trials = trials, seconds, round_trials
        self.path, self.stream, self.name = path, stream, name
        self.callbacks = [LogToFile(path)] if path else []
        self.guard = StopOnSigint()
        self.t0 = time.monotonic()
        self.rounds = 0
        self.stopped = ""
        self.picks: list[Pick] = []
        self.open: list[_Session] = []      # sessions with live workers, most recent last
        self.keep_open = keep_open
        self.errors: dict[int, str] = {}
        self.seed = seed

    def used(self) -> int:
        return sum(s.tuner.trials for s in self.sessions)

    def loop(self) -> None:
        with self.guard:
            while True:
                why = self._why_stop()
                if why:
                    self.stopped = why
                    break
                pick = self.sched.pick()
                if pick is None:
                    self.stopped = "every task's space is exhausted"
                    break
                self._round(pick)
            if self.stopped != "interrupted":
                self._remeasure()

    def _activate(self, s: _Session) -> None:
        """``s`` is tuned next: its workers stay up, the least recent others' are stopped."""
        if s in self.open:
            self.open.remove(s)
        while len(self.open) >= self.keep_open:
            self.open.pop(0).close()
        self.open.append(s)

    def _remeasure(self) -> None:
        """The final re-measure of each task that got new trials in this call, the largest
        contributors to the model latency first; with a time budget, only while it lasts."""
        todo = [k for k, s in enumerate(self.sessions)
                if s.tuner.trials > s.resumed and s.tuner.best is not None and
                s.round_option is not s.option]
        todo.sort(key=lambda k: -self.sched.tasks[k].weight * self.sched.tasks[k].best)
        for k in todo:
            s = self.sessions[k]
            if self.seconds is not None and time.monotonic() - self.t0 >= self.seconds:
                log.info("tune: the time budget is spent; %d tasks keep their best without a "
                         "re-measure", len(todo) - todo.index(k))
                return
            self._activate(s)
            s.remeasure(self.callbacks)
            if s.interrupted:
                self.stopped = "interrupted"
                return

    def _why_stop(self) -> str:
        if self.guard.stopped or any(s.interrupted for s in self.open):
            return "interrupted"
        if self.trials is not None and self.used() >= self.trials:
            return f"trial budget of {self.trials} reached"
        if self.seconds is not None and self.rounds and \
                time.monotonic() - self.t0 >= self.seconds * ROUNDS_SHARE:
            return f"time budget of {self.seconds:g} s reached"
        return ""

    def _round(self, pick: Pick) -> None:
        k = pick.task
        s = self.sessions[k]
        n = self.round_trials
        if self.trials is not None:
            n = min(n, self.trials - self.used())
        self._activate(s)
        before = self.sched.tasks[k].best
        try:
            results = [] if s.seeded else s.seed(n, self.callbacks, self.seed)
            if not results:
                results = s.run(n, self.callbacks)
        except LooptuneError as e:       # its workers could not start (e.g. reference build)
            log.warning("tune: task %s (%s) cannot be measured, skipping it: %s",
                        s.mt.label, s.mt.task.name, e)
            self.errors[k] = str(e)
            self.sched.kill(k)
            s.close()
            self.open.remove(s)
            return
        self.sched.observe(k, [r.cost for r in results])
        if not s.tuner.has_next():
            self.sched.kill(k)
        self.rounds += 1
        self.picks.append(pick)
        self._report(pick, s, results, before)

    def _report(self, pick: Pick, s: _Session, results, before: float) -> None:
        t = self.sched.tasks[pick.task]
        fails = sum(1 for r in results if not r.ok)
        was = f" (was {_ms(before)})" if math.isfinite(before) and before != t.best else ""
        budget = f"/{self.trials}" if self.trials is not None else ""
        line = (f"[{self.name}] round {self.rounds} {pick.reason:<8} task "
                f"{pick.task + 1}/{len(self.sessions)} {s.mt.label} (x{s.mt.weight}): "
                f"+{len(results)} -> {t.trials} trials"
                + (f", {fails} failed" if fails else "")
                + f", best {_ms(t.best)} ms{was} | model est. "
                f"{_ms(self.sched.estimated_latency())} ms | {self.used()}{budget} trials, "
                f"{time.monotonic() - self.t0:.0f} s")
        log.info("%s", line)
        if self.stream is not None:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        for s in self.open:
            s.close()
        self.open.clear()
        for cb in self.callbacks:
            cb.finish(None)
        if self.errors and len(self.errors) == len(self.sessions):
            raise LooptuneError("tune: no task could be measured: " + "; ".join(
                f"{self.sessions[k].mt.label}: {e}" for k, e in self.errors.items()))

    def summary(self) -> TuneSummary:
        rows = []
        for s, t in zip(self.sessions, self.sched.tasks):
            best = s.final.cost if s.final is not None and s.final.ok else t.best
            rows.append(TaskSummary(s.mt.label, s.mt.task.name, s.mt.weight, s.tuner.trials,
                                    s.tuner.trials - s.resumed, best))
        return TuneSummary(rows, self.path, time.monotonic() - self.t0, self.rounds,
                           self.stopped, self.picks)


def tune(graph, trials: int | None = None, seconds: float | None = None,
         log_file: str | os.PathLike | None = None, target="c", tuner: str = "gbt", *,
         measure_option: MeasureOption | None = None, round_trials: int | None = None,
         exploration: float = 0.1, seed: int = 0, resume: bool = True,
         progress: bool | TextIO = False) -> TuneSummary:
    """Tune every task of ``graph`` (a Graph, or a compiled model) in one run.

    Budget: ``trials`` measurements over all tasks (the log's earlier records of these tasks
    count) and/or ``seconds`` of wall time for this call (the round in flight finishes; at
    least one round runs).
    Every measurement goes to ``log_file`` (JSON Lines, one file for all tasks); with
    ``resume`` (default) the records it holds are loaded, count and are never measured again,
    so the same call continues a run that was killed. ``lt.graph.compile(graph,
    log=log_file)`` then builds each kernel with its task's best record. ``round_trials``:
    trials per round (default: up to 8); ``exploration``: share of rounds given to the least
    tuned task; ``progress``: a line per round on stderr (or on the given stream).
    Then the best configs of each task tuned in this call are measured again (see the
    module docstring). Returns a :class:`TuneSummary`; Ctrl-C stops after the candidates in
    flight.
    """
    _check_budget(trials, seconds)
    tasks = extract_tasks(graph, target)
    name = getattr(graph, "name", None) or getattr(getattr(graph, "graph", None), "name",
                                                   "model")
    return tune_tasks(tasks, trials, seconds, log_file, tuner=tuner,
                      measure_option=measure_option, round_trials=round_trials,
                      exploration=exploration, seed=seed, resume=resume, progress=progress,
                      name=name)
