"""Tuning logs: JSON Lines records, crash-safe appends, loading, the best record, apply-best.

One line per measured candidate::

    {"v": 1, "task": {"name": "matmul", "args": [512, 512, 512, "float32"], "target": "c"},
     "config": {"index": 1234, "knobs": {"tile_i": [64, 8], ...}}, "costs": [...],
     "cost": 0.0021, "gflops": 127.3, "error": "none", "error_msg": "", "build_time": 0.31,
     "run_time": 0.05, "timestamp": "2025-...Z", "steps": "[[\\"split\\", ...]]",
     "version": "0.1.0", "host": {...}}

``kind`` is ``"measure"`` for a candidate of the search and ``"remeasure"`` for the runs that
confirm the top configs at the end of a tune; ``noise`` holds the reference kernel's drift
while the candidate was measured; ``host`` the CPU model, the resolved ``-march``, the
compiler and its version. Older lines without these fields still load.

Each record is appended with a single ``write`` on a file opened with ``O_APPEND`` (and
optionally ``fsync``), so a ``kill -9`` leaves every earlier line whole; the loader skips a
torn last line, and any malformed record (wrong types, costs that are not positive finite
seconds, nesting too deep to parse), with one warning line each; the writer starts a fresh
line after a torn one.

Which config is *best* is decided in one place, :func:`rank_configs` (the median over each
config's records, over its re-measures once it has some; re-measured configs first);
``load_best``, ``apply_history_best``,
``auto_schedule`` and the command line all use it.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..errors import LooptuneError
from .hosts import describe_host, host_info, same_host
from .knobs import jsonable
from .measure import ErrorKind, MeasureResult, counted
from .space import ConfigEntity, ConfigSpace
from .template import DispatchContext, TaskKey, Template, canonical_target, freeze_args

log = logging.getLogger("looptune.search.log")

FORMAT_VERSION = 1


def _version() -> str:
    from .. import __version__
    return __version__


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class Record:
    """One line of a tuning log."""

    task: TaskKey
    config: dict[str, Any]
    costs: list[float] = field(default_factory=list)
    error_kind: str = "none"
    error_msg: str = ""
    build_time: float = 0.0
    run_time: float = 0.0
    timestamp: str = ""
    steps: str | None = None
    flop: float | None = None
    version: str = ""
    host: dict[str, Any] = field(default_factory=dict)
    kind: str = "measure"
    noise: dict[str, Any] | None = None

    @property
    def index(self) -> int:
        """The config's index in its task's space."""
        return int(self.config["index"])

    @property
    def ok(self) -> bool:
        """A correct measurement with costs."""
        return self.error_kind == "none" and bool(self.costs) and \
            all(math.isfinite(c) for c in self.costs)

    @property
    def cost(self) -> float:
        """Median seconds per call (``inf`` when failed)."""
        if not self.ok:
            return float("inf")
        c = sorted(self.costs)
        n = len(c)
        return c[n // 2] if n % 2 else (c[n // 2 - 1] + c[n // 2]) / 2

    @property
    def gflops(self) -> float | None:
        """GFLOP/s at the median cost, when known."""
        return self.flop / self.cost / 1e9 if self.ok and self.flop and self.cost > 0 else None

    @staticmethod
    def from_result(key: TaskKey, res: MeasureResult) -> Record:
        """The record of a measurement of task ``key``."""
        return Record(key, res.config.to_json(), list(res.costs), res.error_kind.value,
                      res.error_msg, res.build_time, res.run_time, _iso(res.timestamp),
                      res.steps, res.flop, _version(), host_info(key.target),
                      getattr(res, "kind", "measure"), getattr(res, "noise", None))

    def to_result(self, space: ConfigSpace) -> MeasureResult:
        """This record as a MeasureResult of ``space`` (raises when the knobs changed)."""
        cfg = space.from_json(self.config)
        try:
            ts = _dt.datetime.fromisoformat(self.timestamp).timestamp()
        except (TypeError, ValueError):
            ts = 0.0
        return MeasureResult(cfg, list(self.costs), ErrorKind(self.error_kind), self.error_msg,
                             self.build_time, self.run_time, ts, self.steps, self.flop,
                             self.kind, self.noise)

    def to_json(self) -> dict[str, Any]:
        """The record as JSON data (one log line)."""
        return {"v": FORMAT_VERSION,
                "task": {"name": self.task.name, "args": _listify(self.task.args),
                         "target": self.task.target},
                "config": self.config, "costs": self.costs,
                "cost": self.cost if self.ok else None, "gflops": self.gflops,
                "error": self.error_kind, "error_msg": self.error_msg,
                "build_time": round(self.build_time, 6), "run_time": round(self.run_time, 6),
                "timestamp": self.timestamp, "steps": self.steps, "flop": self.flop,
                "version": self.version, "host": self.host, "kind": self.kind,
                **({"noise": self.noise} if self.noise else {})}

    @staticmethod
    def from_json(obj: Any) -> Record:
        """Parse one log line's data; ValueError naming the field when it is malformed."""
        if not isinstance(obj, dict):
            raise ValueError(f"a record is a JSON object; got {type(obj).__name__}")
        v = obj.get("v")
        if isinstance(v, bool) or not isinstance(v, int) or v > FORMAT_VERSION:
            raise ValueError(f"unsupported record format version {v!r} (this looptune reads "
                             f"up to {FORMAT_VERSION})")
        t = _field(obj, "task", dict)
        try:
            args = freeze_args(_field(t, "args", list, "task.args"))
        except LooptuneError as e:
            raise ValueError(f"task.args: {e}") from None
        key = TaskKey(_field(t, "name", str, "task.name"), args,
                      _field(t, "target", str, "task.target"))
        cfg = _field(obj, "config", dict)
        index = cfg.get("index")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"config.index must be an int >= 0; got {index!r}")
        if cfg.get("knobs") is not None and not isinstance(cfg["knobs"], dict):
            raise ValueError("config.knobs must be an object")
        error = _field(obj, "error", str)
        ErrorKind(error)
        costs = _costs(obj.get("costs"))
        if error == "none" and not costs:
            raise ValueError("a correct record (error 'none') without costs")
        kind = obj.get("kind", "measure")
        if kind not in RECORD_KINDS:
            raise ValueError(f"kind must be one of {RECORD_KINDS}; got {kind!r}")
        return Record(key, cfg, costs, error, _opt(obj, "error_msg", str, ""),
                      _seconds(obj, "build_time"), _seconds(obj, "run_time"),
                      _opt(obj, "timestamp", str, ""), _opt(obj, "steps", str, None),
                      _flop(obj.get("flop")), _opt(obj, "version", str, ""),
                      _opt(obj, "host", dict, None) or {}, kind,
                      _opt(obj, "noise", dict, None))


