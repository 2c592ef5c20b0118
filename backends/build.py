"""``build``: lower a schedule, generate code for a target, compile, load, wrap in a Module."""
from __future__ import annotations

from pathlib import Path

import cffi
import numpy as np

from ..errors import BuildError, RunError
from ..lang import dtype as dt
from ..lang.expr import Var
from ..schedule.lower import LoweredFunc, lower
from ..schedule.schedule import Schedule
from .arrays import host_arrays
from .c_codegen import RELEASE_SYMBOL, CSource, generate_c
from .compiler import check_sanitizer_runtime, compile_shared, flags_for
from .module import ArgChecker, TimeResult, pin_openmp_runtime, time_callable
from .sanitize import check_function_name
from .target import Target

_CFFI_TYPES = {"float16": "uint16_t", "bool": "bool"}


class CModule:
    """A compiled C function: call it with numpy arrays (outputs preallocated).

    ``module(*arrays)`` checks every argument (type, dtype, shape, layout, overlap) at each
    call. Trusted callers that run one function many times on buffers they already checked use
    :meth:`bind` (some arguments fixed and checked once) or :meth:`unchecked` (no checks):
    these skip the checks, and a wrong array there is undefined behaviour (reads or writes out
    of bounds), as in C.
    """

    def __init__(self, func: LoweredFunc, code: CSource, lib_path: Path, target: Target,
                 may_alias: tuple[int, ...] = ()):
        self.name = func.name
        self.lowered = func
        self.code = code
        self.source = code.source
        self.declaration = code.declaration
        self.lib_path = lib_path
        self.target = target
        self.uses_parallel = code.uses_parallel
        self.args = func.args
        self.may_alias = tuple(func.args[j].name for j in may_alias)
        self._checker = ArgChecker(func.name, func.args, func.size_vars, may_alias)
        self._ffi, self._lib = _load(str(lib_path), _cffi_decl(func))
        self._fn = getattr(self._lib, func.name)
        self._ptr_types = [f"{_CFFI_TYPES.get(t.dtype, dt.c_type(t.dtype))} *" for t in func.args]
        self._buf_types = [self._ffi.typeof(t[:-2] + "[]") for t in self._ptr_types]
        self._size_at = _size_locations(func)

    def release_workspaces(self) -> None:
        """Free the intermediates this function keeps between calls (those no call is using
        now); the next call allocates them again. Its library is shared by every module built
        from the same code, so this frees theirs too."""
        getattr(self._lib, RELEASE_SYMBOL)()

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

    def unchecked(self, *arrays: np.ndarray) -> None:
        """Call the function on ``arrays`` with NO checks: each must be a C-contiguous numpy
        array of its argument's dtype and shape (an output writeable, and sharing memory with
        no other argument unless both are in ``may_alias`` and it is the same buffer).
        Anything else is undefined behaviour. Raises RunError when the function fails."""
        buf = self._ffi.from_buffer
        ptrs = [buf(t, a) for t, a in zip(self._buf_types, arrays)]
        sizes = [arrays[j].shape[d] for j, d in self._sizes_at()]
        rc = self._fn(*ptrs, *sizes)
        if rc != 0:
            raise run_error(self.name, rc, self.code.checks)

    def _sizes_at(self) -> list[tuple[int, int]]:
        if self._size_at is None:
            raise TypeError(f"{self.name}(): a symbolic size is no argument's dimension on its "
                            "own, so only the checked call module(...) can bind it")
        return self._size_at

    def bind(self, *arrays: np.ndarray | None) -> BoundCall:
        """A callable for many calls: the arrays given here are checked once (dtype, shape,
        layout, overlap) and kept; ``None`` marks a free argument, passed at each call of the
        result in order, with NO checks (see :meth:`unchecked` for what it must be)::

            run = f.bind(None, w, out)     # A free; w and out fixed and checked now
            run(a)                         # f(a, w, out) without any check
        """
        return BoundCall(self, arrays)

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


