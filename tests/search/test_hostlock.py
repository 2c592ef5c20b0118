"""The per-host timing lock: its path and switches, its errors, and two measuring processes on
one host whose timing windows never overlap (while they do overlap without the lock)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from looptune.search.hostlock import (LOCK_ENV, TimingLockError, timing_lock,
                                      timing_lock_path)

HERE = os.path.dirname(os.path.abspath(__file__))


def test_the_lock_lives_in_the_cache_dir_per_host(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOPTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(LOCK_ENV, raising=False)
    host = socket.gethostname()
    assert timing_lock_path() == tmp_path / "cache" / "locks" / f"timing-{host}.lock"
    monkeypatch.setenv(LOCK_ENV, str(tmp_path / "mine.lock"))
    assert timing_lock_path() == tmp_path / "mine.lock"
    for off in ("off", "0", "OFF", "false"):
        monkeypatch.setenv(LOCK_ENV, off)
        assert timing_lock_path() is None
        with timing_lock() as waited:
            assert waited == 0.0


def test_the_lock_excludes_another_process(tmp_path):
    path = tmp_path / "t.lock"
    probe = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
             "except BlockingIOError:\n    print('held')")
    def other() -> str:
        return subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True,
                              text=True, timeout=60).stdout.strip()
    with timing_lock(path):
        assert other() == "held"
    assert other() == "free"


def test_an_unusable_lock_path_says_what_to_do(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(LOCK_ENV, str(blocker / "sub" / "t.lock"))
    with pytest.raises(TimingLockError, match=rf"the per-host timing lock {blocker}/sub/t.lock "
                                              rf"cannot be created \(Not a directory\); set "
                                              rf"{LOCK_ENV} to a writable file path, or "
                                              rf"{LOCK_ENV}=off"):
        with timing_lock():
            pass


# ---- two processes measuring real candidates at once -------------------------------------------

WORKER = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {here!r})
    import helpers_templates  # noqa: F401
    from looptune.search import MeasureOption, create_task
    from looptune.search import workers
    from looptune.search.measure import Measurer

    go, first = sys.argv[1], int(sys.argv[2])
    windows = []
    plain_map = workers.WorkerPool.map

    def timed_map(self, jobs, timeout):      # the runner's map is where candidates are timed
        t0 = time.monotonic()
        out = plain_map(self, jobs, timeout)
        if self.role == "runner":
            windows.append((t0, time.monotonic()))
        return out

    workers.WorkerPool.map = timed_map
    task = create_task("test_matmul", (32, 32, 32))
    opt = MeasureOption(n_parallel=1, number=1, repeat=3, min_repeat_ms=40, timeout=60)
    with Measurer(task, opt) as m:
        open(go + "." + str(first), "w").close()
        while not all(os.path.exists(go + "." + str(k)) for k in (0, 100)):
            time.sleep(0.01)                  # both processes start measuring together
        configs = [task.config_space.get(first + 7 * k) for k in range(4)]
        results = list(m.measure(configs))
    assert all(r.ok for r in results), [str(r) for r in results]
    print(json.dumps(windows))
""")


def _windows(tmp_path, env: dict) -> list[list[tuple[float, float]]]:
    script = tmp_path / "measure_worker.py"
    script.write_text(WORKER.format(here=HERE))
    go = str(tmp_path / "go")
    procs = [subprocess.Popen([sys.executable, str(script), go, str(first)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for first in (0, 100)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    for k in (0, 100):
        os.unlink(f"{go}.{k}")
    return [[tuple(w) for w in json.loads(out.strip().splitlines()[-1])] for out, _ in outs]


def _overlaps(a: list, b: list) -> int:
    return sum(1 for s1, e1 in a for s2, e2 in b if s1 < e2 and s2 < e1)


@pytest.mark.slow
def test_two_processes_never_time_at_once(tmp_path):
    env = dict(os.environ)
    env.pop(LOCK_ENV, None)
    a, b = _windows(tmp_path, env)
    assert len(a) >= 4 and len(b) >= 4      # one run per config; the noise guard may add some
    assert all(e - s >= 0.1 for s, e in a + b)            # 3 repeats of >= 40 ms each
    # they measured during the same seconds, yet no window of one overlaps one of the other
    span = [(min(s for s, _ in w), max(e for _, e in w)) for w in (a, b)]
    assert span[0][0] < span[1][1] and span[1][0] < span[0][1]
    assert _overlaps(a, b) == 0
    # without the lock the same run overlaps: the check above can see an overlap
    a, b = _windows(tmp_path, dict(env, **{LOCK_ENV: "off"}))
    assert _overlaps(a, b) > 0, f"no overlap without the lock: {a} {b}"