RECORD_KINDS = ("measure", "remeasure")


def _field(obj: dict, name: str, typ: type, label: str | None = None):
    if name not in obj:
        raise ValueError(f"missing field '{label or name}'")
    val = obj[name]
    if not isinstance(val, typ) or isinstance(val, bool):
        raise ValueError(f"'{label or name}' must be {typ.__name__}; got {val!r:.60}")
    return val


def _opt(obj: dict, name: str, typ: type, default):
    val = obj.get(name)
    return default if val is None else _field(obj, name, typ)


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _costs(costs) -> list[float]:
    if costs is None:
        return []
    if not isinstance(costs, list):
        raise ValueError(f"costs must be a list of seconds; got {costs!r:.60}")
    for k, c in enumerate(costs):
        if not _is_num(c) or not math.isfinite(c) or c <= 0:
            raise ValueError(f"costs[{k}] is {c!r:.30}: a cost must be positive finite seconds")
    return [float(c) for c in costs]


def _seconds(obj: dict, name: str) -> float:
    val = obj.get(name, 0.0)
    if val is None:
        return 0.0
    if not _is_num(val) or not math.isfinite(val) or val < 0:
        raise ValueError(f"{name} must be seconds >= 0; got {val!r:.30}")
    return float(val)


def _flop(val) -> float | None:
    if val is None:
        return None
    if not _is_num(val) or not math.isfinite(val) or val < 0:
        raise ValueError(f"flop must be a number >= 0; got {val!r:.30}")
    return val


