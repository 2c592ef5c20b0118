"""Heap intermediates are kept between calls (workspaces, backends/c_codegen.py lt_ws_take):
no fresh pages, so no page faults, at every call; exact under concurrent calls, growth of a
symbolic size and release; ``-alloc-per-call`` and the sanitizers allocate at every call."""
from __future__ import annotations

import ctypes
import resource
import subprocess
import threading

import looptune as lt
import numpy as np
import pytest

BIG = 12 * 1024 * 1024   # floats: 48 MiB, above glibc's largest mmap threshold (32 MiB), so an
# intermediate allocated at every call is mapped afresh at every call


def _two_stage(n, name="ws"):
    """B = A * 2 (a heap intermediate of n floats), C = B + 1."""
    A = lt.placeholder((n,), "float32", name="A")
    B = lt.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = lt.compute((n,), lambda i: B[i] + 1.0, name="C")
    s = lt.create_schedule(C)
    for T in (B, C):
        s[T].vectorize(s[T].op.axis[0])
    return s, [A, C]


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _faults_of_calls(f, *arrays, calls=5) -> int:
    f(*arrays)
    before = _faults()
    for _ in range(calls):
        f(*arrays)
    return _faults() - before


def test_kept_workspace_takes_no_page_faults_per_call():
    """A 48 MiB intermediate: with the default, repeated calls fault no new pages (a
    handful at most); with -alloc-per-call, every call maps it afresh."""
    a = np.random.default_rng(0).random(BIG, dtype=np.float32)
    c = np.empty_like(a)
    kept = lt.build(*_two_stage(BIG), name="ws_kept")
    fresh = lt.build(*_two_stage(BIG), target="c -alloc-per-call", name="ws_fresh")
    assert "lt_ws_take(&" in kept.source and "lt_ws_take(&" not in fresh.source
    assert "lt_alloc(sizeof" in fresh.source
    n_kept = _faults_of_calls(kept, a, c)
    np.testing.assert_array_equal(c, a * 2 + 1)
    c.fill(0)
    n_fresh = _faults_of_calls(fresh, a, c)
    np.testing.assert_array_equal(c, a * 2 + 1)
    assert n_kept < 50, n_kept
    assert n_fresh > 5 * 20 and n_fresh > 10 * n_kept, (n_fresh, n_kept)


def test_release_frees_the_workspace_and_the_next_call_allocates_again():
    a = np.random.default_rng(1).random(BIG, dtype=np.float32)
    c = np.empty_like(a)
    f = lt.build(*_two_stage(BIG), name="ws_release")
    f(a, c)
    f.release_workspaces()
    before = _faults()
    f(a, c)                                       # maps the 48 MiB again
    assert _faults() - before > 20
    np.testing.assert_array_equal(c, a * 2 + 1)
    assert _faults_of_calls(f, a, c) < 50


def test_a_symbolic_size_grows_its_workspace_and_stays_exact():
    n = lt.var("n")
    f = lt.build(*_two_stage(n), name="ws_grow")
    rng = np.random.default_rng(2)
    for size in (10, 100_000, 7, 300_001, 64, 300_001):
        a = rng.random(size, dtype=np.float32)
        c = np.full_like(a, np.nan)
        f(a, c)
        np.testing.assert_array_equal(c, a * 2 + 1)


def test_concurrent_calls_take_different_workspaces():
    """12 threads (more than the 8 blocks of a site: the others allocate their own) call one
    function on different inputs at once; every result is its own input's."""
    size = 1 << 18
    f = lt.build(*_two_stage(size), name="ws_threads")
    rng = np.random.default_rng(3)
    inputs = [rng.random(size, dtype=np.float32) for _ in range(12)]
    outputs = [np.empty_like(x) for x in inputs]
    errors = []
    start = threading.Barrier(len(inputs))

    def run(k):
        try:
            start.wait()
            for _ in range(30):
                f(inputs[k], outputs[k])
                np.testing.assert_array_equal(outputs[k], inputs[k] * 2 + 1)
        except Exception as e:       # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_per_thread_buffers_of_a_parallel_loop_are_exact():
    """A heap buffer allocated inside a parallel loop (each thread of the loop takes its own
    block) over many calls."""
    N, M = 64, 4096
    A = lt.placeholder((N, M), "float32", name="A")
    B = lt.compute((N, M), lambda i, j: A[i, j] * 3.0, name="B")
    C = lt.compute((N, M), lambda i, j: B[i, j] - A[i, j], name="C")
    s = lt.create_schedule(C)
    i, _ = s[C].op.axis
    s[C].parallel(i)
    s[B].compute_at(s[C], i)
    f = lt.build(s, [A, C], name="ws_par")
    src = f.source
    assert "lt_ws_take(&" in src   # B's row (16 KiB) is over the stack limit: a workspace
    a = np.random.default_rng(4).random((N, M), dtype=np.float32)
    for _ in range(20):
        c = np.full_like(a, np.nan)
        f(a, c)
        np.testing.assert_allclose(c, a * 3 - a, rtol=1e-6)


def test_sanitizer_builds_allocate_at_every_call():
    from looptune.backends.build import allocates_per_call, generate_c
    from looptune.backends.target import Target
    s, args = _two_stage(1 << 20)
    func = lt.lower(s, args, name="ws_san")
    assert "lt_ws_take(&" in generate_c(func).function
    assert "lt_ws_take(&" not in generate_c(func, alloc_per_call=True).function
    assert Target.parse("c -alloc-per-call").options["alloc-per-call"] is True
    assert allocates_per_call(Target.parse("c -alloc-per-call"))
    assert allocates_per_call(Target.parse("c -sanitize=address"))
    assert not allocates_per_call(Target.parse("c -fast-math"))
    with pytest.raises(lt.BuildError, match="alloc-per-cal"):
        Target.parse("c -alloc-per-cal")


@pytest.mark.slow
def test_exported_library_keeps_workspaces_and_frees_them_when_unloaded(tmp_path):
    """The exported .so runs from ctypes, exact over repeated calls; its source frees the
    pools in a destructor (run at dlclose/exit)."""
    size = 1 << 20
    f = lt.build(*_two_stage(size), name="ws_export")
    paths = lt.export_library(f, tmp_path / "libws")
    src = paths["c"].read_text()
    assert "__attribute__((destructor)) static void lt_ws_unload" in src
    assert "Workspaces: ws_export keep their intermediates" in paths["h"].read_text()
    lib = ctypes.CDLL(str(paths["so"]))
    a = np.random.default_rng(5).random(size, dtype=np.float32)
    for _ in range(3):
        c = np.zeros_like(a)
        rc = lib.ws_export(a.ctypes.data_as(ctypes.c_void_p), c.ctypes.data_as(ctypes.c_void_p))
        assert rc == 0
        np.testing.assert_array_equal(c, a * 2 + 1)
    subprocess.run(["gcc", "-c", "-fopenmp", "-o", str(tmp_path / "x.o"), str(paths["c"]),
                    "-I", str(tmp_path)], check=True)


def test_the_measurement_runner_release_frees_a_modules_workspaces():
    from looptune.search.jobs import _release
    a = np.random.default_rng(6).random(BIG, dtype=np.float32)
    c = np.empty_like(a)
    f = lt.build(*_two_stage(BIG), name="ws_runner")
    f(a, c)
    _release(f)
    before = _faults()
    f(a, c)
    assert _faults() - before > 20
    _release(object())        # an OpenCL module keeps none: nothing to do
