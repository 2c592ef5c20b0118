"""The thread pools in a looptune process: the settings looptune chooses for them.

Two pools share the cores of a process that runs looptune kernels: the OpenMP runtime of our
kernels (libgomp) and the BLAS that numpy calls (OpenBLAS in numpy's wheels). Each reads its
settings from the environment once, when it is loaded, so they are chosen here, at
``import looptune``, before looptune imports numpy; a setting the user gave always wins, and a
mark variable tells worker processes (which inherit the environment) that looptune chose it.

- **OpenMP** (``GOMP_SPINCOUNT=10000``): libgomp's idle threads spin before they sleep, for
  GOMP_SPINCOUNT pauses after every parallel region: 300000 by default (milliseconds), so numpy's
  BLAS called right after a looptune kernel ran on fewer free cores. The passive policy
  (``OMP_WAIT_POLICY=passive``, idle threads sleep at once, looptune's former default) instead
  makes every call of a kernel wake the sleeping threads: about 0.1 ms per parallel region on a
  2-core KVM guest (Intel Xeon, model 167, 2026-11-29), a tenth of a 4096 x 1024 layernorm and
  3 ms of a transformer layer's 1.7 (``benchmarks/models.py``: 1.69 -> 0.95 ms with the short
  spin). 10000 pauses (about 0.1 ms at the ~11 ns a pause took there; up to ~0.5 ms on cores
  whose pause is 140 cycles) keep back-to-back kernels warm and free the cores almost at once:
  looptune sgemm, numpy sgemm, looptune sgemm in one process ran at 1.00x their solo speed
  (``benchmarks/threadpools.py --policies default,spin10k``).
- **OpenBLAS** (``OPENBLAS_THREAD_TIMEOUT=18``): OpenBLAS's idle threads spin for 2**28 clock
  cycles (about 0.1 s at 2.6 GHz) after every call. On a 2-core machine our 2-thread kernel
  called within that time ran on one free core: sgemm 1024 at 1.8-2.1x its solo time, right
  after numpy's. 2**18 cycles (about 0.1 ms) keeps back-to-back BLAS calls warm and frees the
  cores almost at once. This only works when looptune is imported before numpy (numpy loads
  OpenBLAS when it is imported); :func:`blas_settings` says whether it did.

``benchmarks/threadpools.py`` measures both (solo, mixed, after a pause, idle CPU).
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

OPENMP_DEFAULTS = {"GOMP_SPINCOUNT": "10000"}
_OPENMP_USER_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_OPENMP_MARK = "LOOPTUNE_OPENMP_DEFAULTS"      # set when looptune chose the settings

BLAS_DEFAULTS = {"OPENBLAS_THREAD_TIMEOUT": "18"}
_BLAS_USER_VARS = ("OPENBLAS_THREAD_TIMEOUT",)
_BLAS_MARK = "LOOPTUNE_BLAS_DEFAULTS"


def _choose(defaults: dict[str, str], user_vars: tuple[str, ...], mark: str) -> dict[str, str]:
    if any(v in os.environ for v in user_vars) and mark not in os.environ:
        return {}
    os.environ.update(defaults)
    os.environ[mark] = "1"
    return dict(defaults)


def configure_openmp_runtime() -> dict[str, str]:
    """Set looptune's OpenMP wait policy in the environment unless the user set one; returns
    what was set. Worker processes inherit it (and the mark that looptune chose it)."""
    return _choose(OPENMP_DEFAULTS, _OPENMP_USER_VARS, _OPENMP_MARK)


def configure_blas_threads() -> dict[str, str]:
    """Set OpenBLAS's idle-thread timeout in the environment unless the user set one; returns
    what was set (it takes effect only where OpenBLAS is not loaded yet)."""
    return _choose(BLAS_DEFAULTS, _BLAS_USER_VARS, _BLAS_MARK)


def _maps() -> str:
    try:
        with open("/proc/self/maps") as f:
            return f.read()
    except OSError:
        return ""


def _gomp_loaded(maps: str) -> bool:
    """Whether the system's libgomp (the one our kernels link) is already loaded; the copies
    that wheels vendor (``libgomp-<hash>.so``) are other runtimes with their own settings."""
    return re.search(r"/libgomp\.so", maps) is not None


def _blas_loaded(maps: str) -> bool:
    """Whether numpy (and with it its BLAS) was loaded before looptune."""
    return "numpy" in sys.modules or re.search(r"openblas", maps, re.IGNORECASE) is not None


# What the peer libraries run with when nobody chose for them: libgomp's own spin (what
# GOMP_SPINCOUNT is when OMP_WAIT_POLICY and it are unset) and OpenBLAS's own idle timeout.
LIBRARY_DEFAULTS = {"GOMP_SPINCOUNT": "300000", "OPENBLAS_THREAD_TIMEOUT": "28"}


def peer_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a process that times another library (numpy, torch, Halide, ONNX Runtime)
    against looptune: the thread-pool settings looptune chose (not the user's) replaced by each
    runtime's own default, spelled out so that a looptune imported in that process leaves them
    alone. A peer then runs as its users get it: torch's bundled libgomp with libgomp's spin,
    not with looptune's short spin (or the passive policy, which cost torch eager a third of a
    transformer layer's time)."""
    out = dict(env)
    if out.pop(_OPENMP_MARK, None):
        for v in _OPENMP_USER_VARS:
            out.pop(v, None)
        out["GOMP_SPINCOUNT"] = LIBRARY_DEFAULTS["GOMP_SPINCOUNT"]
    if out.pop(_BLAS_MARK, None):
        out["OPENBLAS_THREAD_TIMEOUT"] = LIBRARY_DEFAULTS["OPENBLAS_THREAD_TIMEOUT"]
    return out


def openmp_settings() -> dict[str, str | bool | None]:
    """The wait-policy settings the OpenMP runtime starts (or started) with in this process,
    who chose them (``"looptune"`` or ``"user"``), and whether libgomp was already loaded when
    looptune was imported (then the runtime kept what it had read before)."""
    out: dict[str, str | bool | None] = {v: os.environ.get(v) for v in _OPENMP_USER_VARS}
    out["chosen_by"] = "looptune" if os.environ.get(_OPENMP_MARK) else "user"
    out["runtime_loaded_before_looptune"] = _GOMP_PRELOADED
    return out


def blas_settings() -> dict[str, str | bool | None]:
    """OpenBLAS's idle-thread timeout in this process's environment, who chose it, and whether
    numpy's BLAS was loaded before looptune was imported (then it kept its own timeout)."""
    out: dict[str, str | bool | None] = {v: os.environ.get(v) for v in _BLAS_USER_VARS}
    out["chosen_by"] = "looptune" if os.environ.get(_BLAS_MARK) else "user"
    out["loaded_before_looptune"] = _BLAS_PRELOADED
    return out


_MAPS = _maps()                     # read once, at import
_GOMP_PRELOADED = _gomp_loaded(_MAPS)
_BLAS_PRELOADED = _blas_loaded(_MAPS)
del _MAPS
configure_openmp_runtime()
configure_blas_threads()
