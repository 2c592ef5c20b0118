"""The run-time Module: a compiled function with argument checks and timing."""
from __future__ import annotations

import os
import re
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from ..lang.expr import Expr, Var
from ..lang.simplify import simplify
from ..lang.visitor import substitute


@dataclass
class TimeResult:
    """Seconds per call: every repeat in ``results``; ``median`` and ``mean`` of them."""

    results: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    def __repr__(self):
        return (f"TimeResult(median={self.median * 1e3:.4f} ms, mean={self.mean * 1e3:.4f} ms, "
                f"repeats={len(self.results)})")


class ArgChecker:
    """Checks arrays against declared tensors and binds symbolic sizes from their shapes."""

    def __init__(self, name: str, args, size_vars: list[Var], may_alias=frozenset()):
        self.name = name
        self.args = list(args)
        self.size_vars = list(size_vars)
        self.dtypes = [np.dtype(t.dtype) for t in self.args]
        self.outputs = {k for k, t in enumerate(self.args) if not _is_input(t)}
        self.may_alias = frozenset(may_alias)      # positions that may share one buffer

    def check(self, arrays) -> list[int]:
        """Validate ``arrays``; return the values of the symbolic sizes, in order."""
        if len(arrays) != len(self.args):
            names = ", ".join(t.name for t in self.args)
            raise TypeError(f"{self.name}() takes {len(self.args)} arrays ({names}); "
                            f"got {len(arrays)}")
        bound: dict[Var, int] = {}
        for k, (t, a) in enumerate(zip(self.args, arrays)):
            self._check_one(k, t, a, bound)
        for k, (t, a) in enumerate(zip(self.args, arrays)):
            for d, (want, got) in enumerate(zip(t.shape, a.shape)):
                w = want if isinstance(want, int) else simplify(substitute(want, {
                    v: _c(n) for v, n in bound.items()}))
                w = getattr(w, "value", w)
                if not isinstance(w, int):
                    raise ValueError(f"{self.name}(): argument '{t.name}' dimension {d} is {want}, "
                                     "which no argument's shape binds")
                if w != got:
                    raise ValueError(f"{self.name}(): argument '{t.name}' must have shape "
                                     f"{self._shape(t, bound)}; got {a.shape} (dimension {d} "
                                     f"is {got}, expected {w})")
        self.check_overlap(arrays)
        return [bound[v] for v in self.size_vars]

    def check_overlap(self, arrays) -> None:
        """No output shares memory with another argument (None: not given), except two
        positions of ``may_alias`` passed the very same buffer."""
        for k in self.outputs:
            for j, b in enumerate(arrays):
                a = arrays[k]
                if j == k or a is None or b is None or not np.may_share_memory(a, b):
                    continue
                if {j, k} <= self.may_alias and _same_buffer(a, b):
                    continue
                how = ("the same buffer is allowed, not a partial overlap" if {j, k} <=
                       self.may_alias else "in-place updates need both named in "
                       "build(..., may_alias=[...])")
                raise ValueError(f"{self.name}(): output '{self.args[k].name}' shares memory "
                                 f"with argument '{self.args[j].name}'; pass separate arrays "
                                 f"({how})")

    def _check_one(self, k, t, a, bound) -> None:
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{self.name}(): argument '{t.name}' must be a numpy.ndarray; got "
                            f"{type(a).__name__}")
        if a.dtype != self.dtypes[k]:
            raise TypeError(f"{self.name}(): argument '{t.name}' must have dtype {t.dtype}; got "
                            f"{a.dtype} (convert with .astype(np.{t.dtype}))")
        if a.ndim != t.ndim:
            raise ValueError(f"{self.name}(): argument '{t.name}' must have {t.ndim} dimensions "
                             f"(shape {self._shape(t, {})}); got shape {a.shape}")
        if not a.flags.c_contiguous:
            raise ValueError(f"{self.name}(): argument '{t.name}' must be C-contiguous; pass "
                             "np.ascontiguousarray(...)")
        if k in self.outputs and not a.flags.writeable:
            raise ValueError(f"{self.name}(): output '{t.name}' is read-only")
        for want, got in zip(t.shape, a.shape):
            if isinstance(want, Var):
                if want in bound and bound[want] != got:
                    raise ValueError(f"{self.name}(): size '{want.name}' is {bound[want]} from an "
                                     f"earlier argument but argument '{t.name}' gives {got}")
                bound[want] = got

    @staticmethod
    def _shape(t, bound) -> tuple:
        return tuple(s if isinstance(s, int) else (bound.get(s, s) if isinstance(s, Var) else s)
                     for s in t.shape)


