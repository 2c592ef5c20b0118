"""The looptune command: each subcommand on a small case, and each user error."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from looptune.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MATMUL = str(EXAMPLES / "matmul.py")
SOFTMAX = str(EXAMPLES / "softmax.py")
SMALL = "48,40,24"


@pytest.fixture(scope="module")
def tuned_log(tmp_path_factory):
    log = tmp_path_factory.mktemp("cli") / "mm.jsonl"
    rc = main(["tune", MATMUL, "--args", SMALL, "--tuner", "random", "--trials", "4",
               "--log", str(log), "--number", "1", "--repeat", "2"])
    assert rc == 0
    return log


@pytest.fixture(scope="module")
def matmul_log(tmp_path_factory):
    """A log of four correct records of matmul(48, 40, 24), written directly: what the
    fast tests of show --log, --transfer's errors and another task's log read. (They used
    tuned_log, whose real tune and re-measure took ~9 s; the slow tests here still read
    that one, and tests/cli/test_cli_logs.py reads written logs like this one.)"""
    from looptune.operators import load_operators
    from looptune.search import LogWriter, MeasureResult, Record, create_task
    load_operators(MATMUL)                     # registers the template
    task = create_task("matmul", tuple(int(a) for a in SMALL.split(",")))
    log = tmp_path_factory.mktemp("cli") / "mm_written.jsonl"
    with LogWriter(log) as w:
        for index, cost in ((3, 2.0e-5), (1, 1.5e-5), (7, 3.0e-5), (0, 2.5e-5)):
            res = MeasureResult(task.config_space.get(index), [cost] * 2, flop=task.flop)
            w.write(Record.from_result(task.key, res))
    return log


def _trials(path) -> list[dict]:
    recs = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return [r for r in recs if r["kind"] == "measure"]


@pytest.mark.slow
def test_tune_writes_a_log_and_summary(tuned_log, capsys):
    recs = [json.loads(line) for line in tuned_log.read_text().splitlines()]
    trials = _trials(tuned_log)
    assert len(trials) == 4
    assert all(r["task"]["name"] == "matmul" and r["task"]["args"][:3] == [48, 40, 24]
               for r in recs)
    assert len({r["config"]["index"] for r in trials}) == 4
    again = [r for r in recs if r["kind"] == "remeasure"]
    # races (2 rounds each) while tuning, then the top 3 in 3 rounds
    assert len(again) >= 9 and (len(again) - 9) % 2 == 0
    assert len({r["config"]["index"] for r in again[-9:]}) == 3


@pytest.mark.slow
def test_tune_resume_continues_the_count(tuned_log, capsys):
    rc = main(["tune", MATMUL, "--args", SMALL, "--tuner", "random", "--trials", "6",
               "--log", str(tuned_log), "--resume", "--number", "1", "--repeat", "2"])
    assert rc == 0
    recs = _trials(tuned_log)
    assert len(recs) == 6 and len({r["config"]["index"] for r in recs}) == 6
    out = capsys.readouterr().out
    assert "best config #" in out and "numpy" in out and "fallback" in out
    assert "re-measures)" in out and "interleaved rounds" in out
    for side in ("tuned", "fallback", "numpy"):     # each side: median ms and its spread
        (line,) = [ln for ln in out.splitlines() if ln.split()[:1] == [side]]
        assert line.split()[2] == "ms" and line.split()[3].startswith("±")


def test_show_lowered_source_and_steps(matmul_log, capsys):
    assert main(["show", MATMUL, "--args", SMALL]) == 0
    out = capsys.readouterr().out
    assert "hand schedule" in out and "for " in out and "vectorized" in out
    assert main(["show", MATMUL, "--args", SMALL, "--source"]) == 0
    assert "#pragma omp" in capsys.readouterr().out
    assert main(["show", MATMUL, "--args", SMALL, "--log", str(matmul_log), "--steps"]) == 0
    out = capsys.readouterr().out
    assert "tuned config #" in out and "\ns[C]." in out        # one recorded step a line


@pytest.mark.slow
def test_bench_prints_hand_and_tuned_rows(tuned_log, capsys):
    assert main(["bench", MATMUL, "--args", SMALL, "--log", str(tuned_log),
                 "--repeat", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["operator", "sizes", "schedule", "looptune", "ms", "±",
                                "numpy", "ms", "±", "speedup", "GFLOP/s"]
    rows = [ln.split() for ln in lines[2:4]]
    assert [r[2] for r in rows] == ["hand", "tuned"]
    for r in rows:
        assert r[0] == "matmul" and r[1] == "48x40x24"
        assert float(r[-6]) > 0 and float(r[-4]) > 0 and r[-2].endswith("x")
        assert r[-5].endswith("%") and r[-3].endswith("%")      # spreads of both sides
    assert "medians of 3 interleaved rounds" in lines[4]


@pytest.mark.slow
def test_export_builds_a_library(tmp_path, capsys):
    out = tmp_path / "libops"
    assert main(["export", MATMUL, SOFTMAX, "-o", str(out)]) == 0
    header = (tmp_path / "libops.h").read_text()
    assert "int matmul(" in header and "int softmax(" in header
    for ext in ("so", "a", "c"):
        assert (tmp_path / f"libops.{ext}").stat().st_size > 0


@pytest.mark.opencl
@pytest.mark.slow
def test_export_an_opencl_tuned_operator_runs_from_the_library(opencl, tmp_path, capsys,
                                                               monkeypatch):
    """tune --auto --target opencl, then export --target opencl: the library's function runs
    the tuned kernels through the OpenCL loader and gets numpy's numbers."""
    import ctypes
    import glob
    import os

    import pyopencl as cl
    log, out = tmp_path / "sm.jsonl", tmp_path / "libsm"
    assert main(["tune", SOFTMAX, "--args", "64,96", "--auto", "--target", "opencl",
                 "--tuner", "random", "--trials", "3", "--log", str(log), "--number", "1",
                 "--repeat", "1"]) == 0
    assert main(["export", SOFTMAX, "--args", "64,96", "--log", str(log), "--target",
                 "opencl", "-o", str(out)]) == 0
    assert "softmax: auto-scheduled config #" in capsys.readouterr().err
    header = (tmp_path / "libsm.h").read_text()
    assert "int softmax(const float *x, float *out);" in header
    assert "runs on an OpenCL device" in header
    loader = sorted(glob.glob(os.path.join(os.path.dirname(cl.__file__), ".libs",
                                           "libOpenCL*.so*")))
    if loader:        # pyopencl's own loader (it has PYOPENCL_HOME set, which that one needs)
        monkeypatch.setenv("LOOPTUNE_OPENCL_LIBRARY", loader[0])
    lib = ctypes.CDLL(str(tmp_path / "libsm.so"))
    x = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
    y = np.zeros_like(x)
    ptr = ctypes.POINTER(ctypes.c_float)
    rc = lib.softmax(x.ctypes.data_as(ptr), y.ctypes.data_as(ptr))
    lib.libsm_opencl_error.restype = ctypes.c_char_p
    assert rc == 0, lib.libsm_opencl_error()
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_report_prints_top_configs_and_writes_png(tuned_log, tmp_path, capsys):
    png = tmp_path / "curve.png"
    assert main(["report", str(tuned_log), "-o", str(png), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "trials" in out and "GFLOP/s" in out and "curve written" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["show", "/no/such/file.py"], "no such file: /no/such/file.py"),
    (["show", str(EXAMPLES.parent / "README.md")], "is not a Python file"),
    (["show", str(EXAMPLES.parent / "errors.py")], "has no template here"),
    (["show", MATMUL, "--template", "nope"], "unknown template 'nope'"),
    (["tune", MATMUL, "--args", "12,x-y"], "bad --args '12,x-y'"),
    (["tune", MATMUL, "--args", "1,2,3,4,5,6"], "takes at most"),
    (["tune", MATMUL, "--log", "/no/such/dir/x.jsonl"], "the folder /no/such/dir does not"),
    (["report", "/no/such.jsonl"], "no such log"),
])
def test_user_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