def _listify(x):
    return [_listify(v) for v in x] if isinstance(x, (tuple, list)) else x


# ---- writing ---------------------------------------------------------------------------------


class LogWriter:
    """Appends records to a JSON Lines file, one ``write`` per line (``fsync`` optional)."""

    def __init__(self, path: str | os.PathLike, fsync: bool = False):
        self.path = Path(path)
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if _ends_torn(self.path):
            log.warning("tuning log %s ends with a torn line; starting a new line after it",
                        self.path)
            os.write(self._fd, b"\n")

    def write(self, record: Record) -> None:
        """Append one record as one line, flushed to the OS (and to disk with ``fsync``)."""
        data = (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:                   # a regular file takes it in one write; loop to be sure
            n = os.write(self._fd, view)
            view = view[n:]
        if self.fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _ends_torn(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


# ---- reading ---------------------------------------------------------------------------------

LogSource = str | os.PathLike | TextIO | Iterable


def load_records(log_src: LogSource, task=None) -> list[Record]:
    """Every complete record of one or more logs (paths, open streams such as ``sys.stdin``,
    or Records), optionally only those of ``task`` (a Task or TaskKey). Each malformed line
    is skipped with one warning line."""
    if isinstance(log_src, (str, os.PathLike)):
        recs = list(_read(Path(log_src)))
    elif hasattr(log_src, "read"):
        recs = list(parse_lines(log_src.read(), getattr(log_src, "name", "<stream>")))
    else:
        recs = []
        for item in log_src:
            recs.extend([item] if isinstance(item, Record) else load_records(item))
    if task is not None:
        key = getattr(task, "key", task)
        recs = [r for r in recs if r.task == key]
    return recs


def _read(path: Path) -> Iterable[Record]:
    if not path.exists():
        raise LooptuneError(f"tuning log {path} does not exist")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise LooptuneError(f"cannot read tuning log {path}: {e.strerror}") from None
    return parse_lines(data, str(path))


def parse_lines(data: bytes | str, source: str) -> Iterator[Record]:
    """The records of a log's text; each malformed line is skipped with one warning line
    naming ``source``, the line and what is wrong."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    lines = data.split(b"\n")
    last = len(lines) - 1           # the text after the final newline (empty when whole)
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            yield Record.from_json(json.loads(raw))
        except RecursionError:
            _skip(source, n, last, "nested deeper than a tuning record can be")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            _skip(source, n, last, str(e))


def _skip(source: str, n: int, last: int, why: str) -> None:
    where = "a torn last line" if n - 1 == last else f"malformed line {n}"
    log.warning("tuning log %s: ignoring %s (%s)", source, where, _one_line(why, 160))


def _one_line(text: object, limit: int = 300) -> str:
    t = " ".join(str(text).split())
    return t if len(t) <= limit else t[:limit] + "..."


# ---- the rule for "best" -----------------------------------------------------------------


def rank_configs(records: Iterable[Record]) -> list[Record]:
    """The configs of one task's ``records``, best first, by looptune's one rule for "best":

    1. a config that gave a wrong result in any record is never best (failed records of
       other kinds are ignored: a timeout under load does not condemn a config);
    2. a config's cost is the **median over its correct records** (each record's cost is the
       median of its repeats), not the minimum of one lucky measurement; once a config has
       re-measure records, over those only (``measure.counted``: the search's one timing of
       it is biased fast, that is why it was re-measured);
    3. configs with re-measure records (races during a tune, and the top configs timed again,
       interleaved, at its end) rank before configs measured once during a search, whose
       timings were never confirmed; ties go to the lower cost, then the lower index.

    Each config comes back as one Record: its only record, or its latest one with ``costs``
    set to the per-record costs that count (so ``.cost`` is the median of rule 2) and
    ``kind`` ``"remeasure"`` when any of its records is one. A config is its index *and* knob
    values, so records of an older template with other knobs never merge with current ones.
    """
    groups: dict[tuple, list[Record]] = {}
    wrong: set[tuple] = set()
    for r in records:
        g = (r.index, json.dumps(r.config.get("knobs"), sort_keys=True, default=str))
        if r.error_kind == ErrorKind.WRONG_RESULT.value:
            wrong.add(g)
        elif r.ok:
            groups.setdefault(g, []).append(r)
    ranked = [_merge(recs) for g, recs in groups.items() if g not in wrong]
    ranked.sort(key=lambda r: (r.kind != "remeasure", r.cost, r.index))
    return ranked


def how_ranked(best: Record, records: Iterable[Record]) -> str:
    """What ``best`` (a config :func:`rank_configs` returned from ``records``) has its cost
    from, in words: "measured once", "median of 3 runs" (never re-measured), "one re-measure"
    or "median of 4 re-measures" (its search timing left out, rule 2)."""
    if any(best is r for r in records):       # rank_configs returns a lone record as is
        return "one re-measure" if best.kind == "remeasure" else "measured once"
    n = len(best.costs)
    if best.kind != "remeasure":
        return f"median of {n} runs"
    return "one re-measure" if n == 1 else f"median of {n} re-measures"


def _merge(recs: list[Record]) -> Record:
    if len(recs) == 1:
        return recs[0]
    kind = "remeasure" if any(r.kind == "remeasure" for r in recs) else "measure"
    steps = next((r.steps for r in reversed(recs) if r.steps is not None), None)
    return dataclasses.replace(recs[-1], costs=[r.cost for r in counted(recs)], kind=kind,
                               noise=None, steps=steps)


def best_by_task(records: Iterable[Record]) -> dict[TaskKey, list[Record]]:
    """Each task's configs, best first by :func:`rank_configs` (one Record per config)."""
    by: dict[TaskKey, list[Record]] = {}
    for r in records:
        by.setdefault(r.task, []).append(r)
    return {k: ranked for k, recs in by.items() if (ranked := rank_configs(recs))}


def for_this_host(records: list[Record], any_host: bool = False,
                  who: str = "load_best") -> list[Record]:
    """The records of one task whose timings can be ranked here. With ``any_host`` all of
    them. Else this host's (same CPU model and resolved ``-march``, :func:`same_host`) when
    it has a correct one, the others being ignored with a warning; when only other hosts
    measured the task, their records, with a warning naming the host (never silently)."""
    if any_host or not records:
        return records
    here = host_info(records[0].task.target)
    mine = [r for r in records if same_host(r.host, here)]
    if len(mine) == len(records):
        return records
    others = ", ".join(sorted({describe_host(r.host) for r in records
                               if not same_host(r.host, here)}))
    if any(r.ok for r in mine):
        log.warning("%s: task %s: ignoring %d records measured on another host (%s); this "
                    "host is %s (any_host=True or --any-host ranks them together)", who,
                    records[0].task, len(records) - len(mine), others, describe_host(here))
        return mine
    log.warning("%s: task %s was tuned on another host (%s), not on this one (%s); using its "
                "records anyway: tune here for configs that suit this machine (any_host=True "
                "or --any-host silences this)", who, records[0].task, others,
                describe_host(here))
    return records


def iter_best(records: Iterable[Record], task, any_host: bool = False,
              who: str = "load_best") -> Iterator[tuple[Record, ConfigEntity]]:
    """``(record, config)`` of ``task`` (a Task) best first by :func:`rank_configs`, each
    config checked against the task's space as ``apply_history_best`` does: a record whose
    index is out of range or whose knob values differ (the template changed) is skipped with
    one warning line."""
    key = task.key
    mine = for_this_host([r for r in records if r.task == key], any_host, who)
    for rec in rank_configs(mine):
        try:
            cfg = task.config_space.from_json(rec.config)
        except (LooptuneError, IndexError) as e:
            log.warning("%s: skipping config %d of task %s: %s", who, rec.index, key,
                        _mismatch(task.config_space, rec, e))
            continue
        yield rec, cfg


def _mismatch(space: ConfigSpace, rec: Record, err: Exception) -> str:
    """Why a record does not fit ``space``, in one line."""
    if isinstance(err, IndexError):
        return (f"its index is out of range [0, {space.size}) of the template's space (the "
                "template changed since the log was written, or the record is corrupt)")
    now = space.get(rec.index).knob_values()
    old = rec.config.get("knobs") or {}
    diff = [f"{k}: {old.get(k)!r:.40} in the log, {now.get(k)!r:.40} now"
            for k in sorted(set(now) | set(old)) if jsonable(old.get(k)) != now.get(k)]
    return _one_line("the template's knobs changed since the log was written ("
                     + "; ".join(diff[:4]) + ("; ..." if len(diff) > 4 else "") + ")")


def load_best(log_src: LogSource, task, any_host: bool = False) -> Record | None:
    """The best record of ``task`` in the log by :func:`rank_configs`, or None. With a Task
    (not a bare TaskKey), records that do not fit its config space are skipped with a
    warning. Records of other hosts: see :func:`for_this_host`."""
    key = getattr(task, "key", task)
    records = load_records(log_src, key)
    if hasattr(task, "config_space"):
        return next((rec for rec, _ in iter_best(records, task, any_host)), None)
    ranked = rank_configs(for_this_host(records, any_host))
    return ranked[0] if ranked else None


# ---- apply-best ------------------------------------------------------------------------------


class ApplyHistoryBest(DispatchContext):
    """Inside it, calling a template picks the best logged config of its task."""

    def __init__(self, log_src: LogSource, target=None, any_host: bool = False):
        self.target = canonical_target(target) if target is not None else None
        self.any_host = any_host
        self.records: dict[TaskKey, list[Record]] = {}
        for r in load_records(log_src):
            self.records.setdefault(r.task, []).append(r)
        self.applied: list[tuple[TaskKey, ConfigEntity]] = []
        self._tasks: dict[TaskKey, Any] = {}
        self._expect: dict[int, Record] = {}

    def _key(self, tpl: Template, args: tuple) -> TaskKey | None:
        if self.target is not None:
            key = TaskKey(tpl.name, args, self.target)
            return key if key in self.records else None
        keys = [k for k in self.records if k.name == tpl.name and k.args == args
                and any(r.ok for r in self.records[k])]
        if len({k.target for k in keys}) > 1:
            raise LooptuneError(f"apply_history_best: the log holds task {tpl.name}{args} for "
                                f"several targets {sorted(k.target for k in keys)}; pass "
                                "target=... to choose one")
        return keys[0] if keys else None

    def keys_for(self, tpl: Template, args: tuple) -> list[TaskKey]:
        return [TaskKey(tpl.name, args, self.target or "any")]

    def query(self, tpl: Template, args: tuple) -> ConfigEntity | None:
        from .task import Task
        key = self._key(tpl, args)
        if key is None:
            return None
        task = self._tasks.get(key)
        if task is None:
            task = self._tasks[key] = Task(tpl, args, key.target)
        for rec, cfg in iter_best(self.records[key], task, self.any_host,
                                  "apply_history_best"):
            self.applied.append((key, cfg))
            fresh = cfg.fresh(task.config_space)
            self._expect[id(fresh)] = rec
            return fresh
        return None

    def instantiated(self, tpl: Template, args: tuple, cfg, out) -> None:
        rec = self._expect.pop(id(cfg), None)
        if rec is None or rec.steps is None:
            return
        from ..schedule.steps import dumps
        if dumps(out[0].steps) != rec.steps:
            log.warning("apply_history_best: task %s, config %d: the template applied steps "
                        "that differ from the logged ones; the template changed since the log "
                        "was written (or is not deterministic)", rec.task, cfg.index)


def apply_history_best(log_src: LogSource, target=None,
                       any_host: bool = False) -> ApplyHistoryBest:
    """A context in which templates use the best config of ``log_src`` for their task, by
    :func:`rank_configs` (the median over a config's records, over its re-measures once it
    has some; re-measured configs first),
    among the records that fit the template's current knobs. ``target`` selects records of
    one target (default: the log's only target for the task); ``any_host`` ranks records of
    every host together (default: this host's, see :func:`for_this_host`). Templates without
    a matching record fall back, with a warning naming the task."""
    return ApplyHistoryBest(log_src, target, any_host)
