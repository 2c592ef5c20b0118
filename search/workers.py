"""Worker processes that may crash or hang without hurting the tuner.

A :class:`WorkerPool` keeps ``n`` fresh Python processes (started with ``subprocess``, never
forked: the tuner may already run OpenMP threads, and a forked child that uses OpenMP can
hang; nor with multiprocessing's ``spawn``, which re-runs the user's main script in every
worker). Each worker gets the tuner's ``sys.path``, runs ``init_fn(init_arg)`` once, says it
is ready, then answers jobs one at a time over its own socket. The pool hands out jobs and
waits on the sockets with a deadline, so that each job ends in exactly one :class:`Outcome`:

- ``ok``: the job function returned (its value is the payload);
- ``error``: it raised (the payload is the message with the traceback);
- ``crash``: the process died (segfault, abort, ``os._exit``); it is restarted;
- ``timeout``: it ran past the deadline; it is killed and restarted.

Workers run in their own session and ignore SIGINT, so Ctrl-C in a terminal reaches the tuner
only (which then stops after the candidates in flight); a watchdog thread ends a worker whose
parent died (``kill -9`` of the tuner), so no worker outlives its tuner.
"""
from __future__ import annotations

import json
import logging
import multiprocessing.connection as mpc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..backends.compiler import sweep as sweep_build_cache
from ..errors import LooptuneError

log = logging.getLogger("looptune.search.workers")

ROLE_ENV = "LOOPTUNE_WORKER_ROLE"


def worker_role() -> str:
    """``"builder"`` or ``"runner"`` inside a measurement worker, ``"main"`` elsewhere."""
    return os.environ.get(ROLE_ENV, "main")


@dataclass
class Outcome:
    """How one job ended: ``status`` in ok | error | crash | timeout; seconds it took."""

    status: str
    payload: Any
    elapsed: float


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(3)


_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[3]); "
         "from looptune.search.workers import child_main; "
         "child_main(int(sys.argv[1]), int(sys.argv[2]))")


def child_main(fd: int, parent_pid: int) -> None:
    """The worker loop (runs in the worker process)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    conn = mpc.Connection(fd)
    try:
        init_fn, init_arg, job_fn = conn.recv()
        state = init_fn(init_arg)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("init_error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            out = ("ok", job_fn(state, job))
        except Exception as e:  # noqa: BLE001 - any failure of a job is its outcome
            out = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}")
        conn.send(out)


def _death_reason(proc: subprocess.Popen) -> str:
    try:
        code = proc.wait(5)
    except subprocess.TimeoutExpired:
        return "the worker process stopped answering"
    if code < 0:
        try:
            return f"the worker process was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"the worker process was killed by signal {-code}"
    return f"the worker process exited with code {code}"


class _Worker:
    def __init__(self, pool: WorkerPool):
        ours, theirs = socket.socketpair()
        env = dict(os.environ, **{ROLE_ENV: pool.role})
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(theirs.fileno()), str(os.getpid()),
             json.dumps(sys.path)], pass_fds=(theirs.fileno(),), env=env,
            start_new_session=True, stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = mpc.Connection(ours.detach())
        self.conn.send((pool.init_fn, pool.init_arg, pool.job_fn))
        self.ready = False
        self.started = time.monotonic()
        self.job: int | None = None
        self.t0 = 0.0
        self.deadline = 0.0

    def kill(self) -> None:
        """Kill the worker and whatever it started (a compiler, say): its process group."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            log.warning("worker %d did not exit after SIGKILL", self.proc.pid)
        self.conn.close()


