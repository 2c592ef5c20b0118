"""The compiler vectorizes with the registers the schedules are sized to (Target.vector_lanes):
gcc's tuning for some AVX-512 CPUs (rocketlake, icelake-client, what ``-march=native`` resolves
to on a VM that reports such a model) prefers 256-bit vectors, which split every 16-lane loop
in two; on a 2-core Xeon VM (family 6 model 167, seen by gcc as rocketlake) the 1024^3 sgemm
ran at the 256-bit peak (10.7 ms) until the flag below, then 6.7 ms."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import looptune as lt
from looptune.backends.compiler import flags_for, predefined_macros


def _need(march: str) -> None:
    try:
        predefined_macros("gcc", march)
    except lt.BuildError:
        pytest.skip(f"this gcc does not target -march={march} (not an x86-64 compiler)")


@pytest.mark.parametrize("march,wide", [("rocketlake", True), ("icelake-server", True),
                                        ("skylake-avx512", True), ("haswell", False),
                                        ("x86-64", False)])
def test_avx512_targets_ask_for_512_bit_vectors(march, wide):
    _need(march)
    flags = flags_for({"march": march}, parallel=False)
    assert ("-mprefer-vector-width=512" in flags) is wide, flags


def _axpy(target: str = "c"):
    """A 32-float vectorized axpy C = 3A + B built for target."""
    n = 4096
    A = lt.placeholder((n,), "float32", name="A")
    B = lt.placeholder((n,), "float32", name="B")
    C = lt.compute((n,), lambda i: A[i] * 3.0 + B[i], name="C")
    s = lt.create_schedule(C)
    _, xi = s[C].split(s[C].op.axis[0], factor=32)
    s[C].vectorize(xi)
    return lt.build(s, [A, B, C], target=target, name="axpy")


@pytest.mark.parametrize("march", ["rocketlake", "icelake-client"])
def test_a_vectorized_loop_uses_zmm_registers_where_gcc_would_prefer_ymm(march, tmp_path):
    """Assembly only (the CPU need not have AVX-512): the 32-float loop is FMAs on zmm."""
    _need(march)
    src = tmp_path / "axpy.c"
    src.write_text(_axpy(f"c -march={march}").source)
    asm = subprocess.run(["gcc", *flags_for({"march": march}, parallel=False), "-S", "-o", "-",
                          str(src)], capture_output=True, text=True, check=True).stdout
    zmm = re.findall(r"vfn?m(?:add|sub)\w*ps\s.*%zmm", asm)
    ymm = re.findall(r"vfn?m(?:add|sub)\w*ps\s.*%ymm", asm)
    assert zmm and not ymm, f"{len(zmm)} zmm and {len(ymm)} ymm FMAs:\n{asm}"
    # without the flag gcc splits the loop into ymm (the reason for it)
    plain = [f for f in flags_for({"march": march}, parallel=False)
             if not f.startswith("-mprefer-vector-width")]
    asm = subprocess.run(["gcc", *plain, "-S", "-o", "-", str(src)], capture_output=True,
                         text=True, check=True).stdout
    assert re.findall(r"vfn?m(?:add|sub)\w*ps\s.*%ymm", asm)


def test_the_wide_build_is_exact():
    n = 4096
    f = _axpy()
    rng = np.random.default_rng(1)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    c = np.empty(n, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a * np.float32(3) + b, rtol=1e-6)
