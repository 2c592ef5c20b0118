"""Tuning logs: records, crash-safe appends, torn lines, load_best and apply_history_best."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

import looptune as lt
from helpers_templates import tmatmul
from looptune.errors import LooptuneError
from looptune.schedule.steps import dumps
from looptune.search import (ErrorKind, LogWriter, MeasureResult, Record, apply_history_best,
                             create_task, load_best, load_records)
from looptune.search.log import FORMAT_VERSION, rank_configs


def _rec(task, index, cost=None, kind=ErrorKind.NONE, steps=True) -> Record:
    cfg = task.config_space.get(index)
    costs = [] if cost is None else [cost * 1.2, cost, cost * 0.9]
    st = dumps(task.instantiate(cfg)[0].steps) if steps else None
    res = MeasureResult(cfg, costs, kind, "" if kind is ErrorKind.NONE else "boom",
                        0.25, 0.05, steps=st, flop=task.flop)
    return Record.from_result(task.key, res)


@pytest.fixture
def task():
    return create_task("test_matmul", (16, 16, 16))


def _write(path, recs):
    with LogWriter(path) as w:
        for r in recs:
            w.write(r)


def test_record_holds_everything_and_round_trips(tmp_path, task):
    r = _rec(task, 7, 1e-3)
    path = tmp_path / "log.jsonl"
    _write(path, [r])
    obj = json.loads(path.read_text())
    assert obj["v"] == FORMAT_VERSION
    assert obj["task"] == {"name": "test_matmul", "args": [16, 16, 16, "float32"], "target": "c"}
    assert obj["config"]["index"] == 7
    assert set(obj["config"]["knobs"]) == set(task.config_space.knobs)
    assert obj["costs"] == pytest.approx([1.2e-3, 1e-3, 0.9e-3]) and obj["cost"] == 1e-3
    assert obj["error"] == "none" and obj["error_msg"] == ""
    assert obj["build_time"] == 0.25 and obj["run_time"] == 0.05
    assert obj["version"] == lt.__version__ and obj["timestamp"].endswith("+00:00")
    assert {"hostname", "cpu", "ncpu"} <= set(obj["host"])
    assert obj["gflops"] == pytest.approx(2 * 16 ** 3 / 1e-3 / 1e9)
    (back,) = load_records(path)
    assert back.task == task.key and back.config == r.config and back.costs == r.costs
    assert back.to_result(task.config_space).config == task.config_space.get(7)


def test_each_record_is_one_flushed_line(tmp_path, task):
    path = tmp_path / "log.jsonl"
    w = LogWriter(path)
    for k in range(3):
        w.write(_rec(task, k, 1e-3))
        assert path.read_text().count("\n") == k + 1       # visible before close
    w.close()


def test_torn_last_line_is_ignored_and_appends_start_a_new_line(tmp_path, task, caplog):
    path = tmp_path / "log.jsonl"
    _write(path, [_rec(task, 1, 2e-3), _rec(task, 2, 1e-3)])
    whole = path.read_bytes()
    path.write_bytes(whole + whole.splitlines()[0][:37])           # a kill mid-write
    caplog.set_level(logging.WARNING, logger="looptune.search")
    assert [r.index for r in load_records(path)] == [1, 2]
    assert any("torn last line" in m.getMessage() for m in caplog.records)
    _write(path, [_rec(task, 3, 3e-3)])
    assert [r.index for r in load_records(path)] == [1, 2, 3]
    assert path.read_bytes().startswith(whole)


def test_malformed_middle_lines_are_skipped(tmp_path, task, caplog):
    path = tmp_path / "log.jsonl"
    good = json.dumps(_rec(task, 4, 1e-3).to_json())
    future = json.dumps({**json.loads(good), "v": FORMAT_VERSION + 1})
    path.write_text("\n".join([good, "{not json", future, "", good]) + "\n")
    caplog.set_level(logging.WARNING, logger="looptune.search")
    assert [r.index for r in load_records(path)] == [4, 4]
    msgs = " ".join(m.getMessage() for m in caplog.records)
    assert "malformed line 2" in msgs and "malformed line 3" in msgs


def test_load_best_is_the_fastest_correct_record_of_the_task(tmp_path, task):
    other = create_task("test_matmul", (8, 8, 8))
    path = tmp_path / "log.jsonl"
    _write(path, [_rec(task, 1, 3e-3), _rec(task, 2, 1e-3),
                  _rec(task, 3, 1e-6, ErrorKind.WRONG_RESULT),   # fast but wrong
                  _rec(task, 4, None, ErrorKind.CRASH),
                  _rec(other, 5, 1e-7)])
    best = load_best(path, task)
    assert best.index == 2 and best.cost == 1e-3
    assert load_best(path, other).index == 5
    assert load_best(path, create_task("test_matmul", (4, 4, 4))) is None
    assert len(load_records(path, task)) == 4


def _run(s, tensors, n):
    f = lt.build(s, tensors)
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    c = np.zeros((n, n), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_apply_history_best_uses_the_best_record(tmp_path, task):
    path = tmp_path / "log.jsonl"
    recs = [_rec(task, 11, 3e-3), _rec(task, 2222, 1e-3),
            _rec(task, 33, 5e-5, ErrorKind.WRONG_RESULT)]
    _write(path, recs)
    with apply_history_best(path) as ctx:
        s, tensors = tmatmul(16, 16, 16)
    assert [(k, c.index) for k, c in ctx.applied] == [(task.key, 2222)]
    assert dumps(s.steps) == recs[1].steps
    _run(s, tensors, 16)


def test_apply_history_best_without_a_record_falls_back_and_names_the_task(tmp_path, task,
                                                                          caplog):
    path = tmp_path / "log.jsonl"
    _write(path, [_rec(task, 5, 1e-3)])
    caplog.set_level(logging.WARNING, logger="looptune.search")
    with apply_history_best(path, target="c") as ctx:
        s, tensors = tmatmul(12, 12, 12)
    assert ctx.applied == []
    msgs = [m.getMessage() for m in caplog.records]
    assert any("test_matmul(12, 12, 12, 'float32') target='c'" in m and "fallback" in m
               for m in msgs)
    assert [st.args[1] for st in s.steps if st.primitive == "split"] == [1, 1, 1]
    _run(s, tensors, 12)


def test_apply_history_best_targets(tmp_path, task):
    path = tmp_path / "log.jsonl"
    t2 = create_task("test_matmul", (16, 16, 16), target="c -threads=2")
    _write(path, [_rec(task, 5, 1e-3), _rec(t2, 6, 1e-3)])
    with apply_history_best(path, target="c -threads=2") as ctx:
        tmatmul(16, 16, 16)
    assert ctx.applied[0][1].index == 6
    with pytest.raises(LooptuneError, match="several targets"):
        with apply_history_best(path):
            tmatmul(16, 16, 16)


def test_apply_history_best_skips_records_whose_knobs_changed(tmp_path, task, caplog):
    path = tmp_path / "log.jsonl"
    stale = _rec(task, 8, 1e-4)
    stale.config = {**stale.config, "knobs": {**stale.config["knobs"], "parallel": "maybe"}}
    _write(path, [stale, _rec(task, 9, 2e-3)])
    caplog.set_level(logging.WARNING, logger="looptune.search")
    with apply_history_best(path) as ctx:
        tmatmul(16, 16, 16)
    assert ctx.applied[0][1].index == 9
    assert any("knobs changed" in m.getMessage() for m in caplog.records)


def test_apply_history_best_warns_when_steps_differ(tmp_path, task, caplog):
    path = tmp_path / "log.jsonl"
    r = _rec(task, 10, 1e-3)
    r.steps = "[]"
    _write(path, [r])
    caplog.set_level(logging.WARNING, logger="looptune.search")
    with apply_history_best(path):
        tmatmul(16, 16, 16)
    assert any("differ from the logged ones" in m.getMessage() for m in caplog.records)


def test_contexts_nest_and_unwind(tmp_path, task):
    p1, p2 = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write(p1, [_rec(task, 1, 1e-3)])
    _write(p2, [_rec(task, 2, 1e-3)])
    with apply_history_best(p1) as outer:
        with apply_history_best(p2) as inner:
            tmatmul(16, 16, 16)
        tmatmul(16, 16, 16)
    assert [c.index for _, c in inner.applied] == [2]
    assert [c.index for _, c in outer.applied] == [1]


# ---- malformed records: each skipped with one warning line -----------------------------------

def _good(task, index=4, cost=1e-3) -> dict:
    return _rec(task, index, cost).to_json()


def _bad_variants(good: dict) -> dict[str, str]:
    def edit(**kw) -> str:
        return json.dumps({**good, **kw})
    return {
        "negative cost": edit(costs=[1e-3, -5e-4, 1e-3]),
        "zero cost": edit(costs=[0.0, 0.0]),
        "NaN cost": edit(costs=[float("nan")]),
        "infinite cost": edit(costs=[float("inf")]),
        "string cost": edit(costs=["fast"]),
        "bool cost": edit(costs=[True]),
        "costs not a list": edit(costs=0.001),
        "correct without costs": edit(costs=[]),
        "negative index": edit(config={**good["config"], "index": -3}),
        "index a string": edit(config={**good["config"], "index": "7"}),
        "index a bool": edit(config={**good["config"], "index": True}),
        "knobs a list": edit(config={"index": 4, "knobs": [1, 2]}),
        "task a list": edit(task=["test_matmul"]),
        "args a string": edit(task={**good["task"], "args": "16,16,16"}),
        "args holding an object": edit(task={**good["task"], "args": [{"a": 1}]}),
        "target a number": edit(task={**good["task"], "target": 3}),
        "unknown error kind": edit(error="meh"),
        "negative build time": edit(build_time=-1),
        "host a list": edit(host=["x"]),
        "steps a number": edit(steps=5),
        "unknown kind": edit(kind="guess"),
        "not an object": json.dumps([good]),
        "deep nesting": "[" * 200_000 + "]" * 200_000,
        "deep nesting in args": json.dumps({**good, "task": {**good["task"], "args": []}},
                                           separators=(",", ":"))
        .replace('"args":[]', '"args":' + "[" * 200_000 + "]" * 200_000),
    }


def test_every_malformed_record_is_skipped_with_one_warning_line(tmp_path, task, caplog):
    good = _good(task)
    bad = _bad_variants(good)
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join([json.dumps(good), *bad.values(), json.dumps(good)]) + "\n")
    caplog.set_level(logging.WARNING, logger="looptune.search")
    recs = load_records(path)
    assert [r.index for r in recs] == [4, 4]
    msgs = [m.getMessage() for m in caplog.records]
    assert len(msgs) == len(bad)                       # one warning per bad line
    for n, (name, msg) in enumerate(zip(bad, msgs), 2):
        assert f"malformed line {n} " in msg, name
        assert "\n" not in msg and len(msg) < 400, name


def test_a_negative_cost_never_wins(tmp_path, task):
    path = tmp_path / "log.jsonl"
    cheat = {**_good(task, 9), "costs": [-1.0, -1.0, -1.0]}
    path.write_text(json.dumps(cheat) + "\n" + json.dumps(_good(task, 3, 2e-3)) + "\n")
    assert load_best(path, task).index == 3
    with apply_history_best(path) as ctx:
        tmatmul(16, 16, 16)
    assert ctx.applied[0][1].index == 3


def test_out_of_range_index_is_skipped_by_load_best_and_apply_best(tmp_path, task, caplog):
    path = tmp_path / "log.jsonl"
    huge = {**_good(task, 1, 1e-6), "config": {"index": task.config_space.size + 5}}
    path.write_text(json.dumps(huge) + "\n" + json.dumps(_good(task, 3, 2e-3)) + "\n")
    caplog.set_level(logging.WARNING, logger="looptune.search")
    assert load_best(path, task).index == 3
    with apply_history_best(path) as ctx:
        tmatmul(16, 16, 16)
    assert ctx.applied[0][1].index == 3
    msgs = [m.getMessage() for m in caplog.records]
    assert sum(f"skipping config {task.config_space.size + 5}" in m and "out of range" in m
               for m in msgs) == 2


def test_records_load_from_a_stream(task):
    import io
    text = json.dumps(_good(task, 6)) + "\n{broken\n"
    recs = load_records(io.StringIO(text))
    assert [r.index for r in recs] == [6]


# ---- the rule for "best": the median over a config's records -----------------------------------

def _with_costs(task, index, cost_list, kind="measure"):
    out = []
    for c in cost_list:
        r = _rec(task, index, c)
        r.kind = kind
        out.append(r)
    return out


def test_best_is_the_median_over_a_configs_records_not_its_luckiest(tmp_path, task):
    path = tmp_path / "log.jsonl"
    lucky = _with_costs(task, 1, [1e-3, 3e-3, 3.1e-3])      # min 1e-3, median 3e-3
    steady = _with_costs(task, 2, [2e-3, 2.1e-3])           # median 2.05e-3
    _write(path, lucky + steady)
    best = load_best(path, task)
    assert best.index == 2 and best.cost == pytest.approx(2.05e-3)
    ranked = rank_configs(load_records(path))
    assert [r.index for r in ranked] == [2, 1]
    assert ranked[1].costs == pytest.approx([1e-3, 3e-3, 3.1e-3])
    with apply_history_best(path) as ctx:
        tmatmul(16, 16, 16)
    assert ctx.applied[0][1].index == 2


def test_remeasured_configs_rank_before_configs_measured_once(tmp_path, task):
    path = tmp_path / "log.jsonl"
    once = _with_costs(task, 5, [1e-3])                     # never confirmed
    confirmed = _with_costs(task, 6, [2e-3]) + _with_costs(task, 6, [2.2e-3, 2.1e-3],
                                                           "remeasure")
    _write(path, once + confirmed)
    best = load_best(path, task)
    assert best.index == 6 and best.kind == "remeasure"
    # the median of its re-measures: its one search timing (biased fast, hence re-measured)
    # no longer counts
    assert best.costs == [2.2e-3, 2.1e-3] and best.cost == pytest.approx(2.15e-3)


def test_a_lucky_first_timing_does_not_outweigh_lost_re_measures(tmp_path, task):
    """Config 2 timed 0.8 ms once (that is why it was raced), then lost both rounds of its
    race against config 1 (1.1 and 1.05 against 1.0 and 1.0). Counting its first timing its
    median would be 1.05 against config 1's 1.0... and with one more lucky first timing it
    would win; without, it loses on what was compared in turns."""
    path = tmp_path / "log.jsonl"
    _write(path, _with_costs(task, 1, [1.2e-3]) + _with_costs(task, 2, [0.8e-3])
           + _with_costs(task, 1, [1.0e-3], "remeasure") + _with_costs(task, 2, [1.1e-3],
                                                                      "remeasure")
           + _with_costs(task, 1, [1.04e-3], "remeasure") + _with_costs(task, 2, [1.05e-3],
                                                                       "remeasure"))
    ranked = rank_configs(load_records(path, task))
    assert [r.index for r in ranked] == [1, 2]
    assert ranked[0].cost == pytest.approx(1.02e-3) and ranked[1].cost == pytest.approx(1.075e-3)


def test_a_config_that_was_ever_wrong_is_never_best(tmp_path, task):
    path = tmp_path / "log.jsonl"
    _write(path, _with_costs(task, 7, [1e-4]) + [_rec(task, 7, 1e-4, ErrorKind.WRONG_RESULT)]
           + _with_costs(task, 8, [1e-3]))
    assert load_best(path, task).index == 8


# ---- hosts --------------------------------------------------------------------------------

def test_records_carry_cpu_march_and_compiler(task):
    host = _rec(task, 1, 1e-3).host
    assert host["cpu"] and host["march"] and host["march"] != "native"
    assert host["cc"] == "gcc" and "gcc" in host["cc_version"].lower()


def _elsewhere(rec: Record) -> Record:
    rec.host = {**rec.host, "cpu": "Imaginary CPU 9000", "march": "imaginary9"}
    return rec


def test_records_of_another_host_are_never_applied_silently(tmp_path, task, caplog):
    path = tmp_path / "log.jsonl"
    _write(path, [_elsewhere(_rec(task, 1, 1e-5)), _rec(task, 2, 1e-3)])
    caplog.set_level(logging.WARNING, logger="looptune.search")
    assert load_best(path, task).index == 2                    # this host's record
    assert "ignoring 1 records measured on another host (Imaginary CPU 9000, " \
           "-march=imaginary9)" in caplog.text
    caplog.clear()
    assert load_best(path, task, any_host=True).index == 1     # ranked together, silently
    assert caplog.text == ""
    only = tmp_path / "only.jsonl"
    _write(only, [_elsewhere(_rec(task, 3, 1e-3))])
    with apply_history_best(only) as ctx:
        tmatmul(16, 16, 16)
    assert ctx.applied[0][1].index == 3
    assert "was tuned on another host (Imaginary CPU 9000" in caplog.text