class BoundCall:
    """A C function with some arguments fixed (see :meth:`CModule.bind`); calling it with the
    free arguments (``free`` names them, in order) runs the function without checks."""

    def __init__(self, module: CModule, arrays):
        n = len(module.args)
        if len(arrays) != n:
            names = ", ".join(t.name for t in module.args)
            raise TypeError(f"{module.name}.bind() takes {n} arguments ({names}; None for one "
                            f"given at each call); got {len(arrays)}")
        _check_fixed(module._checker, arrays)
        buf = module._ffi.from_buffer
        self.module = module
        self.free = tuple(t.name for t, a in zip(module.args, arrays) if a is None)
        self._slots = [j for j, a in enumerate(arrays) if a is None]
        self._types = [module._buf_types[j] for j in self._slots]
        self._args = [None if a is None else buf(t, a) for t, a in
                      zip(module._buf_types, arrays)]
        free_pos = {j: m for m, j in enumerate(self._slots)}
        self._sizes = [(free_pos.get(j), d, None if j in free_pos else arrays[j].shape[d])
                       for j, d in module._sizes_at()]
        self._fn, self._buf = module._fn, buf
        if not self._slots:                  # everything fixed: one tuple, no per-call work
            self._args = tuple(self._args) + tuple(v for _, _, v in self._sizes)

    def __call__(self, *free: np.ndarray) -> None:
        if not self._slots:
            rc = self._fn(*self._args)
        else:
            args = list(self._args)
            for j, t, a in zip(self._slots, self._types, free):
                args[j] = self._buf(t, a)
            if self._sizes:
                args += [v if m is None else free[m].shape[d] for m, d, v in self._sizes]
            rc = self._fn(*args)
        if rc != 0:
            m = self.module
            raise run_error(m.name, rc, m.code.checks)

    def __repr__(self):
        return f"BoundCall({self.module.name}, free={list(self.free)})"


def _check_fixed(checker: ArgChecker, arrays) -> None:
    """The bind-time checks of the arrays given (not None): each on its own, the static and
    bound dimensions of its shape, and their overlaps."""
    bound: dict = {}
    for k, (t, a) in enumerate(zip(checker.args, arrays)):
        if a is not None:
            checker._check_one(k, t, a, bound)
    for t, a in zip(checker.args, arrays):
        if a is None:
            continue
        want = tuple(bound.get(d, d) if isinstance(d, Var) else d for d in t.shape)
        if any(isinstance(w, int) and w != g for w, g in zip(want, a.shape)):
            raise ValueError(f"{checker.name}.bind(): argument '{t.name}' must have shape "
                             f"{checker._shape(t, bound)}; got {a.shape}")
    checker.check_overlap(arrays)


def _size_locations(func: LoweredFunc) -> list[tuple[int, int]] | None:
    """For each symbolic size, the (argument, dimension) whose extent it is; None when one is
    no argument's extent on its own."""
    out = []
    for v in func.size_vars:
        at = next(((j, d) for j, t in enumerate(func.args) for d, s in enumerate(t.shape)
                   if s is v), None)
        if at is None:
            return None    # a size only inside compound extents: the checked call binds it
        out.append(at)
    return out


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
            pin_openmp_runtime()     # the OpenMP runtime it brought outlives it (module.py)
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
    return f"int {func.name}({', '.join(params)});\nvoid {RELEASE_SYMBOL}(void);"


