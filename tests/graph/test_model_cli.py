"""``looptune compile MODEL.onnx`` and ``looptune bench MODEL.onnx``: the library, tuning with
one log and --resume (also after kill -9), the benchmark table, and one clear line (exit 2) for
every mistake."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import models  # tests/graph/models.py: the ONNX test models
import numpy as np
import onnx
import pytest
from graph_util import kill_9_when
from looptune.cli import main
from onnx import TensorProto, helper

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def residual_onnx(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("onnx") / "residual.onnx"
    onnx.save(models.residual(batch=1, channels=4, size=6), path)
    return path


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(capsys, command: str, *argv) -> str:
    rc, out, err = _run(capsys, command, *argv)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1 and lines[0].startswith(f"looptune {command}: error: "), err
    return lines[0]


@pytest.mark.slow
def test_compile_writes_the_library_and_the_memory_report(residual_onnx, tmp_path, capsys):
    rc, out, err = _run(capsys, "compile", residual_onnx, "-o", tmp_path / "build" / "libres",
                        "--memory")
    assert rc == 0, err
    paths = [Path(p) for p in out.splitlines() if p.startswith(str(tmp_path))]
    assert sorted(p.suffix for p in paths) == [".a", ".c", ".h", ".so"]
    assert all(p.exists() for p in paths)
    assert "int res_run(const float *x, float *y);" in (tmp_path / "build" / "libres.h"
                                                        ).read_text()
    assert "memory: arena" in out and "for every intermediate in its own buffer" in out
    assert "fallback schedules" in err


# ---- mistakes: one line, exit 2 ----------------------------------------------------------------

def _unsupported(tmp_path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("HardMax2000", ["r"], ["y"], domain="")]
    m = helper.make_model(helper.make_graph(nodes, "bad", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "unsupported.onnx"
    onnx.save(m, path)
    return path


def _symbolic(tmp_path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "sym",
                                            [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "symbolic.onnx"
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("command", ["compile", "bench"])
def test_model_file_mistakes(command, tmp_path, capsys):
    out = ["-o", tmp_path / "libx"] if command == "compile" else []
    line = _one_line_error(capsys, command, tmp_path / "missing.onnx", *out)
    assert "no such file" in line
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    assert "is not a readable ONNX model" in _one_line_error(capsys, command,
                                                              tmp_path / "junk.onnx", *out)
    line = _one_line_error(capsys, command, _unsupported(tmp_path), *out)
    assert "does not support: HardMax2000 (1)" in line
    line = _one_line_error(capsys, command, _symbolic(tmp_path), *out)
    assert "'x'" in line and "--shape" in line
    line = _one_line_error(capsys, command, _symbolic(tmp_path), "--shape", "x=2", *out)
    assert "rank 1" in line and "rank 2" in line


def test_compile_with_a_shape_for_a_symbolic_input(tmp_path, capsys):
    rc, _, err = _run(capsys, "compile", _symbolic(tmp_path), "--shape", "x=5,3", "-o",
                        tmp_path / "libsym")
    assert rc == 0, err
    assert "int sym_run(const float *x, float *y);" in (tmp_path / "libsym.h").read_text()


@pytest.mark.parametrize("args, match", [
    (["--trials", "5"], "--trials: only with --tune"),
    (["--resume"], "--resume: only with --tune"),
    (["--tune", "--trials", "0"], "--trials must be a positive int; got 0"),
    (["--tune", "--seconds", "-1"], "--seconds must be a positive number; got -1"),
    (["--tune", "--log", "a.jsonl", "--log", "b.jsonl"], "--tune writes one log"),
    (["--tune", "--log", "nofolder/x.jsonl"], "the folder nofolder does not exist"),
    (["--log", "nolog.jsonl"], "--log: no such tuning log: nolog.jsonl"),
])
def test_compile_option_mistakes(residual_onnx, tmp_path, capsys, monkeypatch, args, match):
    monkeypatch.chdir(tmp_path)
    line = _one_line_error(capsys, "compile", residual_onnx, "-o", "libr", *args)
    assert match in line


def test_compile_output_is_a_folder(residual_onnx, tmp_path, capsys):
    line = _one_line_error(capsys, "compile", residual_onnx, "-o", tmp_path)
    assert "it is a folder" in line


def _npz(tmp_path, **arrays) -> Path:
    path = tmp_path / "inputs.npz"
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("arrays, match", [
    (dict(z=np.zeros((1, 4, 6, 6), "float32")), "no array for input 'x' (the file holds: z)"),
    (dict(x=np.zeros((1, 4, 6, 5), "float32")),
     "input 'x' has shape (1, 4, 6, 5); the model declares (1, 4, 6, 6)"),
    (dict(x=np.zeros((1, 4, 6, 6), "float64")),
     "input 'x' has dtype float64; the model declares float32"),
    (dict(x=np.zeros((1, 4, 6, 6), "float32"), w=np.zeros(3)), "arrays w are not inputs"),
])
def test_bench_inputs_mistakes(residual_onnx, tmp_path, capsys, arrays, match):
    line = _one_line_error(capsys, "bench", residual_onnx, "--inputs", _npz(tmp_path, **arrays))
    assert match in line


def test_bench_option_mistakes(residual_onnx, tmp_path, capsys):
    assert "--inputs: no such file" in _one_line_error(capsys, "bench", residual_onnx,
                                                       "--inputs", tmp_path / "no.npz")
    assert "--threads must be a positive int; got 0" in _one_line_error(
        capsys, "bench", residual_onnx, "--threads", "0")
    assert "one ONNX model at a time; got 2 files" in _one_line_error(
        capsys, "bench", residual_onnx, residual_onnx)
    assert "--log: no such tuning log" in _one_line_error(
        capsys, "bench", residual_onnx, "--log", tmp_path / "none.jsonl")


# ---- tuning and benchmarking (slow) ------------------------------------------------------------

def _measures(log: Path) -> list[dict]:
    out = []
    for ln in log.read_bytes().split(b"\n"):
        try:
            rec = json.loads(ln)
        except ValueError:
            continue
        if rec.get("kind", "measure") == "measure":
            out.append(rec)
    return out


@pytest.mark.slow
def test_compile_tune_then_resume(residual_onnx, tmp_path, capsys):
    # 4 trials, then resumed to 6 (was 8 and 10): one round per task of the model's 4, and
    # the resume's rounds go on from the log; test_tune.py tunes past the warm-up rounds
    log = tmp_path / "res.jsonl"
    lib = tmp_path / "libres"
    rc, _, err = _run(capsys, "compile", residual_onnx, "--tune", "--trials", "4", "--log",
                        log, "-o", lib)
    assert rc == 0, err
    assert len(_measures(log)) == 4
    rounds = [ln for ln in err.splitlines() if ln.startswith("[residual] round ")]
    assert rounds and all("model est." in ln for ln in rounds)
    assert "estimated model latency" in err and "log schedules" in err
    line = _one_line_error(capsys, "compile", residual_onnx, "--tune", "--trials", "4",
                           "--log", log, "-o", lib)
    assert "already holds 4 measurements" in line and "--resume" in line
    rc, _, err = _run(capsys, "compile", residual_onnx, "--tune", "--trials", "6", "--log",
                        log, "--resume", "-o", lib)
    assert rc == 0, err
    recs = _measures(log)
    assert len(recs) == 6
    assert len({(r["task"]["name"], r["config"]["index"]) for r in recs}) == 6


@pytest.mark.slow
def test_compile_tune_killed_and_resumed_loses_nothing(residual_onnx, tmp_path):
    log, lib = tmp_path / "k.jsonl", tmp_path / "libk"
    cmd = [sys.executable, "-m", "looptune", "compile", str(residual_onnx), "--tune",
           "--trials", "8", "--log", str(log), "-o", str(lib)]       # killed after 4 of 8
    kill_9_when(cmd, lambda: log.exists() and len(_measures(log)) >= 4)
    before = _measures(log)
    assert 4 <= len(before) < 8
    done = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    after = _measures(log)
    assert after[:len(before)] == before
    assert len(after) == 8
    assert len({(r["task"]["name"], r["config"]["index"]) for r in after}) == 8
    assert Path(str(lib) + ".so").exists()


@pytest.mark.slow
def test_bench_prints_the_table_against_onnxruntime(residual_onnx, tmp_path, capsys):
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype("float32")
    rc, out, err = _run(capsys, "bench", residual_onnx, "--repeat", "2", "--inputs",
                        _npz(tmp_path, x=x))
    assert rc == 0, err
    rows = {ln.split("  ")[0].strip() for ln in out.splitlines()}
    assert {"looptune", "looptune (python)", "onnxruntime"} <= rows
    assert "vs onnxruntime" in out and "per kernel" in out
    diff = float(out.split("max abs difference ")[1].split()[0])
    assert diff < 1e-4


def _relu_model(tmp_path):
    """A one-Relu ONNX model saved in ``tmp_path``: (its path, its compiled model)."""
    import looptune as lt
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path, lt.graph.compile(lt.graph.from_onnx(str(path)))


def test_bench_runs_the_peers_with_their_own_thread_pool_settings(tmp_path, monkeypatch):
    """The looptune workers get looptune's OpenMP spin; ONNX Runtime and the extra systems
    (torch) get their libraries' own (runtime_env.peer_environment), not looptune's."""
    from looptune.graph import model_bench as mb
    path, model = _relu_model(tmp_path)
    envs = {}

    class Stop(Exception):
        pass

    class Recorder:
        def __init__(self, name, spec, env, workdir, script=None):
            envs[name] = env

        def read(self):
            raise Stop

        def close(self):
            pass
    monkeypatch.setattr(mb, "_Worker", Recorder)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    monkeypatch.setenv("LOOPTUNE_OPENMP_DEFAULTS", "1")
    with pytest.raises(Stop):
        mb.bench_model(path, model, {"x": np.ones(4, np.float32)}, rounds=1, threads=1,
                       workdir=tmp_path, extra={"torch eager": ("worker.py", {})})
    assert envs[mb.LIB]["GOMP_SPINCOUNT"] == envs[mb.PY]["GOMP_SPINCOUNT"] == "10000"
    assert envs[mb.ORT]["GOMP_SPINCOUNT"] == envs["torch eager"]["GOMP_SPINCOUNT"] == "300000"
    assert all(e["OMP_NUM_THREADS"] == "1" for e in envs.values())


def test_bench_lets_the_previous_systems_threads_settle_before_each_block(tmp_path,
                                                                          monkeypatch):
    """Before every timed block the harness pauses (SETTLE_S) and asks for WARMUP_S of
    untimed calls: the systems keep their cyclic order from round to round, so without the
    pause one system always ran right after another's spinning threads."""
    from looptune.graph import model_bench as mb
    path, model = _relu_model(tmp_path)
    events = []

    class Scripted:
        def __init__(self, name, spec, env, workdir, script=None):
            self.name = name

        def read(self):
            return {"ready": True, "number": 1, "rss0": 0}

        def ask(self, cmd, **kw):
            events.append((self.name, cmd, kw))
            return {"t": 1e-3, "rss": 0}

        def close(self):
            pass
    monkeypatch.setattr(mb, "_Worker", Scripted)
    monkeypatch.setattr(mb.time, "sleep", lambda s: events.append(("sleep", s)))
    res = mb.bench_model(path, model, {"x": np.ones(4, np.float32)}, rounds=2, threads=1,
                         workdir=tmp_path, systems=(mb.LIB, mb.PY), kernels=False)
    timed = [e for e in events if e[0] == "sleep" or e[1] == "time"]
    want_round = [("sleep", mb.SETTLE_S), (mb.LIB, "time", {"warmup_s": mb.WARMUP_S}),
                  ("sleep", mb.SETTLE_S), (mb.PY, "time", {"warmup_s": mb.WARMUP_S})]
    assert timed[:4] == want_round
    assert timed[4:] == want_round[2:] + want_round[:2]      # the next round rotated
    assert mb.SETTLE_S >= 0.1 and len(res.systems[mb.LIB].times) == 2


def test_bench_worker_warms_up_for_the_time_asked():
    from looptune.graph import _bench_worker as bw
    calls = []
    t = bw._block(lambda: calls.append(1), 3, warmup_s=0.05)
    assert t >= 0 and len(calls) > 4            # one call, 50 ms of them, then the 3 timed
    calls.clear()
    bw._block(lambda: calls.append(1), 3)
    assert len(calls) == 4


@pytest.mark.slow
def test_compile_no_winograd_keeps_the_direct_convolution(tmp_path, capsys):
    """A 3x3 stride-1 Conv of 32 channels: its exported kernel is the Winograd one by
    default, the direct one with --no-winograd."""
    from onnx import numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) / 17).astype("float32"),
                                "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                          "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              [1, 32, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [1, 32, 8, 8])], [w])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    sources = {}
    for flag in ([], ["--no-winograd"]):
        out = tmp_path / ("libdirect" if flag else "libwino")
        rc, _, err = _run(capsys, "compile", path, "-o", out, *flag)
        assert rc == 0, err
        sources[bool(flag)] = (tmp_path / (out.name + ".c")).read_text()
    assert "winogradnchwc" in sources[False] and "winogradnchwc" not in sources[True]
    assert "convnchwc" in sources[True]
