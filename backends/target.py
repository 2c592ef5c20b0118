"""Target strings: ``"c"``, ``"c -cc=clang -threads=2"``, ``"opencl -device=cpu"``."""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import BuildError
from ..schedule.passes import REGION_HOOKS

_KNOWN = {
    "c": {"cc", "threads", "sanitize", "fast-math", "O", "march", "bounds-check", "libm-exp",
          "ieee-div", "alloc-per-call"},
    "opencl": {"device", "platform"},
}
# options that take a value, with the values they accept (None: any non-empty text)
_VALUES = {
    "cc": (None, "a compiler such as -cc=clang"),
    "threads": (re.compile(r"[1-9][0-9]*"), "a positive integer such as -threads=2"),
    "O": (re.compile(r"[0-3sgz]|fast"), "an optimisation level such as -O=2"),
    "march": (re.compile(r"[A-Za-z0-9_.+-]+"), "a CPU such as -march=native"),
    "sanitize": (re.compile(r"[a-z-]+(,[a-z-]+)*"), "sanitizers such as -sanitize=address"),
    "device": (None, "a device type such as -device=cpu"),
    "platform": (None, "a platform name such as -platform=pocl"),
}
_BARE_OK = {"sanitize", "fast-math", "bounds-check", "libm-exp", "ieee-div",
            "alloc-per-call"}
MARCH_ENV = "LOOPTUNE_MARCH"      # the -march of C targets that name none (default: native)


def march_of(options: dict) -> str:
    """The ``-march`` that C target options compile for: their ``march``, else
    ``default_march()``."""
    return str(options.get("march") or default_march())


def default_march() -> str:
    """The ``-march`` of a C target without ``-march=``: ``$LOOPTUNE_MARCH`` when set (e.g.
    ``x86-64-v3`` to build, size and tune everything for an AVX2 machine on an AVX-512 one, as
    ``HL_JIT_TARGET`` does for Halide and ``ATEN_CPU_CAPABILITY`` for torch), else ``native``.
    A value that is no CPU name raises BuildError naming the variable."""
    val = os.environ.get(MARCH_ENV, "").strip()
    if not val:
        return "native"
    if not _VALUES["march"][0].fullmatch(val):
        raise BuildError(f"${MARCH_ENV}={val!r}: the default -march needs a CPU name such as "
                         f"x86-64-v3, haswell or native; set it to one, or unset {MARCH_ENV} "
                         "for native")
    return val


