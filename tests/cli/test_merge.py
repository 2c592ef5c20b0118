"""``looptune merge LOG... -o ALL.jsonl``: every record once, in time order; the best by the
median rule of a single log; one summary line per task; clear one-line errors."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from looptune.cli import main
from looptune.operators import load_operators
from looptune.search import LogWriter, MeasureResult, Record, create_task, load_records
from looptune.search.log import load_best, rank_configs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
T0 = 1_700_000_000.0


@pytest.fixture(scope="module")
def tasks():
    load_operators(str(EXAMPLES / "matmul.py"))
    load_operators(str(EXAMPLES / "softmax.py"))
    return create_task("matmul", (48, 40, 24)), create_task("softmax", (33, 65))


def _rec(task, index: int, costs, t: float, error: str = "none", kind: str = "measure"):
    from looptune.search.measure import ErrorKind
    res = MeasureResult(task.config_space.get(index), list(costs), ErrorKind(error),
                        timestamp=T0 + t, flop=task.flop, kind=kind)
    return Record.from_result(task.key, res)


def _write(path: Path, recs) -> Path:
    with LogWriter(path) as w:
        for r in recs:
            w.write(r)
    return path


def _worker_logs(tmp_path, task):
    """Three workers. Config 5 was once lucky (0.5 ms) but its median is 2 ms; config 7 is
    0.9 ms every time; config 9 was once fastest but once wrong; config 3 failed to build."""
    w1 = _write(tmp_path / "w1.jsonl", [_rec(task, 5, [5e-4], 1), _rec(task, 7, [9e-4], 4),
                                         _rec(task, 9, [1e-4], 7)])
    w2 = _write(tmp_path / "w2.jsonl", [_rec(task, 5, [2e-3], 2), _rec(task, 7, [9e-4], 5),
                                         _rec(task, 3, [], 8, error="build_error")])
    w3 = _write(tmp_path / "w3.jsonl", [_rec(task, 5, [2e-3], 3), _rec(task, 9, [], 6,
                                                                       error="wrong_result")])
    return w1, w2, w3


def test_merge_keeps_every_record_once_in_time_order_and_ranks_by_the_median(
        tmp_path, tasks, capsys):
    task = tasks[0]
    w1, w2, w3 = _worker_logs(tmp_path, task)
    out = tmp_path / "all.jsonl"
    assert main(["merge", str(w1), str(w2), str(w3), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    recs = load_records(str(out))
    assert len(recs) == 8
    assert [r.index for r in recs] == [5, 5, 5, 7, 7, 9, 9, 3]          # by timestamp
    union = load_records([str(w1), str(w2), str(w3)])
    assert rank_configs(recs)[0].index == rank_configs(union)[0].index == 7
    assert load_best(str(out), task.key).index == 7                    # not the lucky 5
    line = next(ln for ln in text.splitlines() if ln.startswith("matmul("))
    assert "8 records from 3 logs, 8 trials, 1 wrong_result, 1 build_error" in line
    assert "best #7: 0.9 ms" in line and "(median of 2 runs)" in line
    assert text.splitlines()[-1] == f"wrote 8 records of 1 task from 3 logs to {out}"


def test_duplicates_are_dropped_and_the_output_may_be_an_input(tmp_path, tasks, capsys):
    task = tasks[0]
    w1, w2, _ = _worker_logs(tmp_path, task)
    copy = shutil.copy(w2, tmp_path / "w2_copy.jsonl")
    out = tmp_path / "all.jsonl"
    assert main(["merge", str(w1), str(w1), str(w2), str(copy), "-o", str(out)]) == 0
    assert len(load_records(str(out))) == 6
    assert "(6 duplicate records dropped)" in capsys.readouterr().out
    before = out.read_bytes()
    assert main(["merge", str(out), str(w1), "-o", str(out)]) == 0      # idempotent
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_one_summary_line_per_task_and_a_torn_line_is_skipped(tmp_path, tasks, capsys,
                                                               caplog):
    mm, sm = tasks
    a = _write(tmp_path / "a.jsonl", [_rec(mm, 1, [1e-3, 1.2e-3, 1.1e-3], 1),
                                      _rec(sm, 2, [4e-4], 2),
                                      _rec(sm, 2, [5e-4], 9, kind="remeasure")])
    with open(a, "a") as f:
        f.write('{"v": 1, "task": {"name": "softmax", "ar')           # a worker killed -9
    b = _write(tmp_path / "b.jsonl", [_rec(sm, 4, [3e-4], 3)])
    out = tmp_path / "m.jsonl"
    assert main(["merge", str(a), str(b), "-o", str(out)]) == 0
    io = capsys.readouterr()
    lines = io.out.splitlines()
    assert len(lines) == 3
    mm_line = next(ln for ln in lines if ln.startswith("matmul("))
    sm_line = next(ln for ln in lines if ln.startswith("softmax("))
    assert "3 records from 2 logs" in sm_line and "1 re-measure run" in sm_line
    # confirmed first; its cost is its re-measure's (the search's one timing left out)
    assert "best #2: 0.5 ms" in sm_line and "(one re-measure)" in sm_line
    assert "1 record from 1 log, 1 trial;" in mm_line and "(measured once)" in mm_line
    assert any("a.jsonl: ignoring a torn last line" in r.getMessage() for r in caplog.records)
    assert len(load_records(str(out))) == 4


@pytest.mark.parametrize("case, match", [
    ("missing", "no such log: {tmp}/nope.jsonl"),
    ("exists", ("{tmp}/other.jsonl exists and is not one of the logs to merge; give it as an "
                "input too")),
    ("folder", "cannot write {tmp}/no/all.jsonl: the folder {tmp}/no does not exist"),
    ("stdin", r"merge reads log files, not standard input \('-'\)"),
    ("empty", "{tmp}/empty.jsonl holds no complete tuning record"),
])
def test_errors_are_one_line_and_exit_2(tmp_path, tasks, capsys, case, match):
    w1, _, _ = _worker_logs(tmp_path, tasks[0])
    (tmp_path / "other.jsonl").write_text("")
    (tmp_path / "empty.jsonl").write_text("")
    args = {"missing": [str(w1), str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "x")],
            "exists": [str(w1), "-o", str(tmp_path / "other.jsonl")],
            "folder": [str(w1), "-o", str(tmp_path / "no" / "all.jsonl")],
            "stdin": ["-", "-o", str(tmp_path / "x")],
            "empty": [str(tmp_path / "empty.jsonl"), "-o", str(tmp_path / "x")]}[case]
    assert main(["merge", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert re.search("looptune merge: error: " + match.format(tmp=re.escape(str(tmp_path))),
                     err), err
    assert not (tmp_path / "x").exists()


def test_merge_needs_an_output(capsys):
    assert main(["merge", "a.jsonl"]) == 2
    assert "the following arguments are required: -o/--output" in capsys.readouterr().err


def test_the_merged_log_is_valid_json_lines(tmp_path, tasks):
    w1, w2, w3 = _worker_logs(tmp_path, tasks[0])
    out = tmp_path / "all.jsonl"
    assert main(["merge", str(w1), str(w2), str(w3), "-o", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert all(json.loads(ln)["task"]["name"] == "matmul" for ln in lines) and len(lines) == 8
