"""How many cores other processes keep busy while looptune times candidates.

The noise guard's drift check (measure.py) compares the reference kernel with its own recent
past, so a load that was there from the start and stays is invisible to it. Such a load is
the worst kind for tuning: with one of two cores taken by another process, a config that runs
on every core is timed at half its speed, a single-threaded one at full speed, and the tuner
learns to prefer fewer threads (on a 2-core Zen 4, softmax, blur, layernorm and depthwise
tuned beside other work ran at 0.59-0.78 of the speed of those tuned on a quiet machine).

So the runner also measures the *foreign* CPU time around each timed candidate: the CPU time
all processes used (``/proc/stat``: user, nice, system, irq, softirq and steal, the time a
hypervisor gave the virtual CPUs to other guests) less the CPU time of the runner's own
threads (``time.process_time``). ``/proc/stat`` counts in clock ticks (10 ms), too coarse for
one candidate of a few milliseconds, so :class:`LoadMeter` judges the sum over the last
second or more of timing. Without ``/proc/stat`` (not Linux) nothing is measured and nothing
is judged.
"""
from __future__ import annotations

import os
import time
from collections import deque

_STAT = "/proc/stat"
try:
    _HZ = float(os.sysconf("SC_CLK_TCK"))
except (AttributeError, ValueError, OSError):
    _HZ = 100.0


def _cpu_line(path: str) -> list[int] | None:
    """The first eight fields of ``/proc/stat``'s "cpu" line in clock ticks summed over the
    cores (user, nice, system, idle, iowait, irq, softirq, steal), or None where it cannot be
    read."""
    try:
        with open(path) as f:
            fields = f.readline().split()
        if len(fields) < 9 or fields[0] != "cpu":
            return None
        return [int(x) for x in fields[1:9]]
    except (OSError, ValueError):
        return None


def busy_seconds(path: str = _STAT) -> float | None:
    """CPU seconds all processes have used since boot, summed over the cores (None without a
    readable ``/proc/stat``)."""
    ticks = _cpu_line(path)
    if ticks is None:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq + steal) / _HZ


class ForeignProbe:
    """Foreign CPU time over a stretch of this process's life: ``ForeignProbe()`` starts it,
    :meth:`stop` returns ``(foreign_seconds, wall_seconds)`` (None without ``/proc/stat``).
    Everything this process's threads ran is its own; all else is foreign, so measure only
    while this process's helpers (builders, the main process) sit idle."""

    def __init__(self, path: str = _STAT):
        self.path = path
        self.busy0 = busy_seconds(path)
        self.own0 = time.process_time()
        self.wall0 = time.perf_counter()

    def stop(self) -> tuple[float, float] | None:
        busy = busy_seconds(self.path)
        wall = time.perf_counter() - self.wall0
        if busy is None or self.busy0 is None:
            return None
        own = time.process_time() - self.own0
        return max(0.0, busy - self.busy0 - own), wall


class LoadMeter:
    """Foreign cores, on average, over the most recent ``window`` seconds (or more) of
    samples: :meth:`cores` is None until that much time was sampled (tick counting is too
    coarse for less)."""

    def __init__(self, window: float = 1.0):
        self.window = window
        self._samples: deque[tuple[float, float]] = deque()
        self._wall = 0.0

    def add(self, foreign: float, wall: float) -> None:
        self._samples.append((foreign, wall))
        self._wall += wall
        while len(self._samples) > 1 and self._wall - self._samples[0][1] >= self.window:
            self._wall -= self._samples.popleft()[1]

    def cores(self) -> float | None:
        if self._wall < self.window or self._wall <= 0:
            return None
        return self.average()

    def average(self) -> float | None:
        """The foreign cores over whatever was sampled, however short (None: nothing)."""
        return sum(f for f, _ in self._samples) / self._wall if self._wall > 0 else None


def cpu_ticks(path: str = _STAT) -> tuple[int, int] | None:
    """(steal, all) clock ticks since boot, summed over the cores: the time a hypervisor gave
    this guest's virtual CPUs to other guests, and all the time the cores counted (None
    without a readable ``/proc/stat``, or where it has no steal field)."""
    ticks = _cpu_line(path)
    return None if ticks is None else (ticks[7], sum(ticks))


class StealMeter:
    """The share of the virtual CPUs' time the hypervisor gave to other guests over a stretch
    of time (``StealMeter()`` starts it; :meth:`share` reads it, None without ``/proc/stat``
    or before a clock tick has passed). A benchmark timed while it is high was timed on a
    host that other guests loaded: on the 2-core VM of 2026-12-02 (Ice Lake), 10-38% of
    some seconds was stolen during a tune, and the same kernel's timings moved by 2x from
    one round to the next. Benchmarks print it beside their figures."""

    def __init__(self, path: str = _STAT):
        self.path = path
        self.start = cpu_ticks(path)

    def share(self) -> float | None:
        now = cpu_ticks(self.path)
        if now is None or self.start is None or now[1] <= self.start[1]:
            return None
        return (now[0] - self.start[0]) / (now[1] - self.start[1])


def steal_note(share: float | None) -> str:
    """One line for a benchmark's output: the steal share, and what it means when high."""
    if share is None:
        return "hypervisor steal: not measured (no /proc/stat steal field)"
    line = f"hypervisor steal: {share:.1%} of the CPUs' time while measuring"
    if share >= 0.02:
        line += (" (other guests of this host took CPU time from this VM: its timings "
                 "carry that noise; compare figures from quieter runs)")
    return line
