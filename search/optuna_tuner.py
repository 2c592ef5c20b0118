"""A tuner driven by an Optuna sampler, with Optuna storages for tuning across processes.

Each knob is one Optuna parameter named after it, whose value is a knob index:

- ``IntDistribution(0, n - 1)`` over the choices in increasing order for the knobs that have
  one (two-way splits, by inner factor; ``define_knob`` knobs whose values are all numbers,
  by value) — and for every knob under ``"cmaes"`` and ``"qmc"``, which handle only numbers
  (there the order is the knob's own, e.g. a reorder knob's permutation index);
- ``CategoricalDistribution`` over the indices otherwise (reorders, annotations, multi-way
  splits, other values).

``sampler``: ``"tpe"`` (default; with ``constant_liar`` so that configs in flight repel),
``"nsga2"``, ``"cmaes"`` (needs the ``cmaes`` package), ``"random"``, ``"qmc"``, or any
``optuna.samplers.BaseSampler`` instance (used as given; ``seed`` then only seeds this
tuner's own fallback draws).

Batches use ``study.ask()`` / ``study.tell()``. The objective is the candidate's fitness
(GFLOP/s, or 1/seconds when the FLOPs are unknown), maximised. A candidate that fails becomes
a FAIL trial with user attributes ``error_kind`` and ``error_msg``; every measured trial
carries ``index`` (the config index), ``measured=True``, ``cost``, ``gflops`` and ``worker``.
A sampled config that was already measured (or is being measured) is not measured again: its
trial is told the earlier trial's outcome (COMPLETE with its value, or FAIL) or, when that is
still running, PRUNED, with ``duplicate_of`` set; after ``max_retries`` duplicates in a row an
unmeasured neighbour (one knob changed) or a random unmeasured config is enqueued.

Storages and concurrent workers (``storage``, ``study_name``): several processes or machines
given the same storage and study name tune one task together; each skips configs that any
worker measured or is measuring, and every worker's ``log_to_file`` log gets its own
measurements. The study records the task and the space and refuses a different one; without
``study_name`` a storage's study is named after the task (:func:`default_study_name`), so
workers given only the same storage share it.

- ``None``: in memory, one process only.
- ``"journal:PATH"`` (or a ``JournalStorage`` object): an append-only journal file (Optuna's
  ``JournalFileBackend``). Safe for processes on one host, and for hosts sharing a file system
  that supports the lock (pass ``JournalStorage(JournalFileBackend(path,
  lock_obj=JournalFileOpenLock(path)))`` on NFS).
- ``"postgresql://..."``, ``"mysql://..."`` (RDB storages): safe for many machines; this is
  the storage for a cluster.
- ``"sqlite:///file.db"``: works for one process; Optuna does not recommend SQLite for
  concurrent workers (writes lock the whole file: "database is locked" errors under load).
- ``"redis://..."``: Optuna's ``JournalRedisBackend`` (needs the ``redis`` package).

Reproducibility: with the in-memory storage the same ``seed`` gives the same proposals for
every sampler named here (given the same measurements). With a storage, the sampler's seed
mixes ``seed`` with ``worker_id`` (default: host name and process id) so that workers started
with the same seed do not propose the same configs in lockstep; pass ``worker_id`` to
reproduce one worker's proposals on a fresh study. Proposals of concurrent workers depend on
the order in which their trials reach the storage, which no seed controls.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import warnings
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import LooptuneError
from .knobs import OtherKnob, SplitKnob
from .measure import MeasureResult
from .space import ConfigEntity
from .task import Task
from .tuner import Tuner

log = logging.getLogger("looptune.search.optuna_tuner")

SAMPLERS = ("tpe", "nsga2", "cmaes", "random", "qmc")
_NUMERIC_ONLY = ("cmaes", "qmc")


def _import_optuna():
    try:
        import optuna
    except ImportError as e:
        raise LooptuneError("OptunaTuner needs the optuna package; pip install optuna") from e
    return optuna


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Optuna's per-trial INFO lines and experimental warnings off while the tuner talks to
    Optuna (the library prints nothing on its own; progress is the callbacks' job)."""
    logger = logging.getLogger("optuna")
    old = logger.level
    if logger.getEffectiveLevel() < logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module="optuna")
            warnings.filterwarnings("ignore", message=".*experimental.*")
            yield
    finally:
        logger.setLevel(old)