def build(s, args, target="c", name: str = "main", may_alias=()):
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
    float32 ``exp`` and ``sigmoid`` inline looptune's vectorizable exp (at most 1.02 ulp,
    NaN/inf/subnormals exact: backends/c_math.py); ``-libm-exp`` calls the C library's instead.
    A float32 division by a constant multiplies by the reciprocal and corrects the quotient
    with two fused multiply-adds (``lt_divf``: identical to the division for every x but
    0 < |x| < 2^-100, within 1 ulp there); ``-ieee-div`` keeps the division; with
    ``-fast-math`` it is a plain multiply by the reciprocal (within 1.5 ulp, as gcc's
    -ffast-math would make it).

    Intermediates too large for the stack are allocated once and kept between calls (a
    workspace per allocation site, up to 8 calls at a time; a ninth allocates its own): fresh
    pages at every call would cost a page fault per 4 KiB. ``module.release_workspaces()``
    frees them (the next call allocates again); the target option ``-alloc-per-call``
    allocates and frees them at every call instead.

    ``may_alias``: arguments (tensors of ``args``, or their names) that the caller may pass
    one buffer, such as an elementwise kernel's output written over an input of its shape.
    Their C parameters are not ``restrict`` (every other pointer is), and the checked call
    accepts them sharing the very same buffer. The result is exact only for a kernel that
    reads each element of the input at the index it writes, before writing it (a same-index
    elementwise map). OpenCL copies every argument into its own device buffer and ignores it.
    """
    check_function_name(name if not isinstance(s, LoweredFunc) else s.name)
    tgt = Target.parse(target)
    if not isinstance(s, (Schedule, LoweredFunc)):
        raise BuildError(f"build: expected a schedule (lt.create_schedule) or a lowered "
                         f"function; got {type(s).__name__}")
    func = s if isinstance(s, LoweredFunc) else lower(s, args, name=name,
                                                      region_hook=tgt.region_hook)
    alias = _alias_positions(func, may_alias)
    if tgt.kind == "opencl":
        from .opencl import build_opencl
        return build_opencl(func, tgt)
    threads = int(tgt.options["threads"]) if "threads" in tgt.options else None
    check_sanitizer_runtime(tgt)
    code = generate_c(func, threads, bool(tgt.options.get("bounds-check")), frozenset(alias),
                      bool(tgt.options.get("libm-exp")), bool(tgt.options.get("ieee-div")),
                      bool(tgt.options.get("fast-math")),
                      allocates_per_call(tgt))
    cc = tgt.options.get("cc", "gcc")
    flags = flags_for(tgt.options, code.uses_parallel)
    if code.vector_math:
        flags.append("-lmvec")
    lib = compile_shared(code.source, cc, flags, name=name)
    return CModule(func, code, lib, tgt, alias)


def allocates_per_call(tgt: Target) -> bool:
    """Whether the C code of target ``tgt`` allocates its heap intermediates at every call
    (-alloc-per-call, and under a sanitizer: each intermediate its own allocation, its exact
    size, checked) rather than keeping workspaces between calls."""
    return bool(tgt.options.get("alloc-per-call") or tgt.options.get("sanitize"))


def _alias_positions(func: LoweredFunc, may_alias) -> tuple[int, ...]:
    """The argument positions ``may_alias`` names (tensors of the arguments or their names);
    a BuildError for anything else."""
    if isinstance(may_alias, str) or not hasattr(may_alias, "__iter__"):
        raise BuildError(f"build(may_alias={may_alias!r}): give a list of arguments (tensors "
                         "or their names), e.g. may_alias=[X, Y]")
    names = [t.name for t in func.args]
    out: list[int] = []
    for m in may_alias:
        hits = ([j for j, t in enumerate(func.args) if t is m] if not isinstance(m, str) else
                [j for j, n in enumerate(names) if n == m])
        what = m if isinstance(m, str) else getattr(m, "name", repr(m))
        if len(hits) != 1:
            why = "is not one of" if not hits else "names several of"
            raise BuildError(f"build(may_alias=[...]): '{what}' {why} the arguments of "
                             f"{func.name} ({', '.join(names)}); name each once, by tensor "
                             "or by a unique name")
        out.extend(hits)
    if out and len(set(out)) < 2:
        raise BuildError(f"build(may_alias=[...]): got only '{names[out[0]]}'; name at least "
                         "two arguments (an output and the input it may be written over)")
    return tuple(sorted(set(out)))
