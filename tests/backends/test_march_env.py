"""$LOOPTUNE_MARCH: the -march of C targets that name none, for everything that reads it (the
flags, the vector lanes and registers schedules are sized to, the host in tuning records), so
an AVX2 machine can be stood in for on an AVX-512 one (benchmarks/peers.py --isa avx2)."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import looptune as lt
from looptune.backends.compiler import flags_for, predefined_macros
from looptune.backends.target import MARCH_ENV, default_march
from looptune.search.hosts import host_info

V3 = "x86-64-v3"


@pytest.fixture
def avx2_default(monkeypatch):
    try:
        predefined_macros("gcc", V3)
    except lt.BuildError:
        pytest.skip(f"this gcc does not target -march={V3} (not an x86-64 compiler)")
    monkeypatch.setenv(MARCH_ENV, V3)


def test_unset_or_empty_means_native(monkeypatch):
    monkeypatch.delenv(MARCH_ENV, raising=False)
    assert default_march() == "native"
    assert lt.Target.parse("c").march() == "native"
    monkeypatch.setenv(MARCH_ENV, "  ")
    assert default_march() == "native"
    assert "-march=native" in flags_for({}, parallel=False)


def test_the_variable_sets_flags_lanes_and_registers(avx2_default):
    t = lt.Target.parse("c -threads=2")
    assert t.march() == V3
    assert (t.vector_lanes("float32"), t.vector_lanes("float64")) == (8, 4)
    assert t.vector_registers() == 16
    flags = flags_for(t.options, parallel=True)
    assert f"-march={V3}" in flags and "-mprefer-vector-width=512" not in flags


def test_a_targets_own_march_wins(avx2_default):
    t = lt.Target.parse("c -march=x86-64")
    assert t.march() == "x86-64"
    assert "-march=x86-64" in flags_for(t.options, parallel=False)


def test_a_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv(MARCH_ENV, "avx2; rm -rf /")
    with pytest.raises(lt.BuildError, match=r"\$LOOPTUNE_MARCH='avx2; rm -rf /'.*x86-64-v3"):
        lt.Target.parse("c").vector_lanes()
    with pytest.raises(lt.BuildError, match="LOOPTUNE_MARCH"):
        flags_for({}, parallel=False)


def test_records_name_the_default_march(avx2_default, monkeypatch):
    assert host_info("c")["march"] == V3
    monkeypatch.delenv(MARCH_ENV)
    assert host_info("c")["march"] != V3     # not a stale cache entry


def test_hand_schedules_size_to_it_and_stay_exact(avx2_default):
    """The matmul example's micro-tile from the AVX2 registers (6 x 16), the kernel built with
    -march=x86-64-v3: no zmm register anywhere in its assembly, and exact."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[2] / "examples"))
    try:
        import matmul
    finally:
        sys.path.pop(0)
    b = matmul.blocking(70, 50, 40)
    assert (b["mr"], b["nr"]) == (6, 16)
    s, args = matmul.hand_schedule(70, 50, 40)
    f = lt.build(s, args, name="mm_v3")
    rng = np.random.default_rng(3)
    a, w = rng.random((70, 40), dtype=np.float32), rng.random((40, 50), dtype=np.float32)
    c = np.empty((70, 50), np.float32)
    f(a, w, c)
    np.testing.assert_allclose(c, a @ w, rtol=1e-5, atol=1e-5)
    asm = subprocess.run(["gcc", *flags_for({}, parallel=True), "-S", "-o", "-", "-x", "c", "-"],
                         input=f.source, capture_output=True, text=True, check=True).stdout
    assert re.search(r"%ymm", asm) and not re.search(r"%zmm", asm)


@pytest.mark.parametrize("march, want", [("x86-64-v4", (14, 32)), (V3, (6, 16))])
def test_gemm_tile_fits_the_registers(march, want):
    try:
        predefined_macros("gcc", march)
    except lt.BuildError:
        pytest.skip(f"this gcc does not target -march={march}")
    t = lt.Target.parse(f"c -march={march}")
    rows, cols = t.gemm_tile()
    assert (rows, cols) == want
    assert 2 * rows + 2 + 1 <= t.vector_registers() and cols == 2 * t.vector_lanes()
    assert t.gemm_tile("float64") == (rows, cols // 2)


def test_an_export_states_the_default_march(avx2_default, tmp_path):
    n = 64
    A = lt.placeholder((n,), "float32", name="A")
    B = lt.compute((n,), lambda i: A[i] + 1.0, name="B")
    f = lt.build(lt.create_schedule(B), [A, B], name="inc")
    header = lt.export_library(f, tmp_path / "libinc")["h"].read_text()
    assert f"-march={V3}" in header and "resolved on the exporting host" not in header