def _same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    """Both arrays are the same bytes (start and size)."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.nbytes == b.nbytes)


def _c(n: int) -> Expr:
    from ..lang.expr import Const
    return Const(n, "int32")


def _is_input(t) -> bool:
    from ..lang.tensor import PlaceholderOp
    return isinstance(t.op, PlaceholderOp)


def time_callable(run, number: int = 10, repeat: int = 5, min_repeat_ms: float = 0,
                  warmup: int = 1) -> TimeResult:
    """Time ``run()`` as TVM does: ``number`` calls per repeat (raised until a repeat lasts
    ``min_repeat_ms``), ``repeat`` repeats, one warm-up call first."""
    for _ in range(warmup):
        run()
    number = max(1, int(number))
    if min_repeat_ms > 0:
        while True:
            t0 = time.perf_counter()
            for _ in range(number):
                run()
            dt_ms = (time.perf_counter() - t0) * 1e3
            if dt_ms >= min_repeat_ms or number >= 1 << 20:
                break
            number = max(number * 2, int(number * min_repeat_ms / max(dt_ms, 1e-3) * 1.1))
    res = []
    for _ in range(max(1, int(repeat))):
        t0 = time.perf_counter()
        for _ in range(number):
            run()
        res.append((time.perf_counter() - t0) / number)
    return TimeResult(res)


def warm_up(run, ms: float, min_calls: int = 1) -> tuple[int, float]:
    """Call ``run()`` untimed, back to back, for about ``ms`` milliseconds and at least
    ``min_calls`` times, so that its threads (and the cores they run on) are awake when it is
    timed; (the calls made, the seconds per call over the last half of them: the warm rate)."""
    t_start = time.perf_counter()
    stamps = [t_start]
    while len(stamps) <= min_calls or (stamps[-1] - t_start) * 1e3 < ms:
        run()
        stamps.append(time.perf_counter())
    half = min(len(stamps) // 2, len(stamps) - 2)
    return len(stamps) - 1, max((stamps[-1] - stamps[half]) / (len(stamps) - 1 - half), 1e-7)


# ---- the OpenMP runtime's wait policy: chosen in ..runtime_env, when looptune is imported ---

from ..runtime_env import (OPENMP_DEFAULTS, configure_openmp_runtime,  # noqa: E402,F401
                           openmp_settings)

# Pinning: unloading the OpenMP runtime while its idle threads still run its code kills the
# process with SIGSEGV. With OMP_WAIT_POLICY=active they spin forever, so a process that ran a
# parallel kernel crashed at exit, when its kernels (the runtime's only users) were unloaded.
_PINNED: set[str] = set()
_OPENMP_RUNTIME = re.compile(r"\S*/lib(?:gomp|omp|iomp5)(?:-[0-9a-f]+)?\.so[.0-9]*$",
                             re.MULTILINE)


def pin_openmp_runtime() -> bool:
    """Keep every OpenMP runtime loaded in this process (libgomp; clang's libomp) loaded until
    the process ends (``RTLD_NODELETE``), so that unloading kernels never unloads the code
    OpenMP's idle threads run. The C backend calls it after loading each compiled library;
    returns whether a runtime is pinned."""
    import ctypes
    mode = getattr(os, "RTLD_NODELETE", 0) | getattr(os, "RTLD_NOLOAD", 0)
    try:
        with open("/proc/self/maps") as f:
            # the regex only on the lines naming an OpenMP library: run over the whole map
            # (one line per mapping, five or so per loaded library) it took 45 ms once 500
            # kernels were loaded, after every load: quadratic in a long-running process
            mapped = set(_OPENMP_RUNTIME.findall(
                "\n".join(ln for ln in f.read().splitlines() if "omp" in ln)))
    except OSError:                       # no /proc: the system's libgomp, if it is loaded
        mapped = {"libgomp.so.1"}
    for path in sorted(mapped - _PINNED):
        try:
            ctypes.CDLL(path, mode=mode)
            _PINNED.add(path)
        except OSError:
            pass
    return bool(_PINNED)

