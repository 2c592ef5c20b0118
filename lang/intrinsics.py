"""The math intrinsics: one table that every consumer of a ``Call`` reads.

A row says what ``lt.<name>`` computes (its numpy function: the simplifier folds constants with
it, tests use it as the reference) and how each code generator spells it: the C library's
function (``exp`` for double, ``expf`` for float), the OpenCL builtin, whether glibc's libmvec
has SIMD variants (the C target declares those ``omp declare simd`` so vectorized loops call
them), an inline C helper for float32 (backends/c_math.py), and, for an intrinsic a language
lacks, its expansion into others (``sigmoid(x) -> 1 / (1 + exp(-x))``).

Adding an intrinsic is one row here (plus its ``lt.<name>`` builder in lang/ops.py);
tests/lang/test_intrinsics.py checks that every row folds, builds in C and emits in OpenCL.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

_FLOAT_SUFFIX = {"float32": "f", "float16": "f", "float64": ""}


@dataclass(frozen=True, slots=True)
class Intrinsic:
    """One math function; ``expand`` is C/OpenCL text in ``{x}`` (``{y}``), ``{one}`` and other
    intrinsics' names (``{exp}``), used where ``c``/``opencl`` is None."""

    name: str
    arity: int
    numpy: Callable[..., np.ndarray]   # elementwise, in the argument dtype
    c: str | None                      # the C library's double function; float32 appends "f"
    opencl: str | None                 # the OpenCL builtin (overloaded on float/double)
    libmvec: bool = False              # glibc libmvec has SIMD variants of c (and c + "f")
    c_fast_f32: str | None = None      # inline float32 helper of backends/c_math.py
    expand: str | None = None          # the text where a language has no such function
    is_pure: bool = True               # no side effects: may be hoisted, folded, duplicated

    def c_name(self, dtype: str) -> str:
        """The C library's function for ``dtype`` (``expf`` for float32, ``exp`` for float64)."""
        assert self.c is not None, f"intrinsic {self.name} has no C function (it expands)"
        return self.c + _FLOAT_SUFFIX.get(dtype, "")

    def fold(self, *args):
        """The value at constant arguments (numpy scalars of one float dtype), in that dtype."""
        with np.errstate(all="ignore"):
            r = self.numpy(*args)
        return np.asarray(r).astype(args[0].dtype)


def render(row: Intrinsic, args: list[str], dtype: str, native: str | None,
           function: Callable[[str], str]) -> str:
    """The text of ``row`` applied to ``args`` in a C-like language: ``native(args)`` where the
    language has the function (``native`` not None), else ``row.expand`` with each other
    intrinsic's name replaced by ``function(name)``."""
    if native is not None:
        return f"{native}({', '.join(args)})"
    assert row.expand is not None, f"intrinsic {row.name} has neither a function nor expand"
    names = {"one": "1.0f" if dtype == "float32" else "1.0", "x": args[0],
             "y": args[1] if len(args) > 1 else ""}
    return row.expand.format_map(_Names(names, function))


class _Names(dict):
    def __init__(self, fixed: dict, function: Callable[[str], str]):
        super().__init__(fixed)
        self.function = function

    def __missing__(self, key: str) -> str:
        return self.function(key)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _rsqrt(x):
    return 1 / np.sqrt(x)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _row(name, numpy, c=None, opencl=None, arity=1, **kw) -> tuple[str, Intrinsic]:
    return name, Intrinsic(name, arity, numpy, c, opencl, **kw)


INTRINSICS: dict[str, Intrinsic] = dict([
    #    name     numpy        C        OpenCL
    _row("exp", np.exp, "exp", "exp", libmvec=True, c_fast_f32="lt_expf"),
    _row("log", np.log, "log", "log", libmvec=True),
    _row("log2", np.log2, "log2", "log2", libmvec=True),
    _row("log1p", np.log1p, "log1p", "log1p", libmvec=True),
    _row("sqrt", np.sqrt, "sqrt", "sqrt"),
    _row("rsqrt", _rsqrt, None, "rsqrt", expand="({one} / {sqrt}({x}))"),
    _row("sin", np.sin, "sin", "sin", libmvec=True),
    _row("cos", np.cos, "cos", "cos", libmvec=True),
    _row("tanh", np.tanh, "tanh", "tanh", libmvec=True),
    _row("sigmoid", _sigmoid, expand="({one} / ({one} + {exp}(-({x}))))"),
    _row("erf", _erf, "erf", "erf", libmvec=True),
    _row("floor", np.floor, "floor", "floor"),
    _row("ceil", np.ceil, "ceil", "ceil"),
    _row("round", np.rint, "rint", "rint"),   # half to even, as numpy
    _row("trunc", np.trunc, "trunc", "trunc"),
    _row("fabs", np.fabs, "fabs", "fabs"),
    _row("pow", np.power, "pow", "pow", arity=2, libmvec=True),
])


def known() -> str:
    """The intrinsic names, for error messages."""
    return ", ".join(INTRINSICS)
