"""The reduction combiners: one table of what ``lt.sum``/``prod``/``max``/``min`` mean.

Each member carries its identity (the value a reduction starts from, a function of the dtype:
``max`` starts from the dtype's lowest value), its binary operator as an expression builder
(what lowering stores: ``C[i] = max(C[i], x)``) and as a numpy ufunc (the reference). Lowering,
rfactor and the graph's reduction operators read this table; nothing else spells a combiner.
"""
from __future__ import annotations

import enum
from collections.abc import Callable

import numpy as np

from ..errors import LangError
from . import dtype as dt
from .expr import BinKind, BinOp, Const, Expr


def _zero(dtype: str):
    return 0


def _one(dtype: str):
    return 1


class Combiner(enum.Enum):
    """A commutative, associative reduction operator; ``Combiner("max")`` parses a name."""

    #     name    operator      numpy ufunc   identity(dtype)
    SUM = ("sum", BinKind.ADD, np.add, _zero)
    PROD = ("prod", BinKind.MUL, np.multiply, _one)
    MAX = ("max", BinKind.MAX, np.maximum, dt.min_value)
    MIN = ("min", BinKind.MIN, np.minimum, dt.max_value)

    op: BinKind
    ufunc: np.ufunc
    _identity: Callable[[str], object]

    def __new__(cls, name: str, op: BinKind, ufunc: np.ufunc, identity):
        obj = object.__new__(cls)
        obj._value_ = name
        obj.op = op
        obj.ufunc = ufunc
        obj._identity = identity
        return obj

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, combiner: Combiner | str) -> Combiner:
        """``combiner`` as a member: a member itself or its name ("sum", "prod", "max", "min")."""
        if isinstance(combiner, cls):
            return combiner
        try:
            return cls(combiner)
        except ValueError:
            names = ", ".join(repr(c.value) for c in cls)
            raise LangError(f"unknown reduction combiner {combiner!r}; use one of {names} "
                            "(lt.sum, lt.prod, lt.max, lt.min)") from None

    def identity(self, dtype: str) -> Const:
        """The constant a reduction in ``dtype`` starts from (``x op identity == x``)."""
        return Const(self._identity(dtype), dtype)

    def combine(self, acc: Expr, x: Expr) -> Expr:
        """The update ``acc op x`` as an expression (both operands of one dtype)."""
        return BinOp(self.op, acc, x)

    def reduce_np(self, x: np.ndarray, axis=None, keepdims: bool = False) -> np.ndarray:
        """The numpy reference: ``x`` reduced over ``axis`` with this operator, accumulated in
        ``x``'s dtype as looptune does (integers wrap; ``np.sum`` would widen uint8 to uint64)."""
        return self.ufunc.reduce(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
