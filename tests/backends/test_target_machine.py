"""Target.vector_registers and Target.cache_bytes: the machine facts hand schedules size their
register tiles and cache blocks from (examples/matmul.py's blocking)."""
from __future__ import annotations

import platform

import pytest

import looptune as lt
from looptune.backends import target as target_mod


def test_vector_registers_follow_the_instruction_set():
    native = lt.Target.parse("c")
    if platform.machine() == "x86_64":
        assert native.vector_registers() == (32 if native.vector_lanes("float32") >= 16 else 16)
    else:                                             # AArch64: 32 registers of 4 lanes
        assert native.vector_registers() == 32
    haswell = lt.Target.parse("c -march=haswell")
    if haswell.vector_lanes("float32") == 8:          # an x86-64 compiler
        assert haswell.vector_registers() == 16
        assert lt.Target.parse("c -march=skylake-avx512").vector_registers() == 32


def test_cache_bytes_are_sane_and_ordered():
    t = lt.Target.parse("c")
    l1, l2, l3 = (t.cache_bytes(level) for level in (1, 2, 3))
    assert 4 << 10 <= l1 <= l2 <= l3 <= 4 << 30


def test_cache_bytes_falls_back_without_sysfs(monkeypatch):
    monkeypatch.setattr(target_mod, "_SYSCONF", {1: "SC_NO_SUCH", 2: "SC_NO_SUCH",
                                                 3: "SC_NO_SUCH"})
    monkeypatch.setattr("glob.glob", lambda pattern: [])
    target_mod._cache_bytes.cache_clear()
    try:
        assert lt.Target.parse("c").cache_bytes(2) == 512 << 10
    finally:
        target_mod._cache_bytes.cache_clear()


def test_cache_bytes_rejects_other_levels():
    with pytest.raises(lt.BuildError, match=r"cache_bytes\(4\): the level must be 1, 2 or 3"):
        lt.Target.parse("c").cache_bytes(4)


def test_threads_are_the_targets_option_else_the_cpus_this_process_may_use(monkeypatch):
    import os
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert lt.Target.parse("c -threads=3").threads() == 3
    assert lt.Target.parse("c").threads() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("env, want", [("3", 3), ("5,2", 5), (" 7 ", 7), ("0", None),
                                       ("many", None), ("", None)])
def test_threads_follow_omp_num_threads_as_the_openmp_runtime_does(monkeypatch, env, want):
    # OpenMP runs a parallel loop on $OMP_NUM_THREADS threads (the first level of a list);
    # a schedule sized for the CPUs instead would split work for threads that do not run.
    # A value OpenMP would not take falls back to the CPUs; -threads= wins over the variable.
    import os
    monkeypatch.setenv("OMP_NUM_THREADS", env)
    assert lt.Target.parse("c").threads() == (want or len(os.sched_getaffinity(0)))
    assert lt.Target.parse("c -threads=2").threads() == 2
    from looptune.search.auto_rules import machine_of
    assert machine_of("c").threads == (want or len(os.sched_getaffinity(0)))