@pytest.mark.slow
def test_tune_gbt_transfers_from_another_size(tuned_log, tmp_path, capsys):
    log = tmp_path / "mm40.jsonl"
    assert main(["tune", MATMUL, "--args", "40,48,32", "--tuner", "gbt", "--trials", "4",
                 "--transfer", str(tuned_log), "--log", str(log), "--number", "1",
                 "--repeat", "2"]) == 0
    err = capsys.readouterr().err
    n = len({r["config"]["index"] for r in _trials(tuned_log)})   # one row per config
    assert f"the cost model starts from {n} records of other tasks" in err
    assert len(_trials(log)) == 4


@pytest.mark.parametrize("extra, message", [
    (["--tuner", "ga"], "the ga tuner has none: add --tuner gbt"),
    (["--tuner", "gbt"], "hold no usable records of other tasks"),   # only its own records
])
def test_transfer_errors(matmul_log, extra, message, tmp_path, capsys):
    assert main(["tune", MATMUL, "--args", SMALL, "--trials", "2", "--transfer",
                 str(matmul_log), "--log", str(tmp_path / "x.jsonl"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in err


def test_transfer_log_must_exist(tmp_path, capsys):
    assert main(["tune", MATMUL, "--args", SMALL, "--tuner", "gbt", "--trials", "2",
                 "--transfer", "/no/such.jsonl", "--log", str(tmp_path / "x.jsonl")]) == 2
    assert "--transfer: no such log: /no/such.jsonl" in capsys.readouterr().err


def test_log_of_another_task(matmul_log, capsys):
    assert main(["show", SOFTMAX, "--log", str(matmul_log)]) == 2
    err = capsys.readouterr().err
    assert "holds no usable correct record of softmax" in err and "matmul" in err


def test_unwritable_export_output(tmp_path, capsys):
    blocker = tmp_path / "f"
    blocker.write_text("x")
    assert main(["export", MATMUL, "-o", str(blocker / "lib")]) == 2
    err = capsys.readouterr().err
    assert "cannot create" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, env, message", [
    (["bench", MATMUL, "--args", "8,8,8"], {"LOOPTUNE_CACHE": "FILE"},
     "BuildError: the build cache"),
    (["bench", MATMUL, "--args", "8,8,8", "--target", "c -cc="], {}, "BuildError"),
])
def test_looptune_errors_are_one_line_with_exit_2(argv, env, message, tmp_path, capsys,
                                                  monkeypatch):
    blocker = tmp_path / "f"
    blocker.write_text("x")
    for k, v in env.items():
        monkeypatch.setenv(k, str(blocker) if v == "FILE" else v)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.slow
def test_python_dash_m_runs_the_command():
    out = subprocess.run([sys.executable, "-m", "looptune", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for cmd in ("tune", "show", "bench", "export", "report"):
        assert cmd in out


@pytest.mark.slow
def test_tune_auto_then_show_and_bench_use_the_auto_log(tmp_path, capsys):
    """--auto tunes a space generated from the algorithm (no template); show and bench
    (and export, through the same lookup) then take the log's auto-scheduled best."""
    log = tmp_path / "auto.jsonl"
    relu = str(EXAMPLES / "matmul_relu.py")
    assert main(["tune", relu, "--args", SMALL, "--auto", "--tuner", "random", "--trials",
                 "4", "--log", str(log), "--number", "1", "--repeat", "2"]) == 0
    recs = _trials(log)
    assert len(recs) == 4 and all(r["task"]["name"].startswith("auto_") for r in recs)
    assert "best config #" in capsys.readouterr().out
    assert main(["show", relu, "--args", SMALL, "--log", str(log)]) == 0
    assert "auto-scheduled config #" in capsys.readouterr().out
    assert main(["bench", relu, "--args", SMALL, "--log", str(log), "--repeat", "3"]) == 0
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines()[2:4]]
    assert [r[2] for r in rows] == ["hand", "auto"]


_SHARED_TILES_OP = '''
import util                  # tests/util.py (on sys.path in the test session)
import looptune as lt

NAME = "mm_shared"
DEFAULT_ARGS = (37, 53, 29)


def algorithm(N, M, K):
    return util.matmul(N, M, K).args


def hand_schedule(N, M, K):
    w = util.matmul(N, M, K)
    return util.shared_tiles(w), w.args


@lt.template(NAME)
def template(cfg, N, M, K):
    return hand_schedule(N, M, K)


def reference(a, b):
    return a @ b
'''


def test_show_prints_the_loop_nest_the_target_compiles(tmp_path, capsys):
    """`show --target opencl` lowers with the target's region hook, as build does: the
    work-group region (threads beside the tiles they share) is not split by tail partitioning
    (without the hook the shared allocations would print twice)."""
    f = tmp_path / "mm_shared.py"
    f.write_text(_SHARED_TILES_OP)
    assert main(["show", str(f), "--target", "opencl"]) == 0
    out = capsys.readouterr().out
    assert out.count("allocate A.shared") == 1, out
