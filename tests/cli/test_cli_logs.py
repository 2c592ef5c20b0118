"""The command line and hostile or odd logs: records that no longer fit the template, malformed
records, several logs, other hosts, --transfer from a template that raises, Ctrl-C, flags."""
from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from looptune.cli import build_parser, main
from looptune.operators import load_operators
from looptune.search import LogWriter, MeasureResult, Record, create_task, load_records

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MATMUL = str(EXAMPLES / "matmul.py")
SMALL = "48,40,24"
ARGS = (48, 40, 24)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("LOOPTUNE_CACHE", str(tmp_path_factory.getbasetemp() / "ltcache"))


@pytest.fixture(scope="module")
def task():
    load_operators(MATMUL)                     # registers the template
    return create_task("matmul", ARGS)


def _rec(task, index: int, costs, kind: str = "measure", **knobs) -> Record:
    cfg = task.config_space.get(index)
    r = Record.from_result(task.key, MeasureResult(cfg, list(costs), flop=task.flop))
    r.kind = kind
    if knobs:
        r.config = {**r.config, "knobs": {**r.config["knobs"], **knobs}}
    return r


def _write(path: Path, recs) -> Path:
    with LogWriter(path) as w:
        for r in recs:
            w.write(r)
    return path


@pytest.fixture
def warnings(caplog):
    """The warnings logged so far (the command prints each as one ``looptune: ...`` line)."""
    caplog.set_level(logging.WARNING)

    def get() -> list[str]:
        out = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        caplog.clear()
        assert all("\n" not in m for m in out), out
        return out
    return get


# ---- records are applied only when they fit the template's knobs ------------------------------

@pytest.mark.slow
def test_show_bench_export_skip_a_record_whose_knobs_changed(task, tmp_path, capsys, warnings):
    log = _write(tmp_path / "l.jsonl", [_rec(task, 5, [1e-6], panel=999),   # the "fastest"
                                        _rec(task, 7, [1e-3])])
    assert main(["show", MATMUL, "--args", SMALL, "--log", str(log), "--steps"]) == 0
    assert "tuned config #7 from" in capsys.readouterr().out
    (warn,) = warnings()
    assert "skipping config 5" in warn and "knobs changed" in warn and "panel: 999" in warn
    assert main(["export", MATMUL, "--args", SMALL, "--log", str(log), "-o",
                 str(tmp_path / "lib")]) == 0
    assert "matmul: tuned config #7 from" in capsys.readouterr().err
    assert main(["bench", MATMUL, "--args", SMALL, "--log", str(log), "--repeat", "1"]) == 0
    assert "tuned #7" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [
    {"config": {"index": 10**9}, "costs": [1e-6]},      # out of range of the space
    {"costs": [-1.0, -1.0]},                            # a negative cost used to win
    {"costs": [0.0]},
    {"costs": ["NaN"]},
    {"task": {"name": "matmul", "args": "48,40,24", "target": "c"}},
])
def test_a_malformed_record_is_skipped_with_one_warning_line(task, tmp_path, capsys, bad,
                                                             warnings):
    good = _rec(task, 7, [1e-3]).to_json()
    log = tmp_path / "l.jsonl"
    log.write_text(json.dumps({**good, **bad}) + "\n" + json.dumps(good) + "\n")
    assert main(["show", MATMUL, "--args", SMALL, "--log", str(log), "--steps"]) == 0
    assert "tuned config #7 from" in capsys.readouterr().out
    assert len(warnings()) == 1


def test_deep_nesting_and_zero_costs_never_crash_report(task, tmp_path, capsys, warnings):
    good = _rec(task, 7, [1e-3]).to_json()
    log = tmp_path / "l.jsonl"
    log.write_text("[" * 100_000 + "]" * 100_000 + "\n"
                   + json.dumps({**good, "costs": [0.0, 0.0]}) + "\n" + json.dumps(good) + "\n")
    assert main(["report", str(log)]) == 0
    out = capsys.readouterr().out
    assert "1 trials, 1 correct" in out and "#7" in out
    warns = warnings()
    assert len(warns) == 2 and "nested deeper" in warns[0] and "positive" in warns[1]


def test_report_reads_standard_input(task, tmp_path, capsys, monkeypatch):
    text = json.dumps(_rec(task, 3, [2e-3]).to_json()) + "\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["report", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<stdin>: matmul(48, 40, 24, 'float32')") and "#3" in out


