"""``build``: lower a schedule, generate code for a target, compile, load, wrap in a Module."""
from __future__ import annotations

from pathlib import Path

import cffi
import numpy as np

from ..errors import BuildError, RunError
from ..lang import dtype as dt
from ..schedule.lower import LoweredFunc, lower
from ..schedule.schedule import Schedule
from .arrays import host_arrays
from .c_codegen import CSource, generate_c
from .compiler import check_sanitizer_runtime, compile_shared, flags_for
from .module import ArgChecker, TimeResult, time_callable
from .sanitize import check_function_name
from .target import Target

_CFFI_TYPES = {"float16": "uint16_t", "bool": "bool"}


class CModule:
    """A compiled C function: call it with numpy arrays (outputs preallocated)."""

    def __init__(self, func: LoweredFunc, code: CSource, lib_path: Path, target: Target):
        self.name = func.name
        self.lowered = func
        self.code = code
        self.source = code.source
        self.declaration = code.declaration
        self.lib_path = lib_path
        self.target = target
        self.uses_parallel = code.uses_parallel
        self.args = func.args
        self._checker = ArgChecker(func.name, func.args, func.size_vars)
        self._ffi, self._lib = _load(str(lib_path), _cffi_decl(func))
        self._fn = getattr(self._lib, func.name)
        self._ptr_types = [f"{_CFFI_TYPES.get(t.dtype, dt.c_type(t.dtype))} *" for t in func.args]

    def _pointers(self, arrays) -> list:
        cast = self._ffi.cast
        return [cast(pt, a.ctypes.data) for pt, a in zip(self._ptr_types, arrays)]

    def __call__(self, *arrays: np.ndarray) -> None:
        arrays, finish = host_arrays(self._checker, arrays)     # torch, DLPack, bfloat16...
        sizes = self._checker.check(arrays)
        rc = self._fn(*self._pointers(arrays), *sizes)
        if rc != 0:
            raise run_error(self.name, rc, self.code.checks)
        if finish is not None:
            finish()

    def time(self, *arrays: np.ndarray, number: int = 10, repeat: int = 5,
             min_repeat_ms: float = 0, warmup: int = 1) -> TimeResult:
        """Median/mean seconds per call over ``repeat`` repeats of ``number`` calls."""
        arrays, _ = host_arrays(self._checker, arrays)   # bfloat16 outputs are not written
        sizes = self._checker.check(arrays)
        ptrs = self._pointers(arrays)
        fn = self._fn

        def run():
            rc = fn(*ptrs, *sizes)
            if rc != 0:
                raise run_error(self.name, rc, self.code.checks)
        return time_callable(run, number, repeat, min_repeat_ms, warmup)

    def __repr__(self):
        return f"Module({self.name}, target='{self.target}')"


# Loaded libraries stay loaded for the life of the process: unloading one whose code ran on
# OpenMP's persistent worker threads can unmap code those threads still return into. Entries
# are content-addressed (the path hashes source and flags), so reusing one is always right.
_LOADED: dict[tuple[str, str], tuple] = {}


def _load(path: str, decl: str) -> tuple:
    key = (path, decl)
    if key not in _LOADED:
        ffi = cffi.FFI()
        ffi.cdef(decl)
        try:
            _LOADED[key] = (ffi, ffi.dlopen(path))
        except OSError as e:
            raise BuildError(f"build: cannot load the compiled library {path}: {e}; rebuild "
                             "without the target options that need a runtime this process "
                             "lacks (such as -sanitize)", path) from None
    return _LOADED[key]


ERR_ALLOC, ERR_BOUNDS = 1, 256      # LT_ERR_ALLOC, LT_ERR_BOUNDS of the generated C


def run_error(fname: str, code: int, checks=()) -> RunError:
    """The exception for error code ``code`` returned by generated function ``fname``."""
    if code == ERR_ALLOC:
        return RunError(f"{fname}(): an intermediate buffer could not be allocated (its size "
                        "overflows 64 bits or memory is exhausted); got error code 1; use "
                        "smaller sizes, or compute_at the producer inside a loop of its "
                        "consumer so that it needs a smaller region", code)
    if ERR_BOUNDS <= code < ERR_BOUNDS + len(checks):
        return RunError(checks[code - ERR_BOUNDS].message(fname, code), code)
    return RunError(f"{fname}(): the compiled function failed; got error code {code}", code)


def _cffi_decl(func: LoweredFunc) -> str:
    params = [f"{_CFFI_TYPES.get(t.dtype, dt.c_type(t.dtype))} *" for t in func.args]
    params += ["int64_t"] * len(func.size_vars)
    return f"int {func.name}({', '.join(params)});"


def build(s, args, target="c", name: str = "main"):
    """Compile schedule ``s`` into a callable taking ``args`` (tensors, in order).

    ``target``: ``"c"`` (gcc -O3 -march=native, OpenMP for parallel loops) with options such
    as ``-cc=clang``, ``-threads=2``, ``-sanitize=address,undefined``, ``-fast-math``,
    ``-bounds-check``; or ``"opencl"`` with ``-device=cpu|gpu``. Raises ScheduleError for an
    invalid schedule and BuildError when code generation or the compiler fails.

    Indices that bound inference can follow are checked when the schedule is lowered; an index
    read from data (a gather such as ``A[I[i]]``) is not, and an out-of-range one reads outside
    ``A``. With ``-bounds-check`` the C code checks every data-dependent index at run time: the
    call then raises RunError naming the tensor, the dimension and the index expression (an
    exported function returns ``256 + k`` for check ``k``). Every C function returns 1 when an
    intermediate buffer cannot be allocated (size overflow or out of memory; RunError in
    Python) and never aborts. ``-sanitize=address`` (and thread, leak) needs its runtime
    preloaded into the Python process (``LD_PRELOAD``); without it build raises BuildError.
    """
    check_function_name(name if not isinstance(s, LoweredFunc) else s.name)
    tgt = Target.parse(target)
    if not isinstance(s, (Schedule, LoweredFunc)):
        raise BuildError(f"build: expected a schedule (lt.create_schedule) or a lowered "
                         f"function; got {type(s).__name__}")
    func = s if isinstance(s, LoweredFunc) else lower(s, args, name=name)
    if tgt.kind == "opencl":
        from .opencl import build_opencl
        return build_opencl(func, tgt)
    threads = int(tgt.options["threads"]) if "threads" in tgt.options else None
    check_sanitizer_runtime(tgt)
    code = generate_c(func, threads, bool(tgt.options.get("bounds-check")))
    cc = tgt.options.get("cc", "gcc")
    flags = flags_for(tgt.options, code.uses_parallel)
    if code.vector_math:
        flags.append("-lmvec")
    lib = compile_shared(code.source, cc, flags, name=name)
    return CModule(func, code, lib, tgt)
