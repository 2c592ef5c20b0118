"""Tuning callbacks: ``log_to_file`` and ``progress_bar``.

A callback is called as ``cb(tuner, result)`` after each measured candidate, and after each
re-measure run at the end of a tune (``result.kind == "remeasure"``; not a trial). It may also
have ``start(tuner, n_trial)`` (``n_trial`` None under a time budget alone) and
``finish(tuner)`` methods, called around a ``tune`` run.
"""
from __future__ import annotations

import os
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING, TextIO

from .log import LogWriter, Record
from .measure import MeasureResult

if TYPE_CHECKING:
    from .tuner import Tuner


class LogToFile:
    """Appends one JSON Lines record per measured candidate, as soon as it is measured."""

    def __init__(self, path: str | os.PathLike, fsync: bool = False):
        self.path = os.fspath(path)
        self.fsync = fsync
        self._writer: LogWriter | None = None

    def start(self, tuner: Tuner, n_trial: int) -> None:
        if self._writer is None:
            self._writer = LogWriter(self.path, self.fsync)

    def __call__(self, tuner: Tuner, result: MeasureResult) -> None:
        if self._writer is None:
            self._writer = LogWriter(self.path, self.fsync)
        self._writer.write(Record.from_result(tuner.task.key, result))

    def finish(self, tuner: Tuner) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def log_to_file(path: str | os.PathLike, fsync: bool = False) -> LogToFile:
    """A callback writing each measured candidate to the JSON Lines log ``path`` (appending;
    ``fsync=True`` also forces each line to disk). ``tune(resume=True)`` reads it back."""
    return LogToFile(path, fsync)


def _duration(sec: float) -> str:
    sec = int(max(0, sec))
    if sec >= 3600:
        return f"{sec // 3600}h{sec % 3600 // 60:02d}m"
    return f"{sec // 60}m{sec % 60:02d}s" if sec >= 60 else f"{sec}s"


class ProgressBar:
    """A status line on stderr: trials, best, errors, ETA. On a terminal one line is
    rewritten with ``\\r``; elsewhere (a file, a pipe, CI logs) each update is a line of its
    own. ``rewrite`` forces either (default: whether the stream is a terminal)."""

    def __init__(self, stream: TextIO | None = None, width: int = 20,
                 rewrite: bool | None = None):
        self.stream = stream
        self.width = width
        self.rewrite = rewrite
        self.errors: Counter = Counter()
        self._t0 = 0.0
        self._n_trial: int | None = 0
        self._first = 0
        self._len = 0
        self._again = 0

    def start(self, tuner: Tuner, n_trial: int | None) -> None:
        self._t0 = time.monotonic()
        self._n_trial = n_trial
        self._first = tuner.trials
        self._again = 0
        self.errors.clear()

    def line(self, tuner: Tuner) -> str:
        """The status text for the tuner's current state."""
        done = tuner.trials
        total = max(self._n_trial, done) if self._n_trial is not None else None
        filled = (self.width * done // total if total else self.width) if total is not None \
            else 0
        bar = "#" * filled + "." * (self.width - filled)
        # the raced incumbent (a lucky single timing shows only once it has won its race)
        best = tuner.incumbent() if hasattr(tuner, "incumbent") else tuner.best
        if best is None:
            btxt = "best -"
        elif best.gflops is not None:
            btxt = f"best {best.gflops:.2f} GFLOP/s"
        else:
            btxt = f"best {best.cost * 1e3:.4f} ms"
        errs = sum(self.errors.values())
        kinds = ", ".join(f"{k} {v}" for k, v in self.errors.most_common(3))
        etxt = f"errors {errs}" + (f" ({kinds})" if errs else "")
        new = done - self._first
        elapsed = time.monotonic() - self._t0
        eta = _duration(elapsed / new * (total - done)) if new and total is not None else "?"
        count = f"{done}/{total}" if total is not None else f"{done}"
        again = f" | re-measured {self._again}" if self._again else ""
        return (f"[{tuner.task.name}] [{bar}] {count} trials | {btxt} | {etxt} | "
                f"ETA {eta}{again}")

    def __call__(self, tuner: Tuner, result: MeasureResult) -> None:
        if result.kind != "measure":
            self._again += 1
            if not self._rewrites():      # a line per re-measure run would only be noise;
                return                    # the final line counts them
        elif not result.ok:
            self.errors[result.error_kind.value] += 1
        self._show(self.line(tuner))

    def _stream(self) -> TextIO:
        return self.stream or sys.stderr

    def _rewrites(self) -> bool:
        if self.rewrite is not None:
            return self.rewrite
        isatty = getattr(self._stream(), "isatty", None)
        try:
            return bool(isatty and isatty())
        except ValueError:            # a closed stream
            return False

    def _show(self, text: str) -> None:
        stream = self._stream()
        if self._rewrites():
            pad = " " * max(0, self._len - len(text))
            stream.write("\r" + text + pad)
            self._len = len(text)
        else:
            stream.write(text + "\n")
        stream.flush()

    def finish(self, tuner: Tuner) -> None:
        self._show(self.line(tuner) + f" | done in {_duration(time.monotonic() - self._t0)}")
        if self._rewrites():
            self._stream().write("\n")
        self._len = 0


def progress_bar(stream: TextIO | None = None, rewrite: bool | None = None) -> ProgressBar:
    """A callback showing progress on ``stream`` (stderr): trials, best GFLOP/s, errors, ETA;
    one rewritten line on a terminal, a line per update elsewhere (``rewrite`` forces
    either)."""
    return ProgressBar(stream, rewrite=rewrite)