class WorkerPool:
    """``n`` spawned workers running ``job_fn(state, job)`` with ``state = init_fn(arg)``."""

    def __init__(self, n: int, role: str, init_fn: Callable, init_arg: Any, job_fn: Callable,
                 init_timeout: float = 120.0):
        self.n, self.role = max(1, int(n)), role
        self.init_fn, self.init_arg, self.job_fn = init_fn, init_arg, job_fn
        self.init_timeout = init_timeout
        self._workers: list[_Worker] = [_Worker(self) for _ in range(self.n)]
        self.restarts = 0
        self.used = False           # a job was sent since the workers were (re)started

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker (politely, then by force)."""
        busy = any(w.job is not None or not w.ready for w in self._workers)
        for w in self._workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 1.0
        for w in self._workers:
            try:
                w.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            w.kill()
        self._workers = []
        if busy:
            sweep_build_cache()   # a worker stopped mid-build (or mid-start) leaves its build dir

    def renew(self) -> None:
        """Replace every worker by a fresh process (its state is built again by ``init_fn``):
        the workers are stopped as ``close`` stops them, then started anew."""
        self.close()
        self._workers = [_Worker(self) for _ in range(self.n)]
        self.restarts += self.n
        self.used = False

    def _restart(self, k: int) -> None:
        self._workers[k].kill()
        sweep_build_cache()       # what a compiler killed mid-build (a timeout) left
        self._workers[k] = _Worker(self)
        self.restarts += 1

    def _on_ready_message(self, k: int) -> None:
        w = self._workers[k]
        try:
            kind, msg = w.conn.recv()
        except (EOFError, OSError):
            reason = _death_reason(w.proc)
            self._restart(k)
            raise LooptuneError(f"a {self.role} worker died while starting: {reason}") from None
        if kind == "init_error":
            raise LooptuneError(f"a {self.role} worker could not start: {msg}")
        w.ready = True

    def map(self, jobs: list, timeout: float) -> list[Outcome]:
        """Run ``jobs`` (each on one worker, ``timeout`` seconds each); outcomes in order."""
        pending = deque(range(len(jobs)))
        out: list[Outcome | None] = [None] * len(jobs)
        while pending or any(w.job is not None for w in self._workers):
            self._dispatch(jobs, pending, timeout)
            self._wait_and_collect(out)
        return out  # type: ignore[return-value]

    def _dispatch(self, jobs: list, pending: deque, timeout: float) -> None:
        for k, w in enumerate(self._workers):
            if w.ready and w.job is None and pending:
                job = pending.popleft()
                try:
                    w.conn.send(jobs[job])
                except OSError:          # it died while idle: replace it, keep the job
                    pending.appendleft(job)
                    self._restart(k)
                    continue
                w.job, w.t0 = job, time.monotonic()
                w.deadline = w.t0 + timeout
                self.used = True

    def _wait_and_collect(self, out: list) -> None:
        now = time.monotonic()
        waits, deadlines = [], []
        for w in self._workers:
            if w.job is not None or not w.ready:
                waits.append(w.conn)
                deadlines.append(w.deadline if w.ready else w.started + self.init_timeout)
        if not waits:
            return
        mpc.wait(waits, timeout=max(0.0, min(deadlines) - now))
        now = time.monotonic()
        for k, w in enumerate(self._workers):
            if not w.ready:
                if w.conn.poll():
                    self._on_ready_message(k)
                elif w.proc.poll() is not None or now > w.started + self.init_timeout:
                    reason = "timed out" if w.proc.poll() is None else _death_reason(w.proc)
                    self._restart(k)
                    raise LooptuneError(f"a {self.role} worker failed to start: {reason}")
            elif w.job is not None:
                self._collect_one(k, out, now)

    def _collect_one(self, k: int, out: list, now: float) -> None:
        w = self._workers[k]
        job = w.job
        eof = False
        if w.conn.poll():
            try:
                status, payload = w.conn.recv()
                out[job] = Outcome(status, payload, now - w.t0)
                w.job = None
                return
            except (EOFError, OSError):
                eof = True          # the pipe closed: the process is dying or dead
        if eof or w.proc.poll() is not None:
            out[job] = Outcome("crash", _death_reason(w.proc), now - w.t0)
            self._restart(k)
        elif now >= w.deadline:
            out[job] = Outcome("timeout", f"killed after {now - w.t0:.1f} s", now - w.t0)
            self._restart(k)
