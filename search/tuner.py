"""The tuner base: the tune loop, callbacks, early stopping, resume and Ctrl-C.

Subclasses propose configs by index (``next_batch``) and learn from results (``update``); the
base keeps the set of configs already proposed so that none is measured twice, the best
result, and the trial count. ``tune``:

1. with ``resume``, loads the log's records of this task: their configs count as visited and
   as trials, and the tuner learns from them;
2. asks for batches of ``measure_option.n_parallel`` configs and measures them; each result
   goes to every callback (``log_to_file`` writes it at once);
2b. races (``measure_option.race_rounds``; 0: off): when a batch holds configs whose one
   measurement beats the incumbent's first one, the incumbent and those challengers are timed
   again together in ``race_rounds`` interleaved rounds (``Measurer.remeasure``: in turns, in
   fresh processes), and all of them become *confirmed* (re-measure records, logged, not
   trials). The incumbent is the best confirmed config by the median rule, so one lucky sample
   never makes a config the incumbent: it has to win a race in turns against the config it
   would replace (SMAC's intensification, with interleaved rounds as the "instances"). The
   incumbent's first measurement is the bar a challenger must beat, and it only falls (a
   challenger that wins brings a faster one), so races stay rare as the search goes on;
3. stops at ``n_trial`` trials (resumed ones included), when ``seconds`` of wall-clock time
   have passed (checked between batches), when the space is exhausted, when
   ``early_stopping`` trials pass without improvement, or after the batch in flight when
   Ctrl-C is pressed (a second Ctrl-C aborts at once; ``tuner.interrupted`` tells);
4. unless interrupted, measures the ``measure_option.remeasure_top`` best configs again in
   ``remeasure_rounds`` interleaved rounds, with the tuner's ``anchors`` (config indices
   timed beside them whatever their first measurement); the callbacks get those results
   too (their ``kind`` is ``"remeasure"``; ``log_to_file`` logs them) but they are not
   trials;
5. returns the best correct result by the rule of ``log.rank_configs`` (the median over a
   config's measurements, over its re-measures once it has some, re-measured configs first;
   its ``costs`` are then one cost per measurement that counts), or raises
   :class:`TuningError` summarising the error kinds when every candidate failed.
"""
from __future__ import annotations

import logging
import os
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import LooptuneError
from .log import load_records
from .measure import ErrorKind, MeasureOption, Measurer, MeasureResult, counted
from .programs import ProgramSet
from .space import ConfigEntity, random_unvisited, take
from .task import Task

log = logging.getLogger("looptune.search.tuner")

Callback = Callable[["Tuner", MeasureResult], None]


class TuningError(LooptuneError):
    """Every candidate of a tuning run failed; ``kinds`` counts the error kinds."""

    def __init__(self, message: str, kinds: dict[str, int]):
        super().__init__(message)
        self.kinds = kinds


class StopOnSigint:
    """The first Ctrl-C asks the loop to stop after the batch in flight; the second aborts."""

    def __init__(self):
        self.stopped = False
        self._old = None

    def __enter__(self) -> StopOnSigint:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame) -> None:
        if self.stopped:
            raise KeyboardInterrupt
        self.stopped = True
        log.warning("interrupted: stopping after the candidates in flight (Ctrl-C again to "
                    "abort at once)")

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