def make_sampler(name: str, seed: int | None):
    """An Optuna sampler by name (see :data:`SAMPLERS`)."""
    optuna = _import_optuna()
    s = optuna.samplers
    if name == "tpe":
        return s.TPESampler(seed=seed, constant_liar=True)
    if name == "nsga2":
        return s.NSGAIISampler(seed=seed)
    if name == "cmaes":
        import importlib.util
        if importlib.util.find_spec("cmaes") is None:
            raise LooptuneError("OptunaTuner(sampler='cmaes') needs the cmaes package: pip "
                                "install 'looptune[samplers]' (or cmaes), or use "
                                "sampler='tpe'")
        return s.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if name == "random":
        return s.RandomSampler(seed=seed)
    if name == "qmc":
        return s.QMCSampler(seed=seed, scramble=True, warn_asynchronous_seeding=False)
    raise LooptuneError(f"OptunaTuner: unknown sampler {name!r}; use one of "
                        f"{', '.join(SAMPLERS)} or an optuna.samplers.BaseSampler instance")


def make_storage(storage):
    """An Optuna storage from None, a URL (``journal:PATH`` for a journal file) or a storage
    object (returned as is)."""
    if storage is None or not isinstance(storage, (str, os.PathLike)):
        return storage
    url = os.fspath(storage)
    optuna = _import_optuna()
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    if url.startswith("journal:"):
        path = url[len("journal:"):]
        path = path.removeprefix("//")
        if not path:
            raise LooptuneError("OptunaTuner: 'journal:PATH' needs a file path")
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return JournalStorage(JournalFileBackend(path))
    if url.startswith("redis://"):
        from optuna.storages.journal import JournalRedisBackend
        return JournalStorage(JournalRedisBackend(url))
    if "://" not in url:
        raise LooptuneError(f"OptunaTuner: storage {url!r} is not a URL; give e.g. "
                            "'journal:tune.journal', 'sqlite:///tune.db' or "
                            "'postgresql://user@host/db'")
    return _rdb_storage(optuna, url)


def _rdb_storage(optuna, url: str, attempts: int = 5):
    """An RDBStorage; workers started together on an empty database race to create its
    tables, and the losers see a unique-key error: they retry and find the tables there."""
    for k in range(attempts):
        try:
            return optuna.storages.RDBStorage(url)
        except Exception as e:  # sqlalchemy's IntegrityError / ProgrammingError
            if k == attempts - 1 or "already exists" not in str(e):
                raise
            log.info("storage %s: schema created by another worker meanwhile; retrying", url)
            time.sleep(0.2 * (k + 1))


def default_study_name(task: Task) -> str:
    """The study name used with a storage when none is given: from the task key."""
    args = ",".join(str(a) for a in task.args)
    return f"looptune:{task.name}({args}):{task.target}"


