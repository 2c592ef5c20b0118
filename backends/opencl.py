"""The OpenCL runtime: device selection, a program cache, and the callable CLModule.

``build_opencl(func, target)`` generates the kernels (:mod:`.opencl_codegen`), picks a device
from the target string, compiles the program (cached in memory by source and device; pyopencl
keeps compiled binaries on disk), checks the work-group sizes against the device and returns a
:class:`CLModule`.

Target options: ``-device=cpu|gpu|accelerator`` filters by device type (without it GPUs come
first); ``-platform=NAME`` keeps platforms whose name or version contains NAME (case
insensitive). Among the matching devices the first that compiles a trivial kernel is used (an
installed platform may be unable to compile on this CPU); none raises BuildError listing them.
"""
from __future__ import annotations

import hashlib
import logging
import threading

import numpy as np

from ..errors import BuildError, RunError, ScheduleError
from ..lang.expr import Const, Expr
from ..lang.simplify import simplify
from ..lang.tensor import PlaceholderOp
from ..lang.visitor import substitute
from ..schedule.lower import LoweredFunc
from .arrays import host_arrays
from .compiler import cache_dir
from .module import ArgChecker, TimeResult
from .opencl_codegen import CLSource, KernelInfo, generate_opencl
from .target import Target

log = logging.getLogger("looptune.backends.opencl")

_PROBE = "__kernel void looptune_probe(__global float *x) { x[get_global_id(0)] = 1.0f; }"
_DEVICE_TYPES = {"cpu": "CPU", "gpu": "GPU", "accelerator": "ACCELERATOR"}

_lock = threading.Lock()
_devices: dict[tuple, object] = {}     # (device option, platform option) -> cl.Device
_contexts: dict[object, tuple] = {}    # cl.Device -> (cl.Context, profiling cl.CommandQueue)
_programs: dict[tuple, object] = {}    # (sha256 of source, cl.Device) -> built cl.Program


def _cl():
    try:
        import pyopencl as cl
    except ImportError as e:
        raise BuildError("the opencl target needs pyopencl: pip install 'looptune[opencl]' "
                         "(pyopencl[pocl] brings a CPU device)") from e
    return cl


def context(device) -> tuple:
    """The (context, in-order profiling queue) of ``device``, created once."""
    cl = _cl()
    with _lock:
        if device not in _contexts:
            ctx = cl.Context([device])
            queue = cl.CommandQueue(
                ctx, device, properties=cl.command_queue_properties.PROFILING_ENABLE)
            _contexts[device] = (ctx, queue)
        return _contexts[device]


def _probe(device) -> str | None:
    """None if ``device`` compiles a trivial kernel, else the first line of its error."""
    cl = _cl()
    try:
        cl.Program(context(device)[0], _PROBE).build()
    except cl.Error as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower() and "failed" not in ln.lower()]
        return (errors or lines or [type(e).__name__])[0]
    return None


def _candidates(tgt: Target) -> tuple[list, list[str]]:
    cl = _cl()
    want, plat = tgt.options.get("device"), tgt.options.get("platform")
    if want is not None and want not in _DEVICE_TYPES:
        raise BuildError(f"target '{tgt}': -device must be one of "
                         f"{', '.join(_DEVICE_TYPES)}; got {want!r}")
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    found, seen = [], []
    for p in platforms:
        pname = f"{p.name} ({p.version.strip()})"
        try:
            devices = p.get_devices()
        except cl.Error:
            devices = []
        for d in devices:
            seen.append(f"{d.name.strip()} [{cl.device_type.to_string(d.type)}] on {pname}")
            if plat not in (None, True) and plat.lower() not in pname.lower():
                continue
            if want is not None and not d.type & getattr(cl.device_type, _DEVICE_TYPES[want]):
                continue
            found.append(d)
    found.sort(key=lambda d: not d.type & cl.device_type.GPU)
    return found, seen


def select_device(tgt: Target):
    """The OpenCL device for target ``tgt`` (see the module docstring); cached."""
    key = (tgt.options.get("device"), tgt.options.get("platform"))
    if key in _devices:
        return _devices[key]
    found, seen = _candidates(tgt)
    errors = []
    for d in found:
        err = _probe(d)
        if err is None:
            log.info("target '%s' runs on %s", tgt, d.name.strip())
            with _lock:
                _devices[key] = d
            return d
        errors.append(f"{d.name.strip()}: cannot compile a kernel ({err})")
    listing = "; ".join(seen) if seen else "none (install a driver, or pyopencl[pocl] for a CPU)"
    why = ("; ".join(errors) + ". ") if errors else ""
    raise BuildError(f"target '{tgt}': no usable OpenCL device. {why}Devices found: {listing}")