@dataclass(frozen=True)
class Target:
    kind: str
    options: dict = field(default_factory=dict)

    def __str__(self) -> str:
        opts = " ".join(f"-{k}" if v is True else f"-{k}={v}" for k, v in
                        sorted(self.options.items()))
        return f"{self.kind} {opts}".strip()

    def __hash__(self):
        return hash(str(self))

    def __post_init__(self):
        if self.kind not in _KNOWN:
            raise BuildError(f"unknown target '{self.kind}'; use 'c' or 'opencl'")
        for key, val in self.options.items():
            _check_option(self.kind, key, val, f"Target({self.kind!r}, {self.options!r})")

    @staticmethod
    def parse(text) -> Target:
        """Parse a target string; unknown kinds or options raise BuildError naming them."""
        if isinstance(text, Target):
            return text
        if text is None:
            text = "c"
        bad = sorted({ch for ch in str(text) if not ch.isprintable() and not ch.isspace()})
        if bad:
            raise BuildError(f"target({text!r}): a target holds no control characters; got "
                             f"{bad}; write it as plain text such as 'c -cc=clang'")
        parts = str(text).split()
        if not parts:
            parts = ["c"]
        kind = parts[0]
        if kind not in _KNOWN:
            raise BuildError(f"unknown target '{kind}' in {text!r}; use 'c' or 'opencl'")
        opts: dict = {}
        for p in parts[1:]:
            if not p.startswith("-"):
                raise BuildError(f"target {text!r}: option '{p}' must look like -name=value")
            key, _, val = p[1:].partition("=")
            if key not in _KNOWN[kind]:
                raise BuildError(f"target {text!r}: unknown option '-{key}' for '{kind}'; "
                                 f"known: {', '.join('-' + k for k in sorted(_KNOWN[kind]))}")
            opts[key] = val if val else True
            _check_option(kind, key, opts[key], f"target({text!r})")
        return Target(kind, opts)

    @property
    def region_hook(self):
        """What this target tells the statement passes about loop bodies they must keep whole
        (``lower(region_hook=...)``): opencl's work-group regions; None for C."""
        from . import opencl_barriers  # noqa: F401  (registers the opencl hook)
        return REGION_HOOKS.get(self.kind)

    def vector_lanes(self, dtype: str = "float32") -> int:
        """How many ``dtype`` elements one SIMD register of this C target holds, as its
        compiler sees ``-march`` (``march()``: native by default): 16 float32 lanes with
        AVX-512, 8 with AVX/AVX2, 4 with SSE or NEON. For schedules that size register tiles
        to the machine."""
        if self.kind != "c":
            raise BuildError(f"vector_lanes() answers for C targets, not '{self}'; an "
                             "OpenCL device reports its own preferred vector widths")
        try:
            itemsize = np.dtype(dtype).itemsize
        except TypeError:
            raise BuildError(f"vector_lanes(): unknown dtype {dtype!r}; use a numpy dtype "
                             "name such as 'float32'") from None
        from .compiler import simd_bytes
        return max(1, simd_bytes(self.options.get("cc", "gcc"), self.march()) // itemsize)

    def march(self) -> str:
        """The ``-march`` this C target compiles for: its ``-march=`` option, else
        ``default_march()`` (``$LOOPTUNE_MARCH``, else native)."""
        return march_of(self.options)

    def vector_registers(self) -> int:
        """How many SIMD registers the compiler has for this C target: 32 with AVX-512 (zmm)
        and on AArch64, 16 with AVX/AVX2/SSE on x86-64. For register tiles: a tile of ``r``
        accumulators needs ``r`` plus the operands it loads per step to fit."""
        import platform
        lanes_bytes = self.vector_lanes("uint8")
        if lanes_bytes >= 64 or platform.machine() in ("aarch64", "arm64"):
            return 32
        return 16

    def gemm_tile(self, dtype: str = "float32") -> tuple[int, int]:
        """(rows, columns) of the register tile of a broadcast-FMA contraction on this C
        target: two vectors a row, and as many rows as let 2 * rows accumulators, the 2
        vectors loaded per step, a broadcast and one spare fit the vector registers: 14 x 32
        float32 with AVX-512 (28 of 32 zmm accumulate), 6 x 16 with AVX2 (8 x 16 spills
        there). For hand schedules of matmuls. The former cap of 8 rows (a 16-accumulator
        8 x 32 tile) left the micro-kernel loading 10 operands per 16 FMAs: 1024^3 sgemm on one
        Ice Lake core (2-core Xeon VM, model 106) 17.05 -> 15.47 ms (median of 20 interleaved
        blocks; 12 rows 15.70); torch's MKL ran 13.0-15.2 ms in the same minutes."""
        rows = max(1, (self.vector_registers() - 4) // 2)
        return rows, 2 * self.vector_lanes(dtype)

    def threads(self) -> int:
        """How many threads a parallel loop of this target runs on: ``-threads=N``, else
        ``$OMP_NUM_THREADS`` (its first level, as the OpenMP runtime reads it, e.g. ``4`` of
        ``4,2``) when it is a positive integer, else the CPUs this process may use. For
        schedules that split work among the threads: a schedule that splits rows in two
        while OpenMP runs one thread would leave half the work serial."""
        n = int(self.options.get("threads", 0) or 0)
        if n:
            return n
        import os
        env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
        if env.isdigit() and int(env) > 0:
            return int(env)
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            (os.cpu_count() or 1)

    def cache_bytes(self, level: int) -> int:
        """The size in bytes of one instance of this machine's data (or unified) cache at
        ``level`` (1, 2 or 3), as Linux's sysfs tells for cpu0, else ``sysconf``, else a
        common size (32 KiB, 512 KiB, 8 MiB). For blocking loops to the caches."""
        if level not in _CACHE_DEFAULTS:
            raise BuildError(f"cache_bytes({level!r}): the level must be 1, 2 or 3")
        return _cache_bytes(level)



_CACHE_DEFAULTS = {1: 32 << 10, 2: 512 << 10, 3: 8 << 20}
_SYSCONF = {1: "SC_LEVEL1_DCACHE_SIZE", 2: "SC_LEVEL2_CACHE_SIZE", 3: "SC_LEVEL3_CACHE_SIZE"}


@functools.cache
def _cache_bytes(level: int) -> int:
    import glob
    import os
    for d in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(f"{d}/level") as f:
                lv = int(f.read())
            with open(f"{d}/type") as f:
                kind = f.read().strip()
            with open(f"{d}/size") as f:
                size = f.read().strip()
        except (OSError, ValueError):
            continue
        if lv == level and kind in ("Data", "Unified"):
            unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
            digits = size.rstrip("KMG")
            if digits.isdigit() and int(digits) > 0:
                return int(digits) * unit
    try:
        n = os.sysconf(_SYSCONF[level])
        if n > 0:
            return n
    except (ValueError, OSError):
        pass
    return _CACHE_DEFAULTS[level]


def _check_option(kind: str, key: str, val, where: str) -> None:
    """BuildError unless ``-key=val`` is an option of target ``kind`` with a valid value."""
    if key not in _KNOWN[kind]:
        raise BuildError(f"{where}: unknown option '-{key}' for '{kind}'; known: "
                         f"{', '.join('-' + k for k in sorted(_KNOWN[kind]))}")
    if val is True and key in _BARE_OK:
        return
    text = "" if val is True else str(val)
    if key not in _VALUES:
        raise BuildError(f"{where}: option -{key} takes no value; got -{key}={text}; write "
                         f"-{key} alone")
    pattern, example = _VALUES[key]
    what, good = example.split(" such as ")
    if not text or (pattern is not None and not pattern.fullmatch(text)):
        got = f"-{key}={text}" if text else f"-{key} without a value"
        raise BuildError(f"{where}: option -{key} needs {what}; got {got}; write e.g. {good}")
