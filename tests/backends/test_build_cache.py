"""The build cache: builds killed on the way leave nothing behind, and the cache stays bounded."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import looptune as lt
from looptune.backends import compiler
from looptune.cli import main
from looptune.errors import BuildError
from looptune.search import ErrorKind, MeasureOption, auto_task, measure_configs

SOURCE = "int looptune_probe(void) { return 42; }\n"


def _slow_cc(tmp_path: Path) -> Path:
    """A 'compiler' that, like gcc, drops a temporary file into $TMPDIR, then hangs (it asks
    gcc for its version and predefined macros)."""
    cc = tmp_path / "slowcc"
    cc.write_text(textwrap.dedent("""\
        #!/bin/sh
        case "$*" in *--version*|*-dM*) exec gcc "$@";; esac
        echo partial > "${TMPDIR:-/tmp}/ccSLOW.s"
        exec sleep 60
        """))
    cc.chmod(cc.stat().st_mode | stat.S_IEXEC)
    return cc


def _leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.startswith("."))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("LOOPTUNE_CACHE", str(d))
    compiler._first_build.cache_clear()
    yield d
    compiler._first_build.cache_clear()


def test_a_compiler_killed_mid_build_leaves_its_files_only_where_the_next_build_sweeps(
        cache, tmp_path):
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    cc = _slow_cc(tmp_path)
    env = dict(os.environ, LOOPTUNE_CACHE=str(cache), TMPDIR=str(systmp))
    code = ("import sys; from looptune.backends.compiler import compile_shared; "
            f"compile_shared({SOURCE!r}, cc={str(cc)!r})")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not list(cache.glob(".build-*/ccSLOW.s")):
            assert proc.poll() is None, "the build ended before it was killed"
            assert time.monotonic() < deadline, "the slow compiler never started"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)       # what a build timeout does to a worker
        proc.wait()
    # the compiler's temporary went to the build's own directory, not to $TMPDIR
    assert list(systmp.iterdir()) == []
    (left,) = _leftovers(cache)
    assert left.startswith(".build-") and not list(cache.glob("*.so"))
    assert compiler.sweep(cache) == 1
    assert _leftovers(cache) == []


def test_sweep_keeps_the_build_directories_of_running_processes_and_fresh_partials(cache):
    cache.mkdir()
    live = cache / f".build-{compiler._host()}-{os.getpid()}-abc"
    other_host = cache / ".build-elsewhere-1-abc"      # another host's: its pid means nothing
    for d in (live, other_host):
        d.mkdir()
    fresh, old = cache / ".k-123.so", cache / ".k-456.so"  # an older looptune's partials
    fresh.write_bytes(b"x")
    old.write_bytes(b"x")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert compiler.sweep(cache) == 1
    assert _leftovers(cache) == sorted([live.name, other_host.name, fresh.name])


@pytest.mark.slow
def test_a_build_timeout_in_tuning_leaves_no_files_of_the_killed_compiler(cache, tmp_path,
                                                                          monkeypatch):
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(systmp))
    x = lt.placeholder((64,), "float32", name="x")
    y = lt.compute((64,), lambda i: x[i] + 1.0, name="y")
    task = auto_task([x, y], target=f"c -cc={_slow_cc(tmp_path)}")
    (r,) = measure_configs(task, [0], MeasureOption(number=1, repeat=1, timeout=2,
                                                    n_parallel=1))
    assert r.error_kind is ErrorKind.BUILD_TIMEOUT
    assert _leftovers(cache) == [] and list(systmp.iterdir()) == []


def _entry(cache: Path, stem: str, size: int, age_s: float) -> None:
    t = time.time() - age_s
    for ext in (".so", ".sha256", ".c"):
        p = cache / f"{stem}{ext}"
        p.write_bytes(b"x" * (size if ext == ".so" else 10))
        os.utime(p, (t, t))


def test_prune_removes_the_least_recently_used_entries_and_keeps_recent_ones(cache):
    cache.mkdir()
    (cache / "locks").mkdir()
    (cache / "locks" / "timing-h.lock").write_text("")
    for k, age in enumerate([9000, 8000, 7000, 60]):        # entry 3 was used a minute ago
        _entry(cache, f"k{k}-abc", 1000, age)
    freed = compiler.prune(2100, cache)
    assert freed == 2 * 1020
    assert sorted(compiler.cache_entries(cache)) == ["k2-abc", "k3-abc"]
    assert compiler.prune(0, cache) == 1020                # k3 is recent: kept
    assert sorted(compiler.cache_entries(cache)) == ["k3-abc"]
    assert (cache / "locks" / "timing-h.lock").exists()


def test_the_first_build_of_a_process_keeps_the_cache_within_its_bound(cache, monkeypatch):
    cache.mkdir()
    for k in range(10):
        _entry(cache, f"old{k}-abc", 100_000, 7200 + k)
    monkeypatch.setenv("LOOPTUNE_CACHE_MAX", "500k")
    so = compiler.compile_shared(SOURCE, name="probe")
    entries = compiler.cache_entries(cache)
    assert so.stem in entries                          # the new build is there
    assert sum(b for _, b in entries.values()) <= 0.8 * 500 * 1024 + so.stat().st_size + 200
    assert "old9-abc" not in entries and "old0-abc" in entries   # oldest went first
    # a hit re-dates the entry, so that it counts as recently used
    os.utime(so, (time.time() - 9999, time.time() - 9999))
    assert compiler.compile_shared(SOURCE, name="probe") == so
    assert time.time() - so.stat().st_mtime < 60


@pytest.mark.parametrize("text, size", [("4G", 4 << 30), ("500M", 500 << 20), ("64k", 64 << 10),
                                        ("1000", 1000), ("0", 0), ("off", 0), ("2GiB", 2 << 30)])
def test_cache_sizes_parse(text, size):
    assert compiler.parse_size(text) == size


def test_a_bad_cache_bound_is_an_error_naming_it(cache, monkeypatch):
    monkeypatch.setenv("LOOPTUNE_CACHE_MAX", "lots")
    with pytest.raises(BuildError, match=r"LOOPTUNE_CACHE_MAX='lots' is not a size; .*4G"):
        compiler.compile_shared(SOURCE, name="probe")


def test_the_cache_command_shows_prunes_and_clears(cache, capsys):
    cache.mkdir()
    for k in range(4):
        _entry(cache, f"e{k}-abc", 1_000_000, 7200 + k)
    assert main(["cache"]) == 0
    assert f"build cache {cache}: 4 entries, 4.0 MB" in capsys.readouterr().out
    assert main(["cache", "--max-size", "2.5M"]) == 0
    out = capsys.readouterr().out
    assert "removed 2.0 MB" in out and "2 entries" in out
    assert sorted(compiler.cache_entries(cache)) == ["e0-abc", "e1-abc"]
    assert main(["cache", "--clear"]) == 0
    assert "0 entries" in capsys.readouterr().out
    assert main(["cache", "--max-size", "huge"]) == 2
    assert "--max-size='huge' is not a size" in capsys.readouterr().err


def test_a_build_from_the_cache_still_runs(cache):
    a = lt.placeholder((16,), "float32", name="a")
    b = lt.compute((16,), lambda i: a[i] * 2.0, name="b")
    s = lt.create_schedule(b.op)
    x = np.arange(16, dtype=np.float32)
    for _ in range(2):                       # built, then loaded from the cache
        out = np.empty(16, np.float32)
        lt.build(s, [a, b])(x, out)
        np.testing.assert_array_equal(out, x * 2)
    assert _leftovers(cache) == []
