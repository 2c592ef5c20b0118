"""``looptune export``: operator files -> one C library, for one target or several x86-64 levels.

Which schedule each level gets (a tuning log maps to a level by its records' targets):

1. the best record of the task tuned for ``--target`` with ``-march=<level>`` (``looptune tune
   FILE --target 'c -march=x86-64-v3'`` writes such records), so every level can be tuned on
   a machine of that level;
2. else the best record of the task for ``--target`` itself (tuned with its own ``-march``,
   native by default): a schedule tuned elsewhere, compiled for the level;
3. else (no ``--log``, or no usable record) the file's hand schedule.

The header names, per function and level, the schedule, its config and the log it came from.
"""
from __future__ import annotations

import argparse
import json
import sys

from .backends.march import parse_march
from .backends.target import Target
from .errors import LooptuneError
from .operators import CLIError, best_record, load_operators, log_paths, parse_args

_CONFIG_CHARS = 400        # a config longer than this is cut in the header


def level_target(target: str, level: str) -> str:
    """``target`` compiled for ``level`` (its -march replaced), as tuning records name it."""
    t = Target.parse(target)
    return str(Target(t.kind, {**t.options, "march": level}))


def schedule_for(op, args: tuple, logs, target: str, level: str | None, any_host: bool):
    """(schedule, tensors, provenance) of ``op`` for ``level`` (None: ``target`` as given),
    by the rule in this module's docstring."""
    paths = log_paths(logs)
    tried = [level_target(target, level)] if level and level != "native" else []
    for tgt in (*tried, target) if paths else ():
        try:
            best = best_record(op, args, paths, tgt, any_host)
        except CLIError:
            continue
        kind = "auto-scheduled" if best.task.name.startswith("auto_") else "tuned"
        knobs = best.record.config.get("knobs", best.record.config)
        config = json.dumps(knobs, sort_keys=True, default=str)
        if len(config) > _CONFIG_CHARS:
            config = config[:_CONFIG_CHARS] + "..."
        return best.schedule, best.tensors, {
            "schedule": f"{kind} config #{best.record.index} from {', '.join(paths)} (task "
                        f"{best.task.key}, median {best.record.cost * 1e3:.4g} ms)",
            "config": config, "log": ", ".join(paths)}
    s, tensors = op.hand_schedule(*args)
    why = "no --log" if not paths else f"no usable record in {', '.join(paths)}"
    return s, tensors, {"schedule": f"hand schedule of {op.file} ({why})"}


def cmd_export(ns: argparse.Namespace) -> int:
    """Build every operator of ``ns.files`` (per level when ``--march`` lists several) and
    export them as one library."""
    import looptune as lt
    try:
        levels = parse_march(getattr(ns, "march", None), "--march")
    except LooptuneError as e:
        raise CLIError(str(e)) from None
    per_level: dict[str | None, list] = {lv: [] for lv in (levels or [None])}
    for f in ns.files:
        for op in load_operators(f):
            args = parse_args(ns.args, op)
            for lv, mods in per_level.items():
                s, tensors, prov = schedule_for(op, args, ns.log, ns.target, lv, ns.any_host)
                tag = f" [{lv}]" if lv else ""
                print(f"{op.c_name}{tag}: {prov['schedule']}", file=sys.stderr)
                mod = lt.build(s, tensors, target=ns.target, name=op.c_name)
                mod.provenance = prov
                mods.append(mod)
    if levels is not None and len(levels) > 1:
        paths = lt.export_library(per_level, ns.output)
    else:
        paths = lt.export_library(per_level[levels[0] if levels else None], ns.output,
                                  march=levels[0] if levels else None)
    for p in paths.values():
        print(p)
    return 0


def add_march_argument(parser: argparse.ArgumentParser) -> None:
    """``--march`` of ``looptune export``."""
    parser.add_argument(
        "--march", metavar="LEVEL[,LEVEL...]",
        help="compile the library for x86-64-v2, x86-64-v3, x86-64-v4, x86-64 or native "
             "(default: --target's -march, native unless given); several levels, e.g. "
             "x86-64-v2,x86-64-v3,x86-64-v4, make one library that runs the best variant the "
             "CPU supports; each level uses the log's records tuned with --target "
             "'c -march=LEVEL' when there are any")
