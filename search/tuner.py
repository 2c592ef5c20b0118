"""The tuner base: the tune loop, callbacks, early stopping, resume and Ctrl-C.

Subclasses propose configs by index (``next_batch``) and learn from results (``update``); the
base keeps the set of configs already proposed so that none is measured twice, the best
result, and the trial count. ``tune``:

1. with ``resume``, loads the log's records of this task: their configs count as visited and
   as trials, and the tuner learns from them;
2. asks for batches of ``measure_option.n_parallel`` configs and measures them; each result
   goes to every callback (``log_to_file`` writes it at once);
3. stops at ``n_trial`` trials (resumed ones included), when the space is exhausted, when
   ``early_stopping`` trials pass without improvement, or after the batch in flight when
   Ctrl-C is pressed (a second Ctrl-C aborts at once);
4. returns the best correct result, or raises :class:`TuningError` summarising the error kinds
   when every candidate failed.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import LooptuneError
from .log import load_records
from .measure import MeasureOption, Measurer, MeasureResult
from .space import ConfigEntity
from .task import Task

log = logging.getLogger("looptune.search.tuner")

Callback = Callable[["Tuner", MeasureResult], None]


class TuningError(LooptuneError):
    """Every candidate of a tuning run failed; ``kinds`` counts the error kinds."""

    def __init__(self, message: str, kinds: dict[str, int]):
        super().__init__(message)
        self.kinds = kinds


class _StopOnSigint:
    """The first Ctrl-C asks the loop to stop after the batch in flight; the second aborts."""

    def __init__(self):
        self.stopped = False
        self._old = None

    def __enter__(self) -> _StopOnSigint:
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
        if index in self.visited:
            return False
        self.visited.add(index)
        return True

    def _random_unvisited(self, tries: int = 64) -> int | None:
        """A random unvisited index (exhaustive scan on small spaces), or None."""
        for _ in range(tries):
            i = self.space.random_index(self.rng)
            if i not in self.visited:
                return i
        if self.space.size - len(self.visited) <= 0:
            return None
        if self.space.size <= 1 << 22:
            free = np.setdiff1d(np.arange(self.space.size), np.fromiter(self.visited, int))
            return int(self.rng.choice(free)) if free.size else None
        return None

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

    def tune(self, n_trial: int, measure_option: MeasureOption | None = None,
             callbacks: Sequence[Callback] = (), early_stopping: int | None = None,
             resume: bool | str | os.PathLike = False) -> MeasureResult | None:
        """Tune for ``n_trial`` trials (resumed trials included); returns the best result.

        ``resume=True`` reads the logs of the ``log_to_file`` callbacks (or give a path) and
        skips the configs they hold. Raises TuningError when every candidate failed.
        """
        opt = measure_option or MeasureOption()
        callbacks = list(callbacks)
        if resume:
            self._resume(resume, callbacks)
        first = len(self.history)
        guard = _StopOnSigint()
        with guard, self.make_measurer(opt) as measurer:
            if self.best is not None and hasattr(measurer, "best_cost"):
                measurer.best_cost = self.best.cost
            for cb in callbacks:
                getattr(cb, "start", lambda t, n: None)(self, n_trial)
            try:
                self._loop(measurer, n_trial, opt, callbacks, early_stopping, guard)
            finally:
                for cb in callbacks:
                    getattr(cb, "finish", lambda t: None)(self)
        if guard.stopped:
            log.warning("tuning of %s interrupted after %d trials; best so far: %s",
                        self.task.key, self.trials, self.best)
        return self._outcome(self.history[first:])

    def _loop(self, measurer, n_trial: int, opt: MeasureOption, callbacks: list,
              early_stopping: int | None, guard: _StopOnSigint) -> None:
        while self.trials < n_trial and not guard.stopped:
            if early_stopping is not None and self.trials - self._best_trial >= early_stopping:
                log.info("early stopping: %d trials without improvement", early_stopping)
                break
            if not self.has_next():
                log.info("the config space of %s is exhausted", self.task.key)
                break
            batch = self.next_batch(min(opt.n_parallel, n_trial - self.trials))
            if not batch:
                break
            results = []
            for res in measurer.measure(batch):
                self._record(res)
                results.append(res)
                for cb in callbacks:
                    cb(self, res)
            self.update(batch, results)

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
            if rec.index in seen:
                continue
            try:
                results.append(rec.to_result(self.space))
                seen.add(rec.index)
            except (LooptuneError, IndexError) as e:
                log.warning("resume: skipping a record of %s: %s", self.task.key, e)
        self.load_history(results)
        log.info("resumed %s: %d configs already measured", self.task.key, len(results))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.task!r}, seed={self.seed})"
