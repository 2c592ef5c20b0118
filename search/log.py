"""Tuning logs: JSON Lines records, crash-safe appends, loading, the best record, apply-best.

One line per measured candidate::

    {"v": 1, "task": {"name": "matmul", "args": [512, 512, 512, "float32"], "target": "c"},
     "config": {"index": 1234, "knobs": {"tile_i": [64, 8], ...}}, "costs": [...],
     "cost": 0.0021, "gflops": 127.3, "error": "none", "error_msg": "", "build_time": 0.31,
     "run_time": 0.05, "timestamp": "2025-...Z", "steps": "[[\\"split\\", ...]]",
     "version": "0.1.0", "host": {...}}

Each record is appended with a single ``write`` on a file opened with ``O_APPEND`` (and
optionally ``fsync``), so a ``kill -9`` leaves every earlier line whole; the loader skips a
torn last line with a warning, and the writer starts a fresh line after one.
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import math
import os
import platform
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import LooptuneError
from .measure import ErrorKind, MeasureResult
from .space import ConfigEntity, ConfigSpace
from .template import DispatchContext, TaskKey, Template, canonical_target, freeze_args

log = logging.getLogger("looptune.search.log")

FORMAT_VERSION = 1


@functools.lru_cache(maxsize=1)
def host_info() -> dict[str, Any]:
    """Where measurements were taken: host name, CPU model and count, OS, Python."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"hostname": platform.node(), "cpu": cpu, "ncpu": os.cpu_count(),
            "machine": platform.machine(), "os": platform.platform(),
            "python": platform.python_version()}


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
                      res.steps, res.flop, _version(), host_info())

    def to_result(self, space: ConfigSpace) -> MeasureResult:
        """This record as a MeasureResult of ``space`` (raises when the knobs changed)."""
        cfg = space.from_json(self.config)
        try:
            ts = _dt.datetime.fromisoformat(self.timestamp).timestamp()
        except (TypeError, ValueError):
            ts = 0.0
        return MeasureResult(cfg, list(self.costs), ErrorKind(self.error_kind), self.error_msg,
                             self.build_time, self.run_time, ts, self.steps, self.flop)

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
                "version": self.version, "host": self.host}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Record:
        """Parse one log line's data (raises KeyError/TypeError/ValueError when malformed)."""
        v = obj.get("v")
        if not isinstance(v, int) or v > FORMAT_VERSION:
            raise ValueError(f"unsupported record format version {v!r} (this looptune reads "
                             f"up to {FORMAT_VERSION})")
        t = obj["task"]
        key = TaskKey(t["name"], freeze_args(t["args"]), t["target"])
        cfg = obj["config"]
        if not isinstance(cfg.get("index"), int):
            raise ValueError("record has no config index")
        ErrorKind(obj["error"])
        return Record(key, cfg, [float(c) for c in obj.get("costs") or []], obj["error"],
                      obj.get("error_msg", ""), float(obj.get("build_time", 0.0)),
                      float(obj.get("run_time", 0.0)), obj.get("timestamp", ""),
                      obj.get("steps"), obj.get("flop"), obj.get("version", ""),
                      obj.get("host") or {})


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

LogSource = str | os.PathLike | Iterable


def load_records(log_src: LogSource, task=None) -> list[Record]:
    """Every complete record of one or more logs (paths, or Records), optionally only those
    of ``task`` (a Task or TaskKey). Malformed lines are skipped with a warning."""
    if isinstance(log_src, (str, os.PathLike)):
        recs = list(_read(Path(log_src)))
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
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    last = len(lines) - 1           # the text after the final newline (empty when whole)
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            yield Record.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            where = "a torn last line" if n - 1 == last else f"malformed line {n}"
            log.warning("tuning log %s: ignoring %s (%s)", path, where, str(e)[:120])


def best_by_task(records: Iterable[Record]) -> dict[TaskKey, list[Record]]:
    """Each task's correct records, best (lowest cost) first."""
    out: dict[TaskKey, list[Record]] = {}
    for r in records:
        if r.ok:
            out.setdefault(r.task, []).append(r)
    for recs in out.values():
        recs.sort(key=lambda r: r.cost)
    return out


def load_best(log_src: LogSource, task) -> Record | None:
    """The best correct record of ``task`` (a Task or TaskKey) in the log, or None."""
    key = getattr(task, "key", task)
    recs = best_by_task(load_records(log_src, key)).get(key)
    return recs[0] if recs else None


# ---- apply-best ------------------------------------------------------------------------------


class ApplyHistoryBest(DispatchContext):
    """Inside it, calling a template picks the best correct logged config of its task."""

    def __init__(self, log_src: LogSource, target=None):
        self.target = canonical_target(target) if target is not None else None
        self.best = best_by_task(load_records(log_src))
        self.applied: list[tuple[TaskKey, ConfigEntity]] = []
        self._tasks: dict[TaskKey, Any] = {}
        self._expect: dict[int, Record] = {}

    def _candidates(self, tpl: Template, args: tuple) -> list[Record]:
        if self.target is not None:
            return self.best.get(TaskKey(tpl.name, args, self.target), [])
        keys = [k for k in self.best if k.name == tpl.name and k.args == args]
        if len({k.target for k in keys}) > 1:
            raise LooptuneError(f"apply_history_best: the log holds task {tpl.name}{args} for "
                                f"several targets {sorted(k.target for k in keys)}; pass "
                                "target=... to choose one")
        return self.best[keys[0]] if keys else []

    def keys_for(self, tpl: Template, args: tuple) -> list[TaskKey]:
        return [TaskKey(tpl.name, args, self.target or "any")]

    def query(self, tpl: Template, args: tuple) -> ConfigEntity | None:
        from .task import Task
        for rec in self._candidates(tpl, args):
            task = self._tasks.get(rec.task)
            if task is None:
                task = self._tasks[rec.task] = Task(tpl, args, rec.task.target)
            try:
                cfg = task.config_space.from_json(rec.config)
            except (LooptuneError, IndexError) as e:
                log.warning("apply_history_best: skipping a record of task %s: %s", rec.task, e)
                continue
            self.applied.append((rec.task, cfg))
            fresh = ConfigEntity(cfg.index, cfg._entities, task.config_space)
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


def apply_history_best(log_src: LogSource, target=None) -> ApplyHistoryBest:
    """A context in which templates use the best correct config of ``log_src`` for their
    task. ``target`` selects records of one target (default: the log's only target for the
    task). Templates without a matching record fall back, with a warning naming the task."""
    return ApplyHistoryBest(log_src, target)
