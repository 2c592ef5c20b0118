"""Where a measurement was taken: the host's CPU model, the resolved ``-march``, the compiler.

Timings taken on one machine say little about another. Tuning records carry
:func:`host_info`; :func:`same_host` decides whether a record's timings are comparable with
this machine's (the same CPU model and resolved ``-march``), which ``load_best``,
``apply_history_best`` and the command line use to never apply another host's records silently.
"""
from __future__ import annotations

import functools
import os
import platform
from typing import Any

from ..backends.march import resolved_march
from ..errors import LooptuneError


@functools.lru_cache(maxsize=1)
def _machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"hostname": platform.node(), "cpu": cpu, "ncpu": os.cpu_count(),
            "machine": platform.machine(), "os": platform.platform(),
            "python": platform.python_version()}


def host_info(target: str | None = None) -> dict[str, Any]:
    """Where measurements were taken: host name, CPU model and count, OS, Python; for a C
    target also its compiler (``cc``, ``cc_version``) and the resolved ``-march`` (the
    target's own, else ``$LOOPTUNE_MARCH``, else native)."""
    from ..backends.target import MARCH_ENV
    return dict(_host_info(target, os.environ.get(MARCH_ENV, "")))


@functools.cache
def _host_info(target: str | None, march_env: str) -> dict[str, Any]:
    """host_info, cached per target and default -march (``march_env`` is only a cache key)."""
    info = dict(_machine_info())
    if target is None:
        return info
    from ..backends.target import Target
    try:
        t = Target.parse(target)
        march = t.march()
    except LooptuneError:
        return info
    if t.kind == "c":
        from ..backends.compiler import compiler_version
        cc = str(t.options.get("cc", "gcc"))
        try:
            info["cc_version"] = compiler_version(cc)
        except LooptuneError:
            info["cc_version"] = None
        info["cc"] = cc
        info["march"] = resolved_march(cc, march)
    return info


HOST_KEYS = ("cpu", "march")          # what must agree for timings to be comparable


def same_host(recorded: dict[str, Any], here: dict[str, Any]) -> bool:
    """Whether a record's ``host`` is this machine as far as timings go: the same CPU model
    and resolved ``-march`` (fields a record lacks, as in older logs, are not compared)."""
    return all(recorded.get(k) in (None, "") or here.get(k) in (None, "")
               or recorded.get(k) == here.get(k) for k in HOST_KEYS)


def describe_host(h: dict[str, Any]) -> str:
    """``"AMD EPYC 7B13, -march=znver3"`` (what a warning names)."""
    cpu = h.get("cpu") or "an unknown CPU"
    return f"{cpu}, -march={h['march']}" if h.get("march") else str(cpu)