class Tuner:
    """Base of the tuners. ``seed`` makes the proposals reproducible."""

    def __init__(self, task: Task, seed: int | None = None):
        self.task = task
        self.space = task.config_space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.visited: set[int] = set()
        self.history: list[MeasureResult] = []
        self.best: MeasureResult | None = None
        self.trials = 0
        self._best_trial = 0
        self.remeasured: list[MeasureResult] = []     # re-measure runs (not trials)
        # configs timed again beside the best ones at the end of a tune, however their one
        # search measurement went (auto_schedule: the fallback, measured first and cold)
        self.anchors: set[int] = set()
        self.races = 0              # races run so far (step 2b of the module docstring)
        self.busy_runs = 0          # runs of the last tune timed on a busy machine (measure.py)
        self.interrupted = False
        self.programs = ProgramSet(task)              # one measurement per distinct program

    # ---- what subclasses implement -------------------------------------------------------

    def next_batch(self, n: int) -> list[ConfigEntity]:
        """Up to ``n`` configs never proposed before (fewer when the space runs out)."""
        raise NotImplementedError

    def update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        """Learn from measured ``results`` (of ``configs``)."""

    def has_next(self) -> bool:
        """Whether unproposed configs remain."""
        return len(self.visited) < self.space.size

    # ---- helpers for subclasses ------------------------------------------------------------

    def _take(self, index: int) -> bool:
        """Mark ``index`` proposed; False if it already was."""
        return take(self.visited, index)

    def _random_unvisited(self, tries: int = 64) -> int | None:
        """A random unvisited index (a scan of what is left on small spaces), or None."""
        return random_unvisited(self.space, self.visited, self.rng, tries)

    @staticmethod
    def fitness(res: MeasureResult) -> float:
        """Higher is better: GFLOP/s (or 1/seconds); 0 for a failed candidate."""
        if not res.ok:
            return 0.0
        return res.gflops if res.gflops is not None else 1.0 / res.cost

    # ---- the loop --------------------------------------------------------------------------

    def make_measurer(self, option: MeasureOption) -> Measurer:
        """The measurer used by ``tune`` (a context manager with ``measure(configs)``)."""
        return Measurer(self.task, option)

    def load_history(self, results: Sequence[MeasureResult]) -> None:
        """Take earlier measurements into account: visited, counted, learnt from."""
        results = [r for r in results if r.config.index not in self.visited]
        for r in results:
            self.visited.add(r.config.index)
            self._record(r)
        if results:
            self.update([r.config for r in results], results)

    def _record(self, res: MeasureResult) -> None:
        self.trials += 1
        self.history.append(res)
        if res.ok and (self.best is None or res.cost < self.best.cost):
            self.best = res
            self._best_trial = self.trials
        elif res.ok and res.cost == self.best.cost and res.config.index < self.best.config.index:
            self.best = res          # a tie goes to the lower index, as in rank_configs; it is
                                     # no improvement (early stopping counts on)

    def tune(self, n_trial: int | None = None, measure_option: MeasureOption | None = None,
             callbacks: Sequence[Callback] = (), early_stopping: int | None = None,
             resume: bool | str | os.PathLike = False,
             seconds: float | None = None) -> MeasureResult | None:
        """Tune for ``n_trial`` trials (resumed trials included) and/or ``seconds`` of
        wall-clock time (whichever ends first; one of them is needed); returns the best
        result by the median rule after the final re-measure.

        ``resume=True`` reads the logs of the ``log_to_file`` callbacks (or give a path) and
        skips the configs they hold. Raises TuningError when every candidate failed.
        """
        _check_budget(n_trial, seconds)
        opt = measure_option or MeasureOption()
        callbacks = list(callbacks)
        if resume:
            self._resume(resume, callbacks)
        first = len(self.history)
        guard = StopOnSigint()
        deadline = None if seconds is None else time.monotonic() + seconds
        with guard, self.make_measurer(opt) as measurer:
            if self.best is not None and hasattr(measurer, "best_cost"):
                measurer.best_cost = self.best.cost
            for cb in callbacks:
                getattr(cb, "start", lambda t, n: None)(self, n_trial)
            try:
                self._loop(measurer, n_trial, opt, callbacks, early_stopping, guard, deadline)
                if not guard.stopped:
                    self._remeasure(measurer, opt, callbacks, guard)
                self._settle_best()
            finally:
                for cb in callbacks:
                    getattr(cb, "finish", lambda t: None)(self)
        self.interrupted = guard.stopped
        self.busy_runs = getattr(measurer, "busy_runs", 0)
        if self.busy_runs:
            log.warning("%d of the %d runs timed while tuning %s ran while other processes "
                        "kept up to %.1f cores busy: the best config may use fewer threads "
                        "than it would on a quiet machine; tune again on a quiet one",
                        self.busy_runs, measurer.runs, self.task.key, measurer.busy_peak)
        if guard.stopped:
            log.warning("tuning of %s interrupted after %d trials; best so far: %s",
                        self.task.key, self.trials, self.best)
        return self._outcome(self.history[first:])

    def _loop(self, measurer, n_trial: int | None, opt: MeasureOption, callbacks: list,
              early_stopping: int | None, guard: StopOnSigint, deadline: float | None) -> None:
        t0 = time.monotonic()
        while (n_trial is None or self.trials < n_trial) and not guard.stopped:
            if deadline is not None and time.monotonic() >= deadline:
                log.info("the time budget of %s is spent", self.task.key)
                break
            if early_stopping is not None and self.trials - self._best_trial >= early_stopping:
                log.info("early stopping: %d trials without improvement", early_stopping)
                break
            if not self.has_next():
                log.info("the config space of %s is exhausted", self.task.key)
                break
            if n_trial is None:
                self._hint_trials(t0, deadline)
            left = opt.n_parallel if n_trial is None else n_trial - self.trials
            batch = self.next_batch(min(opt.n_parallel, left))
            if not batch:
                break
            results, new = [], []
            for res, fresh in self.programs.measure(measurer, batch, self):
                if fresh:               # else a program measured before: not a new trial
                    self._record(res)
                    new.append(res)
                    for cb in callbacks:
                        cb(self, res)
                results.append(res)
            self.update(batch, results)
            self._race(measurer, opt, callbacks, guard, new)
            if self.programs.spent:
                log.info("%s: the last %d proposals were all programs measured before",
                         self.task.key, self.programs.stale)
                break

    def _hint_trials(self, t0: float, deadline: float) -> None:
        """With only a time budget, tuners whose schedule follows the expected number of
        trials (SA's temperature: ``n_trial_hint``) get an estimate from the pace so far."""
        if not hasattr(self, "n_trial_hint"):
            return
        now, done = time.monotonic(), len(self.history)
        pace = done / (now - t0) if done and now > t0 else 0.0
        self.n_trial_hint = max(self.trials + 1, int(self.trials + pace * (deadline - now))) \
            if pace else max(200, self.trials + 1)

    # ---- races, the final re-measure and the rule for the best -----------------------------

    def _race(self, measurer, opt: MeasureOption, callbacks: list, guard,
              new: list[MeasureResult]) -> None:
        """Race the configs of ``new`` (this batch's fresh results) that beat the incumbent's
        bar against the incumbent, in interleaved rounds (step 2b of the module docstring)."""
        if not opt.race_rounds or guard.stopped or not hasattr(measurer, "remeasure"):
            return
        fresh = {r.config.index for r in new}
        incumbent = next((g for g in self._ranked_configs(confirmed_first=True)
                          if g[0].config.index not in fresh), None)
        if incumbent is None:           # nothing to race against yet (the first batch)
            return
        firsts = [r.cost for r in incumbent if r.kind == "measure"]
        bar = min(firsts) if firsts else statistics.median(r.cost for r in incumbent)
        challengers = sorted((r for r in new if r.ok and r.cost < bar), key=lambda r: r.cost)
        if not challengers:
            return
        self.races += 1
        log.info("race %d of %s: config %d (incumbent) against %s", self.races, self.task.key,
                 incumbent[0].config.index, ", ".join(str(r.config.index) for r in challengers))
        steps = {r.config.index: r.steps for r in [*incumbent, *challengers] if r.steps}
        self._timed_again(measurer, [incumbent[0].config] + [r.config for r in challengers],
                          opt.race_rounds, steps, callbacks, guard)

    def _timed_again(self, measurer, configs: list[ConfigEntity], rounds: int,
                     steps: dict, callbacks: list, guard) -> None:
        """Re-measure ``configs`` in ``rounds`` interleaved rounds; the results are kept
        (``remeasured``) and go to the callbacks."""
        for res in measurer.remeasure(configs, rounds, stop=lambda: guard.stopped):
            res.steps = res.steps or steps.get(res.config.index)
            self.remeasured.append(res)
            for cb in callbacks:
                cb(self, res)

    def incumbent(self) -> MeasureResult | None:
        """What the tune would return if it stopped now: the best re-measured config (its
        re-measures combined, ``log.rank_configs``'s rule) once a race or a re-measure
        confirmed one, else the best single timing (``best``). The progress bar shows it."""
        if not self.remeasured:
            return self.best
        key = (len(self.history), len(self.remeasured))
        if getattr(self, "_incumbent_key", None) != key:
            ranked = self._ranked_configs(confirmed_first=True)
            confirmed = ranked and any(r.kind == "remeasure" for r in ranked[0])
            self._incumbent = _combined(ranked[0]) if confirmed else self.best
            self._incumbent_key = key
        return self._incumbent

    def _settle_best(self) -> None:
        """``best`` becomes the best confirmed config (its results combined) when there is one:
        what ``tune`` returns, by the rule of ``log.rank_configs`` (``incumbent``)."""
        self.best = self.incumbent()

    def _remeasure(self, measurer, opt: MeasureOption, callbacks: list, guard) -> None:
        """Measure the best configs again in interleaved rounds (see the module docstring)."""
        if not opt.remeasure_top or not hasattr(measurer, "remeasure"):
            return
        ranked = self._ranked_configs(confirmed_first=False)
        top = ranked[:opt.remeasure_top]
        if not top:
            return
        champion = self._ranked_configs(confirmed_first=True)[0]
        if any(r.kind == "remeasure" for r in champion) and champion not in top:
            top[-1] = champion       # contenders are timed beside the best confirmed so far
        timed = {g[0].config.index for g in top}
        top += [g for g in ranked if g[0].config.index in self.anchors - timed]
        log.info("re-measuring the %d best configs of %s in %d interleaved rounds", len(top),
                 self.task.key, opt.remeasure_rounds)
        steps = {g[0].config.index: next((r.steps for r in g if r.steps), None) for g in top}
        self._timed_again(measurer, [g[0].config for g in top], opt.remeasure_rounds, steps,
                          callbacks, guard)

    def _ranked_configs(self, confirmed_first: bool) -> list[list[MeasureResult]]:
        """Each config's correct results (search and re-measures), best first by the rule of
        ``log.rank_configs``: never a config that was once wrong; the median of its costs
        (of its re-measures once it has some, ``measure.counted``); with
        ``confirmed_first``, re-measured configs first."""
        by: dict[int, list[MeasureResult]] = {}
        wrong: set[int] = set()
        for r in [*self.history, *self.remeasured]:
            if r.error_kind is ErrorKind.WRONG_RESULT:
                wrong.add(r.config.index)
            elif r.ok:
                by.setdefault(r.config.index, []).append(r)
        groups = [g for i, g in by.items() if i not in wrong]
        groups.sort(key=lambda g: (confirmed_first and all(r.kind == "measure" for r in g),
                                   statistics.median(r.cost for r in counted(g)),
                                   g[0].config.index))
        return groups

    def _outcome(self, new: list[MeasureResult]) -> MeasureResult | None:
        if self.best is not None or not new:
            return self.best
        kinds = Counter(r.error_kind.value for r in new)
        first: dict[str, str] = {}
        for r in new:
            msg = (r.error_msg or "").strip()
            first.setdefault(r.error_kind.value, msg.splitlines()[0][:200] if msg else "")
        detail = "; ".join(f"{n} {k} (e.g. {first[k]!r})" for k, n in kinds.most_common())
        raise TuningError(f"every one of the {len(new)} candidates of {self.task.key} failed: "
                          f"{detail}", dict(kinds))

    def _resume(self, resume, callbacks: list) -> None:
        from .callbacks import LogToFile
        if resume is True:
            paths = [cb.path for cb in callbacks if isinstance(cb, LogToFile)]
            if not paths:
                raise LooptuneError("tune(resume=True) reads the log of a log_to_file(...) "
                                    "callback; add one or pass resume='path/to/log.jsonl'")
        else:
            paths = [os.fspath(resume)]
        records = [r for p in paths if os.path.exists(p) for r in load_records(p, self.task)]
        results, seen = [], set()
        for rec in records:
            if rec.kind == "measure" and rec.index in seen:
                continue
            try:
                res = rec.to_result(self.space)
            except (LooptuneError, IndexError) as e:
                log.warning("resume: skipping a record of %s: %s", self.task.key, e)
                continue
            if rec.kind == "remeasure":
                self.remeasured.append(res)
            else:
                results.append(res)
                seen.add(rec.index)
        self.load_history(results)
        log.info("resumed %s: %d configs already measured", self.task.key, len(results))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.task!r}, seed={self.seed})"


def _check_budget(n_trial, seconds) -> None:
    if n_trial is None and seconds is None:
        raise LooptuneError("tune: give n_trial (a number of trials), seconds (a wall-clock "
                            "budget), or both")
    if n_trial is not None and (isinstance(n_trial, bool) or not isinstance(n_trial, int)
                                or n_trial < 0):
        raise LooptuneError(f"tune: n_trial must be an int >= 0; got {n_trial!r}")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or not 0 < seconds < float("inf")):
        raise LooptuneError(f"tune: seconds must be a positive number; got {seconds!r}")


def _combined(results: list[MeasureResult]) -> MeasureResult:
    """One config's results as one: one cost per measurement that counts (so ``.cost`` is
    their median: ``measure.counted``), kind ``"remeasure"`` when any is a re-measure."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    kind = "measure" if all(r.kind == "measure" for r in results) else "remeasure"
    return MeasureResult(first.config, [r.cost for r in counted(results)], ErrorKind.NONE, "",
                         first.build_time, sum(r.run_time for r in results),
                         max(r.timestamp for r in results), first.steps, first.flop, kind)