def _program(src: str, device, name: str):
    cl = _cl()
    digest = hashlib.sha256(src.encode()).hexdigest()
    key = (digest, device)
    with _lock:
        prg = _programs.get(key)
    if prg is not None:
        return prg
    try:
        prg = cl.Program(context(device)[0], src).build()
    except cl.Error as e:
        path = cache_dir() / f"{name[:64]}-{digest[:16]}.cl"
        try:
            path.write_text(src)
        except OSError:
            path = None
        where = path or "the program (the build cache is not writable to keep it)"
        raise BuildError(f"the OpenCL compiler of {device.name.strip()} failed on {where}:\n{e}",
                         str(path) if path else None, str(e)) from None
    with _lock:
        _programs[key] = prg
    return prg


def _check_group(info: KernelInfo, local: tuple[int, ...], device, kernel=None) -> None:
    """ScheduleError if the work-group ``local`` does not fit ``device`` (and ``kernel``)."""
    cl = _cl()
    where = f"kernel '{info.name}'"
    for d, (n, most) in enumerate(zip(local, device.max_work_item_sizes)):
        if n > most:
            raise ScheduleError(f"{where}: threadIdx.{'xyz'[d]} has extent {n}, more than device "
                                f"'{device.name.strip()}' allows ({most}); bind a smaller loop "
                                "(split with a smaller factor)")
    limit = device.max_work_group_size
    if kernel is not None:
        limit = min(limit, kernel.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, device))
    size = int(np.prod(local))
    if size > limit:
        raise ScheduleError(f"{where}: a work-group of {' x '.join(map(str, local))} = {size} "
                            f"work-items is larger than device '{device.name.strip()}' allows "
                            f"({limit}); bind smaller loops to threadIdx (smaller split factors)")


def _const_local(info: KernelInfo) -> tuple[int, ...] | None:
    if info.local_size is None or not all(isinstance(x, Const) for x in info.local_size):
        return None
    return tuple(x.value for x in info.local_size)


def build_opencl(func: LoweredFunc, tgt: Target) -> CLModule:
    """Generate, validate and compile ``func`` for the OpenCL device of ``tgt``."""
    prog = generate_opencl(func)
    device = select_device(tgt)
    if prog.uses_fp64 and not device.double_fp_config:
        raise BuildError(f"'{func.name}' uses float64, which device '{device.name.strip()}' "
                         "does not support (no cl_khr_fp64); compute in float32")
    for info in prog.kernels:
        if info.local_bytes > device.local_mem_size:
            raise ScheduleError(f"kernel '{info.name}': its __local arrays need "
                                f"{info.local_bytes} bytes, more than device "
                                f"'{device.name.strip()}' has ({device.local_mem_size}); "
                                "stage smaller tiles into shared memory")
        local = _const_local(info)
        if local is not None:
            _check_group(info, local, device)
    program = _program(prog.source, device, func.name)
    module = CLModule(func, prog, device, program, tgt)
    for info, knl in zip(prog.kernels, module._cl_kernels):
        local = _const_local(info)
        if local is not None:
            _check_group(info, local, device, knl)
    return module


def _eval(e: Expr, env: dict) -> int:
    v = simplify(substitute(e, env))
    assert isinstance(v, Const), f"launch size {e} is not bound by the size variables"
    return int(v.value)


