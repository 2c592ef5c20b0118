"""Operator files: loading ``examples/*.py``-style modules and instantiating their schedules."""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import LooptuneError


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


def instantiate(op: Operator, args: tuple, log: str | None, target: str):
    """(schedule, tensors, how): the log's best config when it has one (of the template's
    task or of the auto-scheduled one, whichever is faster), else the hand schedule."""
    if log is None:
        s, tensors = op.hand_schedule(*args)
        return s, tensors, "hand schedule"
    rec, task = best_record(op, args, log, target, with_task=True)
    s, tensors = task.instantiate(rec.index)
    kind = "auto-scheduled" if task.name.startswith("auto_") else "tuned"
    return s, tensors, f"{kind} config #{rec.index} from {log}"


def best_record(op: Operator, args: tuple, log: str, target: str, with_task: bool = False):
    """The best correct record of this operator's task in ``log`` (its template's task or
    its auto-scheduled task, the faster); CLIError when none. ``with_task``: (record, task)."""
    from . import search
    if not Path(log).is_file():
        raise CLIError(f"no such log: {log}")
    records = search.load_records(log)
    task = search.create_task(op.name, args, target=target)
    tasks = [task]
    if any(r.task.name.startswith("auto_") for r in records):   # built only when it may match
        tasks.append(auto_task(op, args, target))
    found = [(r, t) for t in tasks if (r := search.load_best(records, t)) is not None]
    if not found:
        keys = sorted({str(r.task) for r in records})
        raise CLIError(f"{log} holds no correct record of {task.key}; it has "
                       f"{'; '.join(keys[:5]) or 'no records'} (tune this task first, or pass "
                       "the --args it was tuned with)")
    rec, t = min(found, key=lambda rt: rt[0].cost)
    return (rec, t) if with_task else rec

