"""The per-host timing lock: tuning workers that share a machine never time at once.

Several tuning processes on one host (``looptune tune ... --storage URL`` started twice, or
two users' tunes) would otherwise time their candidates at the same moment, each slowing the
other's kernels down: both logs get noisy costs and the shared study learns from them. The
:class:`~looptune.search.measure.Measurer` therefore holds this lock while its runner times a
candidate (one ``runner.map`` call: the correctness check, the timing, the noise reference);
compiling is not locked, so the workers' builders keep compiling in parallel.

The lock is an exclusive ``fcntl.flock`` on ``<cache dir>/locks/timing-<host name>.lock``
(the cache dir is ``$LOOPTUNE_CACHE``, default ``~/.cache/looptune``). The kernel drops a
``flock`` when its holder dies, ``kill -9`` included, so a killed worker never leaves it held.
The host name is part of the file name because a cache dir on a shared (NFS) home is seen by
many hosts: each host gets its own lock, and hosts never wait for each other.

``$LOOPTUNE_TIMING_LOCK`` overrides the path: a file path (e.g. one lock for workers that use
different cache dirs), or ``off`` (``0``, ``no``, ``false``) for no lock at all.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import LooptuneError

log = logging.getLogger("looptune.search.hostlock")

LOCK_ENV = "LOOPTUNE_TIMING_LOCK"
_OFF = ("off", "0", "no", "false", "none")


class TimingLockError(LooptuneError):
    """The timing lock file cannot be created or locked."""


def timing_lock_path() -> Path | None:
    """The lock file this process uses (None when ``$LOOPTUNE_TIMING_LOCK`` turns it off)."""
    env = os.environ.get(LOCK_ENV, "").strip()
    if env and env.lower() in _OFF:
        return None
    if env:
        return Path(env).expanduser()
    from ..backends.compiler import cache_dir
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"
    return cache_dir() / "locks" / f"timing-{host}.lock"


def _open(path: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as e:
        raise TimingLockError(
            f"the per-host timing lock {path} cannot be created ({e.strerror}); set "
            f"{LOCK_ENV} to a writable file path, or {LOCK_ENV}=off to time without it "
            "(then workers on one host may time at once)") from None


@contextlib.contextmanager
def timing_lock(path: str | os.PathLike | None = None) -> Iterator[float]:
    """Hold the per-host timing lock for the ``with`` block; yields the seconds waited.

    ``path`` defaults to :func:`timing_lock_path` (nothing is locked when that is None).
    Blocks until the lock is free; a Ctrl-C handler that raises interrupts the wait.
    """
    p = Path(path) if path is not None else timing_lock_path()
    if p is None:
        yield 0.0
        return
    fd = _open(p)
    try:
        t0 = time.monotonic()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise TimingLockError(
                    f"the file system of {p} does not support locks ({e.strerror}); set "
                    f"{LOCK_ENV} to a path on a local disk (e.g. /tmp/looptune-timing.lock)"
                ) from None
            raise
        waited = time.monotonic() - t0
        if waited > 1.0:
            log.info("waited %.1f s for the timing lock %s (another worker was timing)",
                     waited, p)
        try:
            yield waited
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