class CLModule:
    """A compiled OpenCL function: call it with numpy arrays (outputs preallocated).

    ``source`` is the OpenCL C program; ``kernels`` describe its kernels (name, buffer and size
    parameters, global/local size as expressions in the size variables), launched in order;
    ``temporaries`` are the global intermediates allocated per call.
    """

    def __init__(self, func: LoweredFunc, prog: CLSource, device, program, target: Target):
        self.name = func.name
        self.lowered = func
        self.source = prog.source
        self.kernels = prog.kernels
        self.temporaries = prog.temporaries
        self.device = device
        self.target = target
        self.args = func.args
        self._checker = ArgChecker(func.name, func.args, func.size_vars)
        self._ctx, self._queue = context(device)
        self._cl_kernels = [_cl().Kernel(program, k.name) for k in prog.kernels]
        self._lock = threading.Lock()

    def launch_sizes(self, *arrays: np.ndarray) -> list[tuple[tuple, tuple | None]]:
        """(global size, local size or None) of each kernel for these arguments."""
        env = self._env(self._checker.check(arrays))
        return [self._geometry(k, env) for k in self.kernels]

    def _env(self, values: list[int]) -> dict:
        return {v: Const(n, v.dtype) for v, n in zip(self.lowered.size_vars, values)}

    def _geometry(self, info: KernelInfo, env: dict):
        glob = tuple(_eval(x, env) for x in info.global_size)
        loc = None if info.local_size is None else tuple(_eval(x, env) for x in info.local_size)
        if loc is not None and _const_local(info) is None:
            _check_group(info, loc, self.device)
        return glob, loc

    def _prepare(self, arrays) -> tuple[list, dict]:
        """Device buffers (inputs uploaded) and the launches (kernel, global, local, args)."""
        cl = _cl()
        mf = cl.mem_flags
        values = self._checker.check(arrays)
        env = self._env(values)
        bufs = {}
        for t, b, a in zip(self.args, self.lowered.buffers, arrays):
            if a.nbytes and isinstance(t.op, PlaceholderOp):
                bufs[b.uid] = cl.Buffer(self._ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
            else:
                bufs[b.uid] = cl.Buffer(self._ctx, mf.READ_WRITE, max(a.nbytes, 1))
        for b in self.temporaries:
            n = 1
            for d in b.shape:
                n *= d if isinstance(d, int) else _eval(d, env)
            nbytes = max(n, 1) * np.dtype(b.dtype).itemsize
            try:
                if nbytes > self.device.max_mem_alloc_size:
                    raise cl.MemoryError(f"more than the device's largest buffer "
                                         f"({self.device.max_mem_alloc_size} bytes)")
                bufs[b.uid] = cl.Buffer(self._ctx, mf.READ_WRITE, nbytes)
            except cl.Error as e:
                raise RunError(f"{self.name}(): the intermediate '{b.name}' needs {nbytes} "
                               f"bytes, which device '{self.device.name.strip()}' cannot "
                               f"allocate; got {e}; use smaller sizes or compute_at the "
                               "producer inside a kernel") from None
        size = dict(zip(self.lowered.size_vars, values))
        launches = []
        for info, knl in zip(self.kernels, self._cl_kernels):
            glob, loc = self._geometry(info, env)
            if 0 in glob:
                continue
            args = [bufs[b.uid] for b in info.buffers] + [np.int64(size[v])
                                                          for v in info.size_vars]
            launches.append((info, knl, glob, loc, args))
        return launches, bufs

    def _enqueue(self, launches) -> list:
        cl = _cl()
        events = []
        for info, knl, glob, loc, args in launches:
            knl.set_args(*args)
            try:
                events.append(cl.enqueue_nd_range_kernel(self._queue, knl, glob, loc))
            except cl.Error as e:
                raise RuntimeError(f"{self.name}(): launching kernel '{info.name}' with global "
                                   f"size {glob}, local size {loc} failed: {e}") from None
        return events

    def _download(self, arrays, bufs) -> None:
        cl = _cl()
        for k in sorted(self._checker.outputs):
            a = arrays[k]
            if a.nbytes:
                cl.enqueue_copy(self._queue, a, bufs[self.lowered.buffers[k].uid])
        self._queue.finish()

    def __call__(self, *arrays: np.ndarray) -> None:
        arrays, finish = host_arrays(self._checker, arrays)     # torch, DLPack, bfloat16...
        with self._lock:
            launches, bufs = self._prepare(arrays)
            self._enqueue(launches)
            self._download(arrays, bufs)
        if finish is not None:
            finish()

    def time(self, *arrays: np.ndarray, number: int = 10, repeat: int = 5,
             min_repeat_ms: float = 0, warmup: int = 1) -> TimeResult:
        """Seconds per call of the kernels alone, from OpenCL event profiling (uploads and
        downloads excluded): ``repeat`` repeats of ``number`` calls (raised until a repeat's
        kernels take ``min_repeat_ms``), after ``warmup`` calls. Outputs are written too."""
        arrays, _ = host_arrays(self._checker, arrays)   # bfloat16 outputs are not written
        with self._lock:
            launches, bufs = self._prepare(arrays)
            if not launches:
                self._download(arrays, bufs)
                return TimeResult([0.0] * max(1, int(repeat)))

            def measure(n: int) -> float:
                events = []
                for _ in range(n):
                    events += self._enqueue(launches)
                self._queue.finish()
                return sum(e.profile.end - e.profile.start for e in events) * 1e-9

            for _ in range(warmup):
                self._enqueue(launches)
            number = max(1, int(number))
            while min_repeat_ms > 0 and number < 1 << 20:
                took_ms = measure(number) * 1e3
                if took_ms >= min_repeat_ms:
                    break
                number = max(number * 2, int(number * min_repeat_ms / max(took_ms, 1e-3) * 1.1))
            res = [measure(number) / number for _ in range(max(1, int(repeat)))]
            self._download(arrays, bufs)
        return TimeResult(res)

    def __repr__(self):
        return f"Module({self.name}, target='{self.target}', device='{self.device.name.strip()}')"