# ---- several logs -------------------------------------------------------------------------------

def test_several_logs_are_merged_by_the_median_rule(task, tmp_path, capsys):
    one = _write(tmp_path / "one.jsonl", [_rec(task, 5, [1e-3]), _rec(task, 7, [2e-3])])
    two = _write(tmp_path / "two.jsonl", [_rec(task, 5, [4e-3]), _rec(task, 5, [5e-3])])
    picked = {}
    for name, logs in {"one": [one], "two": [two], "both": [one, two]}.items():
        argv = ["show", MATMUL, "--args", SMALL, "--steps"]
        for lg in logs:
            argv += ["--log", str(lg)]
        assert main(argv) == 0
        picked[name] = capsys.readouterr().out.split("config #")[1].split()[0]
    # config 5: 1 ms once in one log, 4 and 5 ms in the other -> median 4 ms; config 7: 2 ms
    assert picked == {"one": "5", "two": "5", "both": "7"}


def test_tune_refuses_several_logs(tmp_path, capsys):
    assert main(["tune", MATMUL, "--args", SMALL, "--log", str(tmp_path / "a.jsonl"),
                 "--log", str(tmp_path / "b.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert "tune writes one log" in err and "\n" not in err


# ---- other hosts ----------------------------------------------------------------------------

def test_records_of_another_host_warn_unless_any_host(task, tmp_path, capsys, warnings):
    r = _rec(task, 6, [1e-3])
    r.host = {**r.host, "cpu": "Imaginary CPU 9000", "march": "imaginary9"}
    log = _write(tmp_path / "l.jsonl", [r])
    assert main(["show", MATMUL, "--args", SMALL, "--log", str(log), "--steps"]) == 0
    (warn,) = warnings()
    assert "was tuned on another host (Imaginary CPU 9000, -march=imaginary9)" in warn
    assert main(["show", MATMUL, "--args", SMALL, "--log", str(log), "--steps",
                 "--any-host"]) == 0
    assert "tuned config #6" in capsys.readouterr().out and warnings() == []


# ---- --transfer from a template that raises on some configs -----------------------------------

FLAKY = '''
    import numpy as np
    import looptune as lt

    NAME = "flaky_add"
    DEFAULT_ARGS = (64,)


    def algorithm(n):
        A = lt.placeholder((n,), "float32", name="A")
        return [A, lt.compute((n,), lambda i: A[i] + 1.0, name="B")]


    def hand_schedule(n):
        A, B = algorithm(n)
        return lt.create_schedule(B), [A, B]


    @lt.template(NAME)
    def template(cfg, n):
        A, B = algorithm(n)
        s = lt.create_schedule(B)
        cfg.define_knob("mode", ["ok", "bad"])
        cfg.define_split("t", B.op.axis[0], num_outputs=2)
        cfg["t"].apply(s, B, B.op.axis[0])
        if cfg["mode"].val == "bad" and n == 48:       # only the other size's bad configs
            raise ValueError("this template cannot do that")
        return s, [A, B]


    def reference(a):
        return a + 1
'''


@pytest.mark.slow
def test_transfer_skips_records_whose_template_raises(tmp_path, capsys, warnings):
    path = tmp_path / "flaky.py"
    path.write_text(textwrap.dedent(FLAKY))
    load_operators(str(path))
    src = create_task("flaky_add", (48,))
    size = src.config_space.size
    recs = [_rec(src, i, [1e-5 * (1 + i)]) for i in range(size)]   # bad ones too (logged by
    log = _write(tmp_path / "src.jsonl", recs)                     # an older template)
    out_log = tmp_path / "out.jsonl"
    assert main(["tune", str(path), "--args", "64", "--tuner", "gbt", "--trials", "3",
                 "--transfer", str(log), "--log", str(out_log), "--number", "1", "--repeat",
                 "1", "--remeasure-top", "0", "--race-rounds", "0"]) == 0
    err = capsys.readouterr().err
    # the transfer's one warning (the contention guard may add its own on a busy machine)
    (warn,) = [w for w in warnings() if "--transfer" in w]
    assert f"--transfer: skipping {size // 2} configs of flaky_add(48,)" in warn
    assert "ValueError: this template cannot do that" in warn
    assert f"the cost model starts from {size // 2} records" in err
    assert len(load_records(out_log)) == 3


# ---- flags ------------------------------------------------------------------------------------

def test_version(capsys):
    import looptune
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"looptune {looptune.__version__}"


def _actions(parser):
    for a in parser._actions:
        if a.choices and isinstance(a.choices, dict):        # the subcommands
            for name, sub in a.choices.items():
                yield from ((f"{name} {b}", act) for b, act in _actions(sub))
        else:
            yield (a.option_strings[-1] if a.option_strings else a.dest), a


def test_every_flag_has_help():
    missing = [name for name, a in _actions(build_parser())
               if not a.help or a.help == "==SUPPRESS=="]
    assert missing == []


@pytest.mark.parametrize("argv, message", [
    (["tune", MATMUL, "--trials", "0"], "argument --trials: must be a positive int; got '0'"),
    (["tune", MATMUL, "--trials", "-5"], "must be a positive int; got '-5'"),
    (["tune", MATMUL, "--trials", "many"], "must be a positive int; got 'many'"),
    (["tune", MATMUL, "--seconds", "0"], "argument --seconds: must be a positive float"),
    (["tune", MATMUL, "--seconds", "inf"], "argument --seconds: must be a positive float"),
    (["tune", MATMUL, "--remeasure-top", "-1"], "must be an integer >= 0"),
    (["tune", MATMUL, "--race-rounds", "-2"], "argument --race-rounds: must be an integer "
                                              ">= 0"),
    (["tune", MATMUL, "--busy-threshold", "-1"], "argument --busy-threshold: must be a number "
                                                 ">= 0; got '-1'"),
    (["tune", MATMUL, "--busy-wait", "nan"], "argument --busy-wait: must be a number >= 0"),
    (["bench", MATMUL, "--repeat", "0"], "argument --repeat: must be a positive int"),
    (["tune", MATMUL, "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_flag_mistakes_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "--help" in err


@pytest.mark.parametrize("flags, rounds", [([], 2), (["--race-rounds", "0"], 0),
                                            (["--race-rounds", "5"], 5)])
def test_race_rounds_reach_the_measure_option(flags, rounds, tmp_path, monkeypatch):
    from looptune.search.tuner import Tuner
    seen = []
    monkeypatch.setattr(Tuner, "tune", lambda self, n, opt, **kw: seen.append(opt))
    main(["tune", MATMUL, "--args", SMALL, "--tuner", "random", "--trials", "1",
          "--log", str(tmp_path / "t.jsonl"), *flags])
    assert [o.race_rounds for o in seen] == [rounds]


@pytest.mark.slow
def test_seconds_alone_is_a_time_budget(tmp_path, capsys):
    log = tmp_path / "t.jsonl"
    t0 = time.monotonic()
    assert main(["tune", MATMUL, "--args", SMALL, "--tuner", "random", "--seconds", "2",
                 "--log", str(log), "--number", "1", "--repeat", "1",
                 "--remeasure-top", "0"]) == 0
    assert time.monotonic() - t0 < 60
    err = capsys.readouterr().err
    assert "2 s with the random tuner" in err
    n = len(load_records(log))
    assert 1 <= n < 128                                       # the space is not exhausted


# ---- Ctrl-C -----------------------------------------------------------------------------------

@pytest.mark.slow
def test_ctrl_c_exits_130_without_the_summary_and_keeps_the_log_whole(tmp_path, caplog):
    log = tmp_path / "int.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "looptune", "tune", MATMUL, "--args", SMALL,
                             "--tuner", "random", "--trials", "120", "--log", str(log),
                             "--number", "1", "--repeat", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    t0 = time.monotonic()
    while not log.exists() or log.read_text().count("\n") < 3:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < 120, "no progress"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "best config" not in out and "interrupted after" in err
    caplog.set_level(logging.WARNING)
    recs = load_records(log)
    assert caplog.records == []                              # every line whole
    assert 3 <= len(recs) < 120 and all(r.kind == "measure" for r in recs)
    assert f"interrupted after {len(recs)} trials" in err
    # stderr is not a terminal: the progress bar wrote one line per trial, no \r
    assert "\r" not in err
    assert sum(ln.startswith("[matmul] [") for ln in err.splitlines()) >= len(recs)
