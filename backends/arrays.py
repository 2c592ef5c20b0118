"""Arrays from any framework: what a built function (and a compiled model) accepts.

An argument may be a numpy array or any object that exposes its CPU memory through DLPack
(``__dlpack__``: torch tensors, JAX and CuPy host arrays, ``np.from_dlpack`` producers), the
array interface (``__array_interface__``/``__array_struct__``) or the buffer protocol
(``memoryview``, ``array.array``). It is viewed as a numpy array over the *same* memory, never
copied, and then checked exactly as a numpy array is (dtype, shape, C-contiguity, a writeable
output, no overlap), so outputs are written in place into the caller's tensor. Memory on
another device (a CUDA tensor) is refused with the device named.

bfloat16 (``ml_dtypes.bfloat16``, the ``bf16`` extra) is a storage dtype here: an argument
declared float32 also accepts a bfloat16 array of its shape. The kernel computes in float32:
a bfloat16 input is widened (exactly) into a float32 copy, and a bfloat16 output receives
the float32 results rounded to the nearest bfloat16 (ties to even, as ml_dtypes casts) after
a successful call. Those arguments are copied, whatever their layout.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

# DLPack device types (dlpack.h DLDeviceType); only kDLCPU memory is read here
_KDL_CPU = 1
_DEVICES = {2: "CUDA", 3: "CUDA host (pinned)", 4: "OpenCL", 7: "Vulkan", 8: "Metal",
            9: "VPI", 10: "ROCm", 11: "ROCm host", 12: "ext_dev", 13: "CUDA managed",
            14: "oneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA"}
ACCEPTED = ("pass a numpy array, or an array that exposes its CPU memory through DLPack "
            "(__dlpack__: a torch tensor), the array interface or the buffer protocol")


def as_host_array(obj, what: str, error: type[Exception] | None = None) -> np.ndarray:
    """``obj`` as a numpy array over its own memory (no copy). ``what`` names the argument in
    errors (``"f(): argument 'A'"``): TypeError for an object that exposes no memory numpy
    can view, ValueError for memory on another device; or ``error`` for both."""
    if isinstance(obj, np.ndarray):
        return obj
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, what, error)
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array_struct__"):
        return np.asarray(obj)
    try:
        view = memoryview(obj)
    except TypeError:
        raise (error or TypeError)(f"{what} must be a numpy.ndarray; got "
                                   f"{type(obj).__name__}; {ACCEPTED}") from None
    return np.asarray(view)


def _from_dlpack(obj, what: str, error: type[Exception] | None) -> np.ndarray:
    device = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (_KDL_CPU, 0)
    kind, index = int(device[0]), int(device[1])
    if kind != _KDL_CPU:
        name = _DEVICES.get(kind, f"DLPack device type {kind}")
        raise (error or ValueError)(f"{what} is in {name} memory (device {index}); the "
                                    "function runs on the CPU: pass a CPU array (e.g. "
                                    "tensor.cpu())")
    try:
        return np.from_dlpack(obj)
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        hint = ""
        if "bfloat16" in str(getattr(obj, "dtype", "")):
            hint = ("; numpy reads no bfloat16 through DLPack: pass "
                    "t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)")
        raise (error or TypeError)(f"{what}: numpy cannot view this {type(obj).__name__} "
                                   f"through DLPack ({e}){hint}") from None


def is_bfloat16(a: np.ndarray) -> bool:
    return a.dtype.kind == "V" and a.dtype.name == "bfloat16"


def host_arrays(checker, arrays) -> tuple[list, Callable[[], None] | None]:
    """The call's ``arrays`` as numpy arrays for ``checker`` (an ArgChecker), before its
    checks; and what to run after a successful call (writing bfloat16 outputs back), or
    None. Numpy arrays of ordinary dtypes pass straight through."""
    if all(type(a) is np.ndarray and a.dtype.kind != "V" for a in arrays):
        return list(arrays), None
    views = [as_host_array(a, f"{checker.name}(): argument '{t.name}'")
             for t, a in zip(checker.args, arrays)] + list(arrays[len(checker.args):])
    out = list(views)
    back: list[tuple[np.ndarray, np.ndarray]] = []
    for k, (a, want) in enumerate(zip(views, checker.dtypes)):
        if is_bfloat16(a) and want == np.float32:
            out[k] = _widen(checker, k, views, back)
    if not back:
        return out, None

    def write_back() -> None:
        with np.errstate(invalid="ignore", over="ignore"):     # NaN and inf are values here
            for orig, wide in back:
                orig[...] = wide.astype(orig.dtype)   # float32 -> bfloat16, nearest, ties even
    return out, write_back


def _widen(checker, k: int, views: list, back: list) -> np.ndarray:
    """The float32 stand-in of bfloat16 argument ``k``; outputs are queued on ``back``."""
    a, t = views[k], checker.args[k]
    if k not in checker.outputs:
        return a.astype(np.float32)               # exact: bfloat16 is float32's top half
    if not a.flags.writeable:
        raise ValueError(f"{checker.name}(): output '{t.name}' is read-only")
    for j, b in enumerate(views):
        if j != k and np.may_share_memory(a, b):
            raise ValueError(f"{checker.name}(): output '{t.name}' shares memory with argument "
                             f"'{checker.args[j].name}'; pass separate arrays")
    wide = np.empty(a.shape, np.float32)
    back.append((a, wide))
    return wide
