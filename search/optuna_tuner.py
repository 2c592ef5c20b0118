"""A tuner driven by an Optuna sampler, with Optuna storages for tuning across processes.

Each knob is one Optuna parameter named after it whose value is the knob's *value* (a split's
inner factor, a ``define_knob`` value, a reorder's permutation as text), so that
optuna-dashboard, ``study.trials_dataframe()`` and ``optuna.visualization`` read like the
template (:mod:`~looptune.search.optuna_params` lists the encodings and distributions).

``sampler``: ``"tpe"`` (default; with ``constant_liar`` so that configs in flight repel),
``"nsga2"``, ``"cmaes"`` (needs the ``cmaes`` package), ``"random"``, ``"qmc"``, or any
``optuna.samplers.BaseSampler`` instance (used as given; ``seed`` then only seeds this
tuner's own fallback draws).

Batches use ``study.ask()`` / ``study.tell()``; each result is told as soon as it is measured
(before the callbacks log it). The objective is the candidate's fitness (GFLOP/s, or
1/seconds when the FLOPs are unknown), maximised. A candidate that fails becomes a FAIL trial
with user attributes ``error_kind`` and ``error_msg``; every measured trial carries ``index``
(the config index), ``measured=True``, ``cost``, ``gflops`` and ``worker``. A sampled config
that was already measured (or is being measured) is not measured again: its trial is told the
earlier trial's outcome (COMPLETE with its value, or FAIL) or, when that is still running,
PRUNED, with ``duplicate_of`` set; after ``max_retries`` duplicates in a row an unmeasured
neighbour (one knob changed) or a random unmeasured config is enqueued.

Storages and concurrent workers (``storage``, ``study_name``): several processes or machines
given the same storage and study name tune one task together; each skips configs that any
worker measured or is measuring, and every worker's ``log_to_file`` log gets its own
measurements. The study records the task, the space and the param encoding, and refuses a
different one; without ``study_name`` a storage's study is named after the task
(:func:`default_study_name`), so workers given only the same storage share it. Workers on one
host time one candidate at a time (:mod:`~looptune.search.hostlock`); they compile in parallel.

- ``None``: in memory, one process only.
- ``"journal:PATH"`` (or a ``JournalStorage`` object): an append-only journal file (Optuna's
  ``JournalFileBackend``). Safe for processes on one host, and for hosts sharing a file system
  that supports the lock (pass ``JournalStorage(JournalFileBackend(path,
  lock_obj=JournalFileOpenLock(path)))`` on NFS). No heartbeats: the configs a killed worker
  was measuring stay claimed.
- ``"postgresql+psycopg://user@host/db"``, ``"mysql+pymysql://..."`` (database storages,
  :mod:`~looptune.search.optuna_storage`): safe for many machines; this is the storage for a
  cluster. Workers record heartbeats (``heartbeat`` seconds); the trials of a worker that died
  are failed by the others after ``3 * heartbeat`` seconds, and their configs measured again.
- ``"sqlite:///file.db"``: works for one process; Optuna does not recommend SQLite for
  concurrent workers (writes lock the whole file: "database is locked" errors under load).
- ``"redis://..."``: Optuna's ``JournalRedisBackend`` (needs the ``redis`` package).

A driver that is not installed, or a server that cannot be reached, raises
:class:`~looptune.search.optuna_storage.StorageError` naming the package or the server.

Reproducibility: with the in-memory storage the same ``seed`` gives the same proposals for
every sampler named here (given the same measurements). With a storage, the sampler's seed
mixes ``seed`` with ``worker_id`` (default: host name and process id) so that workers started
with the same seed do not propose the same configs in lockstep; pass ``worker_id`` to
reproduce one worker's proposals on a fresh study. Proposals of concurrent workers depend on
the order in which their trials reach the storage, which no seed controls.
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import os
import socket
import warnings
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import LooptuneError
from .measure import MeasureResult
from .optuna_params import KnobParam, knob_params
from .optuna_storage import (GRACE_FACTOR, Heartbeat, StorageError, make_storage,
                             storage_errors)
from .space import ConfigEntity
from .task import Task
from .tuner import Tuner

__all__ = ["SAMPLERS", "OptunaTuner", "StorageError", "default_study_name", "make_sampler",
           "make_storage"]

log = logging.getLogger("looptune.search.optuna_tuner")

SAMPLERS = ("tpe", "nsga2", "cmaes", "random", "qmc")
_NUMERIC_ONLY = ("cmaes", "qmc")
PARAM_ENCODING = "values/1"       # what a study's params hold (see optuna_params)


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
            # ask/tell with heartbeats is what this tuner does on purpose
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
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


def default_study_name(task: Task) -> str:
    """The study name used with a storage when none is given: from the task key."""
    args = ",".join(str(a) for a in task.args)
    return f"looptune:{task.name}({args}):{task.target}"


class OptunaTuner(Tuner):
    """Optuna samplers over a task's knobs, with ask/tell batches and shared storages.

    ``heartbeat``: seconds between a worker's heartbeats on a database storage (default
    ``$LOOPTUNE_OPTUNA_HEARTBEAT`` or 10; 0: none); see :mod:`.optuna_storage`."""

    def __init__(self, task: Task, sampler: Any = "tpe", storage: Any = None,
                 study_name: str | None = None, seed: int | None = None,
                 worker_id: str | None = None, max_retries: int = 4,
                 heartbeat: int | None = None):
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
        self.params: dict[str, KnobParam] = knob_params(
            optuna, self.space.knobs, self.sampler_name in _NUMERIC_ONLY)
        self._dists = {p.name: p.dist for p in self.params.values()}
        if study_name is None and shared:
            study_name = default_study_name(task)
        with _quiet():
            self.study = optuna.create_study(
                storage=make_storage(storage, heartbeat), sampler=sampler,
                study_name=study_name, direction="maximize",
                load_if_exists=study_name is not None)
            with storage_errors(self.study):
                self._check_study()
        self._pending: dict[int, Any] = {}            # index -> optuna Trial in flight
        self._told: set[int] = set()                  # indices told as soon as measured
        self._known: dict[int, dict[int, Any]] = {}   # index -> {number: claiming trial}
        self._open: set[int] = set()                  # numbers of trials last seen running
        self._seen_trials = 0
        self._heartbeat = self._start_heartbeat()

    def _start_heartbeat(self) -> Heartbeat | None:
        from optuna.storages._heartbeat import is_heartbeat_enabled
        storage = self.study._storage
        if not is_heartbeat_enabled(storage):
            return None
        return Heartbeat(storage, storage.get_heartbeat_interval(), self,
                         lambda me: [t._trial_id for t in list(me._pending.values())])

    # ---- the search space --------------------------------------------------------------------

    def index_of_params(self, params: dict) -> int:
        """The config index of a trial's params (knob values; see :mod:`.optuna_params`)."""
        return self.space.index_of([p.index(params[p.name]) for p in self.params.values()])

    def params_of(self, index: int) -> dict[str, Any]:
        """The trial params of config ``index``: each knob's value."""
        vec = self.space.vector(index)
        return {p.name: p.values[v] for p, v in zip(self.params.values(), vec)}

    def _check_study(self) -> None:
        want = {"name": self.task.name, "args": _jsonable(self.task.args),
                "target": self.task.target, "dims": self.space.dims,
                "params": PARAM_ENCODING}
        have = self.study.user_attrs.get("looptune_task")
        if have is None:
            self.study.set_user_attr("looptune_task", want)
        elif have.get("params") != PARAM_ENCODING and \
                {k: v for k, v in have.items() if k != "params"} == \
                {k: v for k, v in want.items() if k != "params"}:
            raise LooptuneError(f"OptunaTuner: study '{self.study.study_name}' was made by an "
                                "older looptune whose trial params are knob indices, not "
                                "values; give a new study_name (its log still resumes: "
                                "--resume adds the logged results to the new study)")
        elif have != want:
            raise LooptuneError(f"OptunaTuner: study '{self.study.study_name}' tunes {have}, "
                                f"not {want}; give this task its own study_name")

    # ---- proposing ---------------------------------------------------------------------------

    def next_batch(self, n: int) -> list[ConfigEntity]:
        with _quiet(), storage_errors(self.study):
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
            if self._heartbeat is not None:       # a trial without any heartbeat never goes
                self._heartbeat.record(trial._trial_id)       # stale: beat it at once
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

    def _fail_abandoned(self) -> None:
        """Fail the running trials a worker abandoned between ``ask()`` and its first
        heartbeat (killed in that instant): optuna never finds them stale, having no heartbeat
        to judge by. A live worker sets a trial's ``index`` within milliseconds of asking, so a
        running trial without one, started longer than the grace period ago, was abandoned."""
        TS = self._optuna.trial.TrialState
        grace = datetime.timedelta(seconds=GRACE_FACTOR * self._heartbeat.interval)
        now = datetime.datetime.now()          # optuna stores naive local start times
        for t in self.study.get_trials(deepcopy=False, states=(TS.RUNNING,)):
            if "index" not in t.user_attrs and t.datetime_start is not None \
                    and now - t.datetime_start > grace:
                self.study.tell(t.number, state=TS.FAIL, skip_if_finished=True)

    def _sync(self) -> None:
        """Take in the trials other workers measured or are measuring (their configs count as
        visited here). Trials seen running are looked at again on every sync: their config
        index may not have been set yet when they were first seen. With heartbeats, running
        trials of dead workers are failed first (their configs become free again)."""
        if self._heartbeat is not None:
            self._optuna.storages.fail_stale_trials(self.study)
            self._fail_abandoned()
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
        # a trial that yielded to another, or that failed unmeasured (its worker died and a
        # heartbeat check failed it): not a claim after all
        abandoned = t.state is TS.FAIL and not t.user_attrs.get("measured")
        if "duplicate_of" in t.user_attrs or abandoned:
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

    def _record(self, res: MeasureResult) -> None:
        """Each measured result is told at once, before the callbacks log it, so that a worker
        killed mid-batch leaves in the study every result its log holds."""
        super()._record(res)
        if getattr(res, "kind", "measure") == "measure" and res.config.index in self._pending:
            with _quiet(), storage_errors(self.study):
                self._tell(self._pending.pop(res.config.index), res)
            self._told.add(res.config.index)

    def update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        with _quiet(), storage_errors(self.study):
            self._update(configs, results)

    def _update(self, configs: Sequence[ConfigEntity], results: Sequence[MeasureResult]) -> None:
        for c, r in zip(configs, results):
            if c.index in self._told:
                self._told.discard(c.index)
                continue
            trial = self._pending.pop(c.index, None)
            if trial is None:
                self._add_history(c.index, r, _result_attrs(r, self.worker_id))
            else:
                self._tell(trial, r)

    def _tell(self, trial, r: MeasureResult) -> None:
        TS = self._optuna.trial.TrialState
        attrs = _result_attrs(r, self.worker_id)
        try:
            for k, v in attrs.items():
                trial.set_user_attr(k, v)
            if r.ok:
                self.study.tell(trial, self.fitness(r))
            else:
                self.study.tell(trial, state=TS.FAIL)
        except (self._optuna.exceptions.UpdateFinishedTrialError, ValueError) as e:
            # another worker failed this trial as stale (our heartbeats stalled): keep the
            # result as a new finished trial
            log.warning("trial %d of config %d was finished by another worker (%s); adding "
                        "the measurement as a new trial", trial.number, r.config.index, e)
            self._add_trial(r.config.index, r, dict(attrs, index=r.config.index))

    def _add_history(self, index: int, r: MeasureResult, attrs: dict) -> None:
        """A measurement made outside this study (a resumed log) becomes a finished trial,
        unless the study already holds one of that config."""
        self._sync()
        if index in self._known:
            return
        self._add_trial(index, r, dict(attrs, index=index, source="log"))

    def _add_trial(self, index: int, r: MeasureResult, attrs: dict) -> None:
        TS = self._optuna.trial.TrialState
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


def _jsonable(x):
    return [_jsonable(v) for v in x] if isinstance(x, (tuple, list)) else x
