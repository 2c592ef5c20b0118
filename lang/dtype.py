"""dtypes: numpy spellings, promotion with numpy's rules, C type names."""
from __future__ import annotations

import numpy as np

from ..errors import LangError

_C_TYPES = {
    "bool": "bool",
    "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
    "float16": "_Float16", "float32": "float", "float64": "double",
}
SUPPORTED = tuple(_C_TYPES)


def canonical(dtype) -> str:
    """Return the numpy spelling of ``dtype`` ('float32', ...) or raise LangError."""
    if isinstance(dtype, str) and dtype in _C_TYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in _C_TYPES:
        bf16 = name == "bfloat16" or str(dtype) == "bfloat16"   # storage: backends/arrays.py
        raise LangError(f"unknown dtype {dtype!r}; use one of {', '.join(SUPPORTED)}" + (
            "; for bfloat16 declare the tensor float32 (kernels compute in float32) and pass "
            "ml_dtypes.bfloat16 arrays to the built function: it converts them at the call"
            if bf16 else ""))
    return name


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def is_int(dtype: str) -> bool:
    return dtype.startswith("int") or dtype.startswith("uint")


def is_bool(dtype: str) -> bool:
    return dtype == "bool"


def c_type(dtype: str) -> str:
    return _C_TYPES[dtype]


def itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def promote(a: str, b: str) -> str:
    """numpy's promotion of two array dtypes."""
    return np.result_type(np.dtype(a), np.dtype(b)).name


def scalar_dtype(value) -> str:
    """dtype a Python scalar takes when it stands alone (no other operand)."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        if isinstance(value, np.integer):
            return np.asarray(value).dtype.name
        return "int32" if -(2**31) <= value < 2**31 else "int64"
    if isinstance(value, (float, np.floating)):
        if isinstance(value, np.floating):
            return np.asarray(value).dtype.name
        return "float32"
    raise LangError(f"cannot use {value!r} of type {type(value).__name__} in an expression")


def weak_scalar_dtype(value, other: str) -> str:
    """dtype of a Python scalar combined with an expression of dtype ``other``.

    numpy 2's weak-scalar rule (NEP 50): a Python int takes the other operand's dtype, a Python
    float takes it when it is a float dtype; numpy scalars promote as arrays do.
    """
    if isinstance(value, (bool, np.bool_)) and not is_bool(other):
        return other
    if isinstance(value, int) and not isinstance(value, bool) and is_int(other):
        info = np.iinfo(other)
        if not info.min <= value <= info.max:
            raise LangError(f"the constant {value} does not fit the dtype {other} "
                            f"([{info.min}, {info.max}]); cast the other operand with "
                            ".astype(...) first")
    try:
        return np.result_type(np.dtype(other), value).name
    except (OverflowError, TypeError):
        raise LangError(f"the constant {value!r} does not fit the dtype {other}; "
                        f"cast the other operand with .astype(...) first") from None


MAX_EXTENT = 2**31 - 1   # loop variables and extents are 32-bit integers


def as_size(value) -> int | None:
    """``value`` as a Python int when it is an integer (``int`` or a numpy integer such as
    ``np.int64(4)``, not a bool), else None: sizes and factors accept both alike."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    return None


def min_value(dtype: str):
    if is_float(dtype):
        return float("-inf")
    if is_bool(dtype):
        return False
    return int(np.iinfo(dtype).min)


def max_value(dtype: str):
    if is_float(dtype):
        return float("inf")
    if is_bool(dtype):
        return True
    return int(np.iinfo(dtype).max)
