"""Export targets: a library for one x86-64 level holds no newer instruction; a multi-target
library runs, from a plain C program, the best variant the CPU supports and numpy's numbers."""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import types
from pathlib import Path

import numpy as np
import pytest

import looptune as lt
from looptune.cli import main
from looptune.operators import load_operators
from looptune.search import LogWriter, MeasureResult, Record, create_task

from built_kernels import built_axpy, built_matmul

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the x86-64 levels need an x86-64 host")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
N = 37                     # odd: vector loops with tails


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("LOOPTUNE_CACHE", str(tmp_path_factory.getbasetemp() / "ltcache"))


def _vadd(factor: int = 8, n=None):
    """``vadd``: Z = exp(X) * 2 + Y (a math call in the vector loop)."""
    return built_axpy(unary=lt.exp, factor=factor, n=n)


def _cpu_level() -> int:
    """This CPU's x86-64 psABI level from /proc/cpuinfo (as the library's cpuid check)."""
    with open("/proc/cpuinfo") as f:
        flags = set(next(ln for ln in f if ln.startswith("flags")).split(":")[1].split())
    levels = [{"pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "lahf_lm"},
              {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"},
              {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}]
    level = 1
    for need in levels:
        if not need <= flags:
            break
        level += 1
    return level


_NOT_AVX = re.compile(r"vm(call|launch|resume|xoff|xon|read|write|ptrld|ptrst|clear|func)|ver[rw]")


def _avx_instructions(path: Path, symbol: str | None = None) -> list[str]:
    """The instructions of ``path`` (of ``symbol`` only, if given) that need AVX: ymm/zmm
    registers or a VEX/EVEX-encoded (v-prefixed) mnemonic."""
    sym = [f"--disassemble={symbol}"] if symbol else ["-d"]
    out = subprocess.run(["objdump", *sym, "--no-show-raw-insn", str(path)], check=True,
                         capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0].strip().endswith(":"):
            continue
        insn = parts[1].strip()
        mnemonic = insn.split()[0] if insn else ""
        if re.search(r"%[yz]mm", insn) or (mnemonic.startswith("v")
                                           and not _NOT_AVX.match(mnemonic)):
            found.append(insn)
    return found


def _inputs():
    x = (np.arange(N, dtype=np.float32) % 7) * 0.25 - 0.5
    y = np.arange(N, dtype=np.float32) * 3.0
    a = ((np.arange(13 * 7) % 5) - 2).astype(np.float32).reshape(13, 7)
    b = ((np.arange(7 * 21) % 3) * 0.5).astype(np.float32).reshape(7, 21)
    return x, y, a, b


C_MAIN = r"""
#include "HEADER"
#include <stdio.h>
int main(void) {
  float x[37], y[37], z[37], a[13 * 7], b[7 * 21], c[13 * 21];
  for (int i = 0; i < 37; ++i) { x[i] = (float)(i % 7) * 0.25f - 0.5f; y[i] = 3.0f * i; }
  for (int i = 0; i < 13 * 7; ++i) a[i] = (float)(i % 5) - 2.0f;
  for (int i = 0; i < 7 * 21; ++i) b[i] = (float)(i % 3) * 0.5f;
  QUERY
  int r1 = vadd(x, y, z, 37), r2 = mm(a, b, c);
  printf("%d %d\n", r1, r2);
  for (int i = 0; i < 37; ++i) printf("%.9g ", z[i]);
  printf("\n");
  for (int i = 0; i < 13 * 21; ++i) printf("%.9g ", c[i]);
  printf("\n");
  return 0;
}
"""


def _program(paths: dict, tmp_path: Path, link: str, query: str | None) -> Path:
    """A C program linking the library (shared or static) that prints the chosen level
    (``query``: the library's query function), the return codes and both results."""
    q = f'const char *t = {query}(); printf("%s\\n", t ? t : "none");' if query else ""
    src = tmp_path / f"main_{link}.c"
    src.write_text(C_MAIN.replace("HEADER", paths["h"].name).replace("QUERY", q))
    exe = tmp_path / f"app_{link}"
    lib = ["-L", str(paths["so"].parent), "-l" + paths["so"].stem[3:],
           f"-Wl,-rpath,{paths['so'].parent}"] if link == "shared" else \
        [str(paths["a"]), "-fopenmp", "-lmvec", "-lm"]
    subprocess.run(["gcc", "-o", str(exe), str(src), "-I", str(paths["h"].parent), *lib],
                   check=True)
    return exe


def _run_and_check(exe: Path, env_cap: str | None) -> str | None:
    """Run ``exe`` (with $LOOPTUNE_MAX_MARCH=env_cap); check its numbers against numpy;
    the level it reported (None without a query line)."""
    env = {k: v for k, v in os.environ.items() if k != "LOOPTUNE_MAX_MARCH"}
    if env_cap is not None:
        env["LOOPTUNE_MAX_MARCH"] = env_cap
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True,
                           env=env).stdout.strip().splitlines()
    level = lines.pop(0) if len(lines) == 4 else None
    if lines[0] == "2 2":                  # no variant runs on this CPU under this cap
        return level
    assert lines[0] == "0 0", lines[0]
    x, y, a, b = _inputs()
    np.testing.assert_allclose(np.array(lines[1].split(), np.float32), np.exp(x) * 2 + y,
                               rtol=2e-6)
    np.testing.assert_allclose(np.array(lines[2].split(), np.float32).reshape(13, 21), a @ b,
                               rtol=1e-6)
    return level


@pytest.fixture(scope="module")
def objdump():
    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed")


@pytest.mark.slow
def test_x86_64_v2_export_holds_no_avx_instruction(tmp_path, objdump):
    paths = lt.export_library([_vadd(), built_matmul()], tmp_path / "libv2", march="x86-64-v2")
    for p in (paths["so"], paths["a"]):
        assert _avx_instructions(p) == []
    header = paths["h"].read_text()
    assert "Target: -march=x86-64-v2: runs on x86-64 CPUs with SSE4.2 and POPCNT" in header
    assert "gcc -O3 -march=x86-64-v2 -fPIC" in header and "native" not in header
    assert _run_and_check(_program(paths, tmp_path, "shared", None), None) is None
    # the check sees AVX where it is: the same functions exported for x86-64-v3
    v3 = lt.export_library([_vadd(), built_matmul()], tmp_path / "libv3", march="x86-64-v3")
    assert any("ymm" in i for i in _avx_instructions(v3["so"]))


def test_default_export_states_native_and_its_risk(tmp_path, monkeypatch):
    monkeypatch.delenv("LOOPTUNE_MARCH", raising=False)     # the native default
    paths = lt.export_library(_vadd(), tmp_path / "libnat")
    header = paths["h"].read_text()
    assert "Target: -march=native, resolved on the exporting host to" in header
    assert "SIGILL" in header and "-march=native" in header


@pytest.mark.parametrize("link", ["shared", "static"])
@pytest.mark.slow
def test_multi_target_library_dispatches_on_the_cpu(tmp_path, link, objdump):
    levels = ["x86-64-v2", "x86-64-v3", "x86-64-v4"]
    paths = lt.export_library([_vadd(), built_matmul()], tmp_path / "libmt", march=levels)
    exe = _program(paths, tmp_path, link, "libmt_target")
    cpu = _cpu_level()
    best = f"x86-64-v{min(max(cpu, 2), 4)}" if cpu >= 2 else "none"
    assert _run_and_check(exe, None) == best
    assert _run_and_check(exe, "x86-64-v2") == ("x86-64-v2" if cpu >= 2 else "none")
    if cpu >= 3:
        assert _run_and_check(exe, "x86-64-v3") == "x86-64-v3"
    assert _run_and_check(exe, "x86-64") == "none"              # below every variant: rc 2
    assert _run_and_check(exe, "bogus") == best                 # an unknown cap is ignored
    if link == "shared":
        exported = subprocess.run(["nm", "-D", "--defined-only", str(paths["so"])], check=True,
                                  capture_output=True, text=True).stdout
        names = {ln.split()[-1] for ln in exported.splitlines() if " T " in ln}
        assert names == {"vadd", "mm", "libmt_target"}         # the variants are hidden
        assert _avx_instructions(paths["so"], "vadd__lt_x86_64_v2") == []
        assert _avx_instructions(paths["so"], "libmt_target") == []   # the dispatcher too
        assert any("ymm" in i for i in _avx_instructions(paths["so"], "mm__lt_x86_64_v3"))
        assert _avx_instructions(paths["so"], "mm__lt_x86_64_v4")


@pytest.mark.slow
def test_per_level_schedules_and_their_provenance_in_the_header(tmp_path):
    f2, f3 = _vadd(factor=4), _vadd(factor=16)
    f2.provenance = {"schedule": "hand */ #define EVIL 1 /*", "log": "a.jsonl\nb"}
    f3.provenance = {"schedule": "tuned config #7", "config": '{"tile": 16}'}
    paths = lt.export_library({"x86-64-v3": [f3, built_matmul()],
                               "x86-64-v2": [f2, built_matmul()]}, tmp_path / "libpl")
    header = paths["h"].read_text()
    assert "[x86-64-v2] schedule: hand * / #define EVIL 1 / *" in header     # sanitized
    assert "[x86-64-v2] log: a.jsonl\\nb" in header
    check = tmp_path / "check.c"                  # and the header still compiles cleanly
    check.write_text(f'#include "{paths["h"].name}"\n#ifdef EVIL\n#error\n#endif\n')
    subprocess.run(["gcc", "-fsyntax-only", "-Werror", "-Wall", "-I", str(tmp_path),
                    str(check)], check=True)
    assert "[x86-64-v3] schedule: tuned config #7" in header
    assert '[x86-64-v3] config: {"tile": 16}' in header
    assert "[x86-64-v2]   gcc -O3 -march=x86-64-v2" in header
    src = paths["c"].read_text()
    v2, v3 = src.split("#elif LT_VARIANT == 2")[1].split("#elif LT_VARIANT == 3")
    assert "% 4" in v2 or "4 *" in v2 or "* 4" in v2
    assert "16" in v3
    exe = _program(paths, tmp_path, "shared", "libpl_target")
    assert _run_and_check(exe, "x86-64-v2") == "x86-64-v2"
    if _cpu_level() >= 3:
        assert _run_and_check(exe, None) == "x86-64-v3"


def _bad_export(tmp_path, **kw):
    return lt.export_library(kw.pop("mods", [built_matmul()]), tmp_path / "libbad", **kw)


@pytest.mark.parametrize("march, match", [
    ("x86-64-v5", "unknown march 'x86-64-v5'; use one of x86-64, x86-64-v2"),
    ("native,x86-64-v3", "'native' is no level"),
    ("x86-64-v2,x86-64-v2", "lists a target twice"),
    (3, "march= takes a name or a list of names"),
    ([], "march= takes a name or a list of names"),
])
def test_export_refuses_bad_march(tmp_path, march, match):
    with pytest.raises(lt.BuildError, match=match):
        _bad_export(tmp_path, march=march)


def test_export_refuses_inconsistent_levels(tmp_path):
    with pytest.raises(lt.BuildError, match=r"levels \['x86-64-v2', 'x86-64-v3'\] and march="):
        _bad_export(tmp_path, mods={"x86-64-v3": [built_matmul()], "x86-64-v2": [built_matmul()]},
                    march="x86-64-v4")
    with pytest.raises(lt.BuildError, match="level x86-64-v3 holds functions"):
        _bad_export(tmp_path, mods={"x86-64-v3": [_vadd()], "x86-64-v2": [built_matmul()]})
    with pytest.raises(lt.BuildError, match="function 'vadd' has the signature .* at level "
                                            "x86-64-v2 but .* at level x86-64-v3"):
        _bad_export(tmp_path, mods={"x86-64-v3": [_vadd(n=40)], "x86-64-v2": [_vadd()]})
    with pytest.raises(lt.BuildError, match="unknown march 'avx2'"):
        _bad_export(tmp_path, mods={"avx2": [_vadd()]})


def test_export_refuses_a_function_named_like_the_query(tmp_path):
    A = lt.placeholder((4,), name="A")
    B = lt.compute((4,), lambda i: A[i] + 1.0, name="B")
    f = lt.build(lt.create_schedule(B), [A, B], name="libq_target")
    with pytest.raises(lt.BuildError, match="'libq_target' has the name of one the library"):
        lt.export_library(f, tmp_path / "libq", march="x86-64-v2,x86-64-v3")
    lt.export_library(f, tmp_path / "libq", march="x86-64-v2")       # one target: no query


def test_export_of_a_model_refuses_march(tmp_path):
    model = types.SimpleNamespace(steps=[], plan=None)
    with pytest.raises(lt.BuildError, match="compile the model for its target instead"):
        lt.export_library(model, tmp_path / "libm", march="x86-64-v2")


# ---- looptune export --march -----------------------------------------------------------------

MATMUL = str(EXAMPLES / "matmul.py")
ARGS = (48, 40, 24)


def _log_for_level(path: Path, level: str, index: int) -> Path:
    load_operators(MATMUL)                          # registers the template
    task = create_task("matmul", ARGS, target=f"c -march={level}")
    rec = Record.from_result(task.key, MeasureResult(task.config_space.get(index), [1e-4],
                                                     flop=task.flop))
    with LogWriter(path) as w:
        w.write(rec)
    return path


@pytest.mark.slow
def test_cli_export_multi_target_tuned_per_level(tmp_path, capsys):
    log = _log_for_level(tmp_path / "v3.jsonl", "x86-64-v3", 5)
    out = tmp_path / "libmm"
    assert main(["export", MATMUL, "--args", "48,40,24", "--log", str(log), "--march",
                 "x86-64-v2,x86-64-v3", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "matmul [x86-64-v3]: tuned config #5 from" in err
    assert "matmul [x86-64-v2]: hand schedule of" in err
    header = (tmp_path / "libmm.h").read_text()
    assert "[x86-64-v3] schedule: tuned config #5 from" in header
    assert f"[x86-64-v3] log: {log}" in header and "[x86-64-v3] config: {" in header
    assert "[x86-64-v2] schedule: hand schedule of" in header
    assert "const char *libmm_target(void);" in header


def test_cli_export_one_level_and_bad_march(tmp_path, capsys):
    assert main(["export", MATMUL, "--args", "48,40,24", "--march", "x86-64-v2", "-o",
                 str(tmp_path / "libone")]) == 0
    assert "Target: -march=x86-64-v2" in (tmp_path / "libone.h").read_text()
    capsys.readouterr()
    assert main(["export", MATMUL, "--march", "haswell", "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--march: unknown march 'haswell'" in err[0]


def test_export_names_a_compiler_without_the_level(tmp_path):
    """A compiler that rejects -march=x86-64-v2 (another architecture's, or an old one)."""
    cc = tmp_path / "oldcc"
    cc.write_text('#!/bin/sh\nfor a in "$@"; do case $a in -march=x86-64*) '
                  'echo "error: bad value for -march" >&2; exit 1;; esac; done\n'
                  'exec gcc "$@"\n')
    cc.chmod(0o755)
    with pytest.raises(lt.BuildError, match=r"march x86-64-v2 is an x86-64 level, and '.*oldcc' "
                                            r"does not compile for it .*bad value for -march"):
        lt.export_library(built_matmul(), tmp_path / "libold", cc=str(cc), march="x86-64-v2")
