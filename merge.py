"""``looptune merge LOG... -o ALL.jsonl``: many workers' tuning logs as one.

Every complete record of every log is kept, once: a record that appears in several logs (a log
given twice, a copy of a worker's log) is written once. Records are ordered by their
timestamps (a stable sort, so each log's own order stands among equal ones), which makes the
merged log's trials the order in which the workers measured them. The output is written to a
temporary file and renamed into place, so it may also be one of the inputs. The summary names,
per task, the best config by the rule every other command uses
(:func:`looptune.search.log.rank_configs`: the median over each config's records, re-measured
configs first, never a config that was once wrong).
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path

from .operators import CLIError


def merge_logs(logs: list[str], output: str) -> str:
    """Merge ``logs`` into ``output``; the summary (one line per task, then a total)."""
    from .search.log import LogWriter, load_records
    out = Path(output)
    _check_output(logs, out)
    records, seen, dropped = [], set(), 0
    per_log: dict = {}
    for lg in logs:
        recs = load_records(lg)
        if not recs:
            raise CLIError(f"{lg} holds no complete tuning record")
        for r in recs:
            key = json.dumps(r.to_json(), sort_keys=True, separators=(",", ":"))
            per_log.setdefault(r.task, set()).add(lg)
            if key in seen:
                dropped += 1
                continue
            seen.add(key)
            records.append(r)
    records.sort(key=lambda r: r.timestamp or "")
    fd, tmp = tempfile.mkstemp(dir=out.parent if str(out.parent) else ".",
                               prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with LogWriter(tmp) as w:
            for r in records:
                w.write(r)
        os.replace(tmp, out)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise CLIError(f"cannot write {output}: {e.strerror}") from None
    lines = [_task_line(key, recs, len(per_log[key]))
             for key, recs in _by_task(records).items()]
    tasks = len(per_log)
    lines.append(f"wrote {_n(len(records), 'record')} of {_n(tasks, 'task')} from "
                 f"{_n(len(logs), 'log')} to {output}"
                 + (f" ({dropped} duplicate records dropped)" if dropped else ""))
    return "\n".join(lines)


def _check_output(logs: list[str], out: Path) -> None:
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise CLIError(f"cannot write {out}: the folder {parent} does not exist")
    if out.is_dir():
        raise CLIError(f"cannot write {out}: it is a folder")
    for lg in logs:
        if lg == "-":
            raise CLIError("merge reads log files, not standard input ('-'); save it to a "
                           "file first")
        if not Path(lg).is_file():
            raise CLIError(f"no such log: {lg}")
    inputs = {Path(lg).resolve() for lg in logs}
    if out.exists() and out.resolve() not in inputs:
        raise CLIError(f"{out} exists and is not one of the logs to merge; give it as an "
                       f"input too to merge into it (looptune merge {out} ... -o {out}), or "
                       "choose another output")


def _by_task(records: list) -> dict:
    by: dict = {}
    for r in records:
        by.setdefault(r.task, []).append(r)
    return by


def _task_line(key, recs: list, n_logs: int) -> str:
    from .search.hosts import describe_host
    from .search.log import how_ranked, rank_configs
    trials = [r for r in recs if r.kind == "measure"]
    fails = Counter(r.error_kind for r in trials if not r.ok)
    again = sum(r.kind == "remeasure" for r in recs)
    hosts = sorted({describe_host(r.host) for r in recs if r.host})
    head = (f"{key}: {_n(len(recs), 'record')} from {_n(n_logs, 'log')}, "
            f"{_n(len(trials), 'trial')}" + "".join(f", {n} {k}" for k, n in fails.most_common())
            + (f", {_n(again, 're-measure run')}" if again else ""))
    ranked = rank_configs(recs)
    if not ranked:
        return head + "; no correct record"
    b = ranked[0]
    rate = f", {b.gflops:.1f} GFLOP/s" if b.gflops else ""
    how = how_ranked(b, recs)
    where = (f"; measured on {len(hosts)} hosts ({'; '.join(hosts)}), ranked together"
             if len(hosts) > 1 else "")
    return head + f"; best #{b.index}: {b.cost * 1e3:.4g} ms{rate} ({how}){where}"


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"
