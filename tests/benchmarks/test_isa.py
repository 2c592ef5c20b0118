"""benchmarks/isa.py and ``peers.py --isa avx2``: every system held to AVX2 through its own
switch, each worker checking that its library obeyed (an AVX-512 peer against AVX2 code would
be a false comparison), the floors measured at the same instruction set."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import isa
import peers
from peers import Job

from looptune.backends.compiler import predefined_macros


def _has_avx512() -> bool:
    try:
        return "__AVX512F__" in predefined_macros("gcc", "native")
    except Exception:  # noqa: BLE001 - no x86 gcc: no AVX-512 either
        return False


def _x86() -> None:
    try:
        predefined_macros("gcc", isa.AVX2_MARCH)
    except Exception:  # noqa: BLE001
        pytest.skip("not an x86-64 machine: there is no AVX2 to hold the systems to")


def _in_worker(system: str, env: dict) -> subprocess.CompletedProcess:
    """isa.verify(system, 'avx2') in a fresh process with ``env`` added."""
    code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); import isa; " \
           f"print(isa.verify({system!r}, 'avx2'))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, check=False, timeout=300)


def test_native_sets_nothing_and_avx2_sets_every_switch():
    assert isa.environment("native") == {}
    env = isa.environment("avx2")
    assert env["LOOPTUNE_MARCH"] == "x86-64-v3" and env["OPENBLAS_CORETYPE"] == "Haswell"
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and "avx512" not in env["HL_JIT_TARGET"]
    for name in env.get("NPY_DISABLE_CPU_FEATURES", "").split():
        assert name.startswith("AVX512") or name == "X86_V4"
    with pytest.raises(ValueError, match="isa 'avx512': choose one of native, avx2"):
        isa.environment("avx512")


def test_isa_option_and_unknown_value(capsys):
    assert peers.parse([]).isa == "native"
    assert peers.parse(["--isa", "avx2"]).isa == "avx2"
    with pytest.raises(SystemExit):
        peers.parse(["--isa", "sse"])
    assert "invalid choice: 'sse'" in capsys.readouterr().err


@pytest.mark.parametrize("system", ["numpy", "torch", "halide", "looptune-hand"])
def test_every_job_gets_the_switches_and_its_worker_the_isa(monkeypatch, system):
    seen = {}

    def fake_run(cmd, env, **kw):
        seen.update(env=env, cmd=cmd)
        return subprocess.CompletedProcess(cmd, 0, '{"seconds": 1.0, "note": ""}', "")
    monkeypatch.setattr(peers.subprocess, "run", fake_run)
    peers.run_job(Job("sgemm", system), peers.parse(["--isa", "avx2"]))
    for k, v in isa.environment("avx2").items():
        assert seen["env"][k] == v
    assert seen["cmd"][seen["cmd"].index("--isa") + 1] == "avx2"
    peers.run_job(Job("sgemm", system), peers.parse([]))
    assert seen["cmd"][seen["cmd"].index("--isa") + 1] == "native"


@pytest.mark.parametrize("system", ["numpy", "looptune-hand"])
def test_a_worker_reports_the_isa_it_was_held_to(system):
    _x86()
    proc = _in_worker(system, isa.environment("avx2"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("AVX2 ("), proc.stdout


@pytest.mark.slow
def test_torch_obeys_its_switches_where_it_is_installed():
    _x86()
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                      check=False).returncode != 0:
        pytest.skip("torch is not installed (benchmarks only)")
    proc = _in_worker("torch", isa.environment("avx2"))
    assert proc.returncode == 0 and proc.stdout.startswith("AVX2 (ATen, MKL, oneDNN)"), \
        proc.stdout + proc.stderr
    if _has_avx512():
        proc = _in_worker("torch", {"ATEN_CPU_CAPABILITY": "avx2"})    # MKL's switch missing
        assert "MKL/oneDNN not held to AVX2" in proc.stderr


@pytest.mark.parametrize("system", ["numpy", "looptune-hand"])
def test_a_worker_whose_switch_did_not_take_fails(system):
    if not _has_avx512():
        pytest.skip("on a machine without AVX-512 every system already runs at AVX2 or below")
    proc = _in_worker(system, {"LOOPTUNE_MARCH": "", "NPY_DISABLE_CPU_FEATURES": "",
                               "OPENBLAS_CORETYPE": ""})
    assert proc.returncode != 0
    assert f"{system} was to run at avx2 but runs at" in proc.stderr
    assert "did not take" in proc.stderr


def test_the_worker_times_looptune_at_avx2(monkeypatch):
    """In process: the hand schedule built under LOOPTUNE_MARCH, exact, its note saying so."""
    _x86()
    monkeypatch.setenv("LOOPTUNE_MARCH", isa.AVX2_MARCH)
    peers.parse(["--quick"])
    out = peers.worker(Job("softmax", "looptune-hand", "softmax"), (33, 70), 1, [], True,
                       isa="avx2")
    assert out["seconds"] > 0
    assert "hand schedule; AVX2 (-march=x86-64-v3, 8 float lanes)" in out["note"]
    json.dumps(out)


def test_the_floors_are_measured_at_the_same_isa(monkeypatch):
    _x86()
    monkeypatch.setenv("LOOPTUNE_MARCH", isa.AVX2_MARCH)
    peers.parse(["--quick"])
    out = peers.floors_worker(["sgemm"], 1, rounds=1)
    assert out["lanes"] == 8 and out["fma_gflops"] > 1.0
