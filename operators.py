"""Operator files: loading ``examples/*.py``-style modules and instantiating their schedules."""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import LooptuneError

log = logging.getLogger("looptune.cli")


class CLIError(LooptuneError):
    """A mistake on the command line (missing file, unknown template, bad --args, ...)."""


@dataclass
class Operator:
    """One operator of a file: its template name, default args and functions."""

    name: str
    default_args: tuple
    algorithm: Callable
    hand_schedule: Callable
    template: Any
    reference: Callable
    file: str

    @property
    def c_name(self) -> str:
        return re.sub(r"\W", "_", self.name)

    def reference_for(self, args: tuple) -> Callable:
        """The numpy reference with the template arguments it also takes (stride, pad...)
        bound by name from ``algorithm``'s parameters."""
        names = list(inspect.signature(self.algorithm).parameters)
        given = dict(zip(names, args))
        wanted = inspect.signature(self.reference).parameters
        kw = {k: given[k] for k in wanted if k in given}
        ref = self.reference
        return lambda *arrays: ref(*arrays, **kw)


_REQUIRED = ("NAME", "DEFAULT_ARGS", "algorithm", "hand_schedule", "template", "reference")
_LOADED: dict[str, list[Operator]] = {}


def load_operators(path: str) -> list[Operator]:
    """The operators of an operator file (importing it registers its templates)."""
    p = Path(path)
    if not p.is_file():
        raise CLIError(f"no such file: {path}")
    key = str(p.resolve())
    if key in _LOADED:
        return _LOADED[key]
    modname = f"looptune_ops_{p.stem}_{hashlib.sha1(key.encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(modname, p)
    if spec is None or spec.loader is None:
        raise CLIError(f"{path} is not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except LooptuneError as e:
        raise CLIError(f"{path} failed to load: {e}") from None
    except Exception as e:  # the user's file: report it in one line
        raise CLIError(f"{path} failed to load: {type(e).__name__}: {e}") from None
    entries = getattr(mod, "OPERATORS", None) or [{k: getattr(mod, k, None) for k in _REQUIRED}]
    ops = []
    for ent in entries:
        missing = [k for k in _REQUIRED if ent.get(k) is None]
        if missing:
            raise CLIError(f"{path} has no template here: it lacks {', '.join(missing)} (an "
                           "operator file defines NAME, DEFAULT_ARGS, algorithm, hand_schedule, "
                           "a @lt.template named NAME, and reference; see examples/)")
        ops.append(Operator(ent["NAME"], tuple(ent["DEFAULT_ARGS"]), ent["algorithm"],
                            ent["hand_schedule"], ent["template"], ent["reference"], str(p)))
    _LOADED[key] = ops
    return ops


def select(ops: list[Operator], name: str | None) -> Operator:
    if name is None:
        return ops[0]
    for op in ops:
        if op.name == name:
            return op
    raise CLIError(f"unknown template '{name}' in {ops[0].file}; it has "
                   f"{', '.join(o.name for o in ops)}")


def parse_args(text: str | None, op: Operator) -> tuple:
    """``"1024,1024,1024"`` -> (1024, 1024, 1024); None -> the operator's defaults."""
    if text is None:
        return op.default_args
    out: list[Any] = []
    for part in text.split(","):
        part = part.strip()
        try:
            out.append(int(part))
        except ValueError:
            try:
                out.append(float(part))
            except ValueError:
                if not re.fullmatch(r"[A-Za-z_][\w]*", part or "-"):
                    raise CLIError(f"bad --args '{text}': '{part}' is not a number or a "
                                   "name; give comma-separated values such as 512,512,512") \
                        from None
                out.append(part)
    n_default = len(op.default_args)
    if len(out) > n_default:
        raise CLIError(f"bad --args '{text}': {op.name} takes at most {n_default} arguments "
                       f"(defaults {','.join(map(str, op.default_args))})")
    return tuple(out) + tuple(op.default_args[len(out):])


def auto_task(op: Operator, args: tuple, target: str):
    """The template-free task of the operator's algorithm (``looptune tune --auto``)."""
    from . import search
    out = op.algorithm(*args)
    tensors = list(out) if isinstance(out, (list, tuple)) else [out]
    return search.auto_task(tensors, target=target)


LogArg = str | os.PathLike | Sequence[str | os.PathLike] | None


def log_paths(logs: LogArg) -> list[str]:
    """``--log`` as a list of existing paths (several logs are merged); CLIError naming a
    missing one."""
    if logs is None:
        return []
    paths = [os.fspath(logs)] if isinstance(logs, (str, os.PathLike)) else \
        [os.fspath(p) for p in logs]
    for p in paths:
        if not Path(p).is_file():
            raise CLIError(f"no such log: {p}")
    return paths


def instantiate(op: Operator, args: tuple, logs: LogArg, target: str, any_host: bool = False):
    """(schedule, tensors, how): the best config of the logs (merged; of the template's task
    or of the auto-scheduled one, whichever is faster) when they have one, else the hand
    schedule."""
    paths = log_paths(logs)
    if not paths:
        s, tensors = op.hand_schedule(*args)
        return s, tensors, "hand schedule"
    best = best_record(op, args, paths, target, any_host)
    kind = "auto-scheduled" if best.task.name.startswith("auto_") else "tuned"
    return best.schedule, best.tensors, \
        f"{kind} config #{best.record.index} from {', '.join(paths)}"


@dataclass
class Best:
    """The best logged config of an operator: its record (by the median rule), task,
    config, the schedule and tensors it instantiates, and what its cost is the median of, in
    words (``log.how_ranked``)."""

    record: Any
    task: Any
    config: Any
    schedule: Any
    tensors: list
    how: str = ""


def best_record(op: Operator, args: tuple, logs: LogArg, target: str,
                any_host: bool = False) -> Best:
    """The best record of this operator's task in ``logs`` (merged) by the rule of
    ``looptune.search.log.rank_configs``, among records that fit the template's current
    knobs and instantiate (others are skipped with one warning line each); its template's
    task or its auto-scheduled task, the faster. CLIError when there is none."""
    from . import search
    from .search.log import iter_best
    paths = log_paths(logs)
    records = search.load_records(paths)
    task = search.create_task(op.name, args, target=target)
    tasks = [task]
    if any(r.task.name.startswith("auto_") for r in records):   # built only when it may match
        tasks.append(auto_task(op, args, target))
    found = [b for t in tasks if (b := _first_usable(records, t, any_host, iter_best))]
    if not found:
        keys = sorted({str(r.task) for r in records})
        raise CLIError(f"{', '.join(paths)} holds no usable correct record of {task.key}; it "
                       f"has {'; '.join(keys[:5]) or 'no records'} (tune this task first, or "
                       "pass the --args it was tuned with)")
    return min(found, key=lambda b: b.record.cost)


def _first_usable(records, task, any_host: bool, iter_best) -> Best | None:
    from .search.log import how_ranked
    for rec, cfg in iter_best(records, task, any_host, "looptune"):
        try:
            s, tensors = task.instantiate(cfg)
        except Exception as e:  # noqa: BLE001 - the user's template: skip the record, say why
            log.warning("skipping config %d of task %s: the template raised %s: %s",
                        rec.index, task.key, type(e).__name__, " ".join(str(e).split())[:200])
            continue
        return Best(rec, task, cfg, s, tensors, how_ranked(rec, records))
    return None


def transfer_records(logs: Sequence[str], this_task) -> list:
    """The records of ``logs`` that can warm-start a cost model for ``this_task``: those of
    other tasks whose templates load and accept their configs. A record whose config makes
    its template raise (or that no longer fits the template's knobs) is skipped, with one
    warning line per task, so one bad record never takes the tune down."""
    from . import search
    by: dict = {}
    for r in search.load_records(list(logs)):
        if r.task != this_task.key:
            by.setdefault(r.task, []).append(r)
    out: list = []
    for key, recs in by.items():
        try:
            task = search.Task(search.get_template(key.name), key.args, key.target)
        except Exception as e:  # noqa: BLE001 - another operator's template: skip its records
            log.warning("--transfer: skipping the %d records of %s: %s", len(recs), key,
                        " ".join(str(e).split())[:200])
            continue
        verdict: dict = {}
        for r in recs:
            k = (r.index, repr(r.config.get("knobs")))
            if k not in verdict:
                verdict[k] = _instantiates(task, r)
            if verdict[k] is None:
                out.append(r)
        bad = [v for v in verdict.values() if v is not None]
        if bad:
            log.warning("--transfer: skipping %d configs of %s that its template rejects "
                        "(e.g. %s)", len(bad), key, bad[0])
    return out


def _instantiates(task, rec) -> str | None:
    """None when the record's config fits the task's space and instantiates; else why not."""
    try:
        task.instantiate(task.config_space.from_json(rec.config))
    except Exception as e:  # noqa: BLE001 - any failure of the user's template
        return f"config {rec.index}: {type(e).__name__}: {' '.join(str(e).split())[:160]}"
    return None