class OptunaTuner(Tuner):
    """Optuna samplers over a task's knobs, with ask/tell batches and shared storages."""

    def __init__(self, task: Task, sampler: Any = "tpe", storage: Any = None,
                 study_name: str | None = None, seed: int | None = None,
                 worker_id: str | None = None, max_retries: int = 4):
        shared = storage is not None
        self.worker_id = worker_id or (f"{socket.gethostname()}:{os.getpid()}" if shared
                                       else "local")
        mixed = seed
        if seed is not None and (shared or worker_id is not None):
            mixed = zlib.crc32(f"{seed}:{self.worker_id}".encode())
        super().__init__(task, mixed)
        self.seed = seed
        optuna = _import_optuna()
        self._optuna = optuna
        self.sampler_name = sampler if isinstance(sampler, str) else type(sampler).__name__
        if isinstance(sampler, str):
            with _quiet():
                sampler = make_sampler(sampler, mixed)
        elif not isinstance(sampler, optuna.samplers.BaseSampler):
            raise LooptuneError(f"OptunaTuner: sampler must be a name ({', '.join(SAMPLERS)}) "
                                f"or an optuna.samplers.BaseSampler; got {sampler!r}")
        self.max_retries = max_retries
        self._dists, self._to_index, self._to_param = self._distributions(
            self.sampler_name in _NUMERIC_ONLY)
        if study_name is None and shared:
            study_name = default_study_name(task)
        with _quiet():
            self.study = optuna.create_study(
                storage=make_storage(storage), sampler=sampler, study_name=study_name,
                direction="maximize", load_if_exists=study_name is not None)
            self._check_study()
        self._pending: dict[int, Any] = {}            # index -> optuna Trial in flight
        self._known: dict[int, dict[int, Any]] = {}   # index -> {number: claiming trial}
        self._open: set[int] = set()                  # numbers of trials last seen running
        self._seen_trials = 0

    # ---- the search space --------------------------------------------------------------------

    def _distributions(self, numeric_only: bool):
        D = self._optuna.distributions
        dists, to_index, to_param = {}, {}, {}
        for name, knob in self.space.knobs.items():
            n = len(knob)
            order = _natural_order(knob)
            if order is None and numeric_only:
                order = list(range(n))
            if order is None:
                dists[name] = D.CategoricalDistribution(tuple(range(n)))
                to_index[name] = list(range(n))
            else:
                dists[name] = D.IntDistribution(0, n - 1)
                to_index[name] = order
            to_param[name] = {i: p for p, i in enumerate(to_index[name])}
        return dists, to_index, to_param

    def index_of_params(self, params: dict) -> int:
        """The config index of a trial's params."""
        return self.space.index_of([self._to_index[n][int(params[n])] for n in self._dists])

    def params_of(self, index: int) -> dict[str, int]:
        """The trial params of config ``index``."""
        vec = self.space.vector(index)
        return {n: self._to_param[n][v] for n, v in zip(self._dists, vec)}

    def _check_study(self) -> None:
        want = {"name": self.task.name, "args": _jsonable(self.task.args),
                "target": self.task.target, "dims": self.space.dims}
        have = self.study.user_attrs.get("looptune_task")
        if have is None:
            self.study.set_user_attr("looptune_task", want)
        elif have != want:
            raise LooptuneError(f"OptunaTuner: study '{self.study.study_name}' tunes {have}, "
                                f"not {want}; give this task its own study_name")

    # ---- proposing ---------------------------------------------------------------------------

    def next_batch(self, n: int) -> list[ConfigEntity]:
        with _quiet():
            return self._next_batch(n)

    def _next_batch(self, n: int) -> list[ConfigEntity]:
        self._sync()
        out: list[ConfigEntity] = []
        dups, last = 0, None
        for _ in range(n * (self.max_retries + 2) + 4):
            if len(out) >= n or not self.has_next():
                break
            if dups >= self.max_retries and last is not None:
                self._enqueue_fallback(last)
                dups = 0
            trial = self.study.ask(self._dists)
            last = index = self.index_of_params(trial.params)
            trial.set_user_attr("index", index)
            trial.set_user_attr("worker", self.worker_id)
            measured_here = index in self.visited     # before _sync notes this very trial
            other = self._other_claim(index, trial.number)
            if other is None and not measured_here:
                self.visited.add(index)
                self._pending[index] = trial
                out.append(self.space.get(index))
                dups = 0
            else:
                self._resolve_duplicate(trial, index, other)
                dups += 1
        return out

    def _sync(self) -> None:
        """Take in the trials other workers measured or are measuring (their configs count as
        visited here). Trials seen running are looked at again on every sync: their config
        index may not have been set yet when they were first seen."""
        TS = self._optuna.trial.TrialState
        trials = self.study.get_trials(deepcopy=False)
        for n in sorted(self._open):
            if n < len(trials):
                self._note(trials[n])
                if trials[n].state is not TS.RUNNING:
                    self._open.discard(n)
        for t in trials[self._seen_trials:]:
            self._note(t)
            if t.state is TS.RUNNING:
                self._open.add(t.number)
        self._seen_trials = max(self._seen_trials, len(trials))

    def _note(self, t) -> None:
        TS = self._optuna.trial.TrialState
        idx = t.user_attrs.get("index")
        if idx is None:
            return
        claims = self._known.setdefault(idx, {})
        if "duplicate_of" in t.user_attrs:               # it yielded: not a claim after all
            claims.pop(t.number, None)
            if not claims:
                del self._known[idx]
                if idx not in self._pending:
                    self.visited.discard(idx)
            return
        if t.state in (TS.RUNNING, TS.COMPLETE, TS.FAIL):
            claims[t.number] = t
            self.visited.add(idx)
        elif not claims:
            del self._known[idx]

    def _other_claim(self, index: int, number: int):
        """Another trial claiming config ``index`` (None when trial ``number`` may measure
        it). Every worker sets a trial's index before looking for other claims, and yields to
        any it finds, so two workers never both measure a config: when both look after both
        claimed, both yield and ask again."""
        if index in self._pending:
            return self._pending[index]
        self._sync()
        others = [t for n, t in self._known.get(index, {}).items() if n != number]
        if not others:
            return None
        TS = self._optuna.trial.TrialState
        return min(others, key=lambda t: (t.state is TS.RUNNING, t.number))   # finished first

    def _resolve_duplicate(self, trial, index: int, other) -> None:
        TS = self._optuna.trial.TrialState
        num = getattr(other, "number", None)
        trial.set_user_attr("duplicate_of", num)
        state = getattr(other, "state", TS.RUNNING)
        if isinstance(other, self._optuna.trial.Trial):
            state = TS.RUNNING
        if state is TS.COMPLETE:
            self.study.tell(trial, other.value)
        elif state is TS.FAIL:
            trial.set_user_attr("error_kind", other.user_attrs.get("error_kind", "unknown"))
            self.study.tell(trial, state=TS.FAIL)
        else:
            self.study.tell(trial, state=TS.PRUNED)

    def _enqueue_fallback(self, last: int) -> None:
        """An unmeasured neighbour of ``last`` (one knob changed), else a random config."""
        vec = list(self.space.vector(last))
        dims = self.space.dims
        pick = None
        for k in self.rng.permutation(len(dims)):
            for v in self.rng.permutation(dims[k]):
                cand = list(vec)
                cand[k] = int(v)
                i = self.space.index_of(cand)
                if i not in self.visited:
                    pick = i
                    break
            if pick is not None:
                break
        if pick is None:
            pick = self._random_unvisited()
        if pick is not None:
            self.study.enqueue_trial(self.params_of(pick), skip_if_exists=False)

    # ---- learning ----------------------------------------------------------------------------

    def update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        with _quiet():
            self._update(configs, results)

    def _update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        TS = self._optuna.trial.TrialState
        for c, r in zip(configs, results):
            attrs = _result_attrs(r, self.worker_id)
            trial = self._pending.pop(c.index, None)
            if trial is None:
                self._add_history(c.index, r, attrs)
                continue
            for k, v in attrs.items():
                trial.set_user_attr(k, v)
            if r.ok:
                self.study.tell(trial, self.fitness(r))
            else:
                self.study.tell(trial, state=TS.FAIL)

    def _add_history(self, index: int, r: MeasureResult, attrs: dict) -> None:
        """A measurement made outside this study (a resumed log) becomes a finished trial,
        unless the study already holds one of that config."""
        self._sync()
        if index in self._known:
            return
        TS = self._optuna.trial.TrialState
        attrs = dict(attrs, index=index, source="log")
        frozen = self._optuna.trial.create_trial(
            state=TS.COMPLETE if r.ok else TS.FAIL, value=self.fitness(r) if r.ok else None,
            params=self.params_of(index), distributions=self._dists, user_attrs=attrs)
        self.study.add_trial(frozen)


def _result_attrs(r: MeasureResult, worker: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {"measured": True, "worker": worker,
                             "error_kind": r.error_kind.value}
    if r.ok:
        attrs["cost"] = r.cost
        if r.gflops is not None:
            attrs["gflops"] = r.gflops
    else:
        msg = (r.error_msg or "").strip()
        attrs["error_msg"] = msg.splitlines()[0][:200] if msg else ""
    return attrs


def _natural_order(knob) -> list[int] | None:
    """Knob indices in increasing order of value, for knobs with a 1-D numeric order."""
    if isinstance(knob, SplitKnob) and knob.num_outputs == 2:
        vals = [knob.get(i).size[1] for i in range(len(knob))]
    elif isinstance(knob, OtherKnob) and all(
            isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
            for v in knob.values):
        vals = list(knob.values)
    else:
        return None
    return sorted(range(len(vals)), key=lambda i: (vals[i], i))


def _jsonable(x):
    return [_jsonable(v) for v in x] if isinstance(x, (tuple, list)) else x
