"""Immutable expression nodes.

Every node is a frozen, slotted dataclass with structural equality and hashing; children live
in tuples. Variables carry a unique id besides their display name, so two loops both called
``i`` are never confused. Operators on nodes build new nodes through :mod:`looptune.lang.ops`,
which applies numpy's dtype rules; the constructors here only check local invariants.
"""
from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import LangError
from . import dtype as dt
from .intrinsics import INTRINSICS, known

if TYPE_CHECKING:
    from .combiner import Combiner
    from .tensor import Tensor

_uids = itertools.count(1)


class ExprOps:
    """Python operators for anything that behaves like an expression (Expr, IterVar)."""

    __slots__ = ()

    def __add__(self, o): return _ops().add(self, o)
    def __radd__(self, o): return _ops().add(o, self)
    def __sub__(self, o): return _ops().sub(self, o)
    def __rsub__(self, o): return _ops().sub(o, self)
    def __mul__(self, o): return _ops().mul(self, o)
    def __rmul__(self, o): return _ops().mul(o, self)
    def __truediv__(self, o): return _ops().truediv(self, o)
    def __rtruediv__(self, o): return _ops().truediv(o, self)
    def __floordiv__(self, o): return _ops().floordiv(self, o)
    def __rfloordiv__(self, o): return _ops().floordiv(o, self)
    def __mod__(self, o): return _ops().floormod(self, o)
    def __rmod__(self, o): return _ops().floormod(o, self)
    def __pow__(self, o): return _ops().power(self, o)
    def __rpow__(self, o): return _ops().power(o, self)
    def __neg__(self): return _ops().neg(self)
    def __abs__(self): return _ops().fabs(self)
    def __lt__(self, o): return _ops().compare(BinKind.LT, self, o)
    def __le__(self, o): return _ops().compare(BinKind.LE, self, o)
    def __gt__(self, o): return _ops().compare(BinKind.LT, o, self)
    def __ge__(self, o): return _ops().compare(BinKind.LE, o, self)
    def __and__(self, o): return _ops().logical(BinKind.AND, self, o)
    def __rand__(self, o): return _ops().logical(BinKind.AND, o, self)
    def __or__(self, o): return _ops().logical(BinKind.OR, self, o)
    def __ror__(self, o): return _ops().logical(BinKind.OR, o, self)
    def __invert__(self): return _ops().logical_not(self)

    def __bool__(self):
        raise LangError(
            f"the truth value of the expression {self} is not known in Python; use & | ~ "
            "instead of and/or/not, and lt.if_then_else(cond, a, b) instead of if")

    def astype(self, dtype) -> Expr:
        return _ops().cast(self, dtype)


def _ops():
    from . import ops
    return ops


class Expr(ExprOps):
    """Base of every expression node; ``dtype`` is a numpy spelling."""

    __slots__ = ()
    dtype: str

    def __str__(self) -> str:
        from .printer import expr_str
        return expr_str(self)

    __repr__ = __str__


class BinKind(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"          # true division (floats only)
    FLOORDIV = "//"    # floor semantics, as in Python
    FLOORMOD = "%"     # floor semantics, as in Python
    MIN = "min"
    MAX = "max"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    AND = "&&"
    OR = "||"

    @property
    def is_compare(self) -> bool:
        return self in _COMPARE

    @property
    def is_logical(self) -> bool:
        return self in (BinKind.AND, BinKind.OR)


_COMPARE = frozenset({BinKind.EQ, BinKind.NE, BinKind.LT, BinKind.LE})


@dataclass(frozen=True, slots=True, repr=False)
class Const(Expr):
    value: Any
    dtype: str

    def __post_init__(self):
        if dt.is_float(self.dtype):
            object.__setattr__(self, "value", float(self.value))
        elif dt.is_bool(self.dtype):
            object.__setattr__(self, "value", bool(self.value))
        else:
            object.__setattr__(self, "value", int(self.value))


@dataclass(frozen=True, slots=True, repr=False)
class Var(Expr):
    """A scalar variable: a loop index or a symbolic size. Identity is the uid."""

    name: str
    dtype: str = "int32"
    uid: int = field(default_factory=lambda: next(_uids))

    def __hash__(self):
        return hash(self.uid)

    def __eq__(self, other):
        return isinstance(other, Var) and other.uid == self.uid

    def __reduce__(self):
        # a Var from a pickle (a DAG sent to a worker process) keeps its uid, and moves this
        # process's counter past it: a Var created later here must not share it
        return (_restore_var, (self.name, self.dtype, self.uid))


def _restore_var(name: str, dtype: str, uid: int) -> Var:
    global _uids
    nxt = next(_uids)
    if nxt <= uid:
        _uids = itertools.count(uid + 1)
    return Var(name, dtype, uid)


@dataclass(frozen=True, slots=True, repr=False)
class BinOp(Expr):
    op: BinKind
    a: Expr
    b: Expr
    dtype: str = ""

    def __post_init__(self):
        assert self.a.dtype == self.b.dtype, f"BinOp {self.op} on {self.a.dtype}/{self.b.dtype}"
        res = "bool" if self.op.is_compare or self.op.is_logical else self.a.dtype
        object.__setattr__(self, "dtype", res)


@dataclass(frozen=True, slots=True, repr=False)
class Not(Expr):
    a: Expr
    dtype: str = "bool"


@dataclass(frozen=True, slots=True, repr=False)
class Select(Expr):
    """``cond ? t : f``; only the selected side is evaluated (guards loads)."""

    cond: Expr
    t: Expr
    f: Expr
    dtype: str = ""

    def __post_init__(self):
        assert self.t.dtype == self.f.dtype and self.cond.dtype == "bool"
        object.__setattr__(self, "dtype", self.t.dtype)


@dataclass(frozen=True, slots=True, repr=False)
class Cast(Expr):
    dtype: str
    value: Expr


@dataclass(frozen=True, slots=True, repr=False)
class Call(Expr):
    """A pure math intrinsic such as exp or sqrt: a row of lang/intrinsics.py's table."""

    name: str
    args: tuple[Expr, ...]
    dtype: str

    def __post_init__(self):
        row = INTRINSICS.get(self.name)
        if row is None:
            raise LangError(f"Call: no intrinsic called {self.name!r}; the intrinsics are "
                            f"{known()} (add a row to lang/intrinsics.py for a new one)")
        if len(self.args) != row.arity:
            raise LangError(f"Call({self.name!r}): takes {row.arity} argument(s); "
                            f"got {len(self.args)}")


@dataclass(frozen=True, slots=True, repr=False)
class Load(Expr):
    """``tensor[indices]`` inside a compute body (a producer load)."""

    tensor: "Tensor"
    indices: tuple[Expr, ...]
    dtype: str = ""

    def __post_init__(self):
        object.__setattr__(self, "dtype", self.tensor.dtype)


class IterKind(enum.Enum):
    SPATIAL = "spatial"
    REDUCE = "reduce"


@dataclass(frozen=True, slots=True, repr=False)
class IterVar(ExprOps):
    """An axis of a compute: a variable with a domain ``[min, min + extent)`` and a kind."""

    var: Var
    min: Expr
    extent: Expr
    kind: IterKind

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def dtype(self) -> str:
        return self.var.dtype

    def __str__(self):
        return f"{self.kind.value} {self.var.name} in [{self.min}, {self.min} + {self.extent})"

    __repr__ = __str__


@dataclass(frozen=True, slots=True, repr=False)
class Reduce(Expr):
    """A commutative reduction over ``axis``; only ever the whole body of a compute."""

    combiner: Combiner      # a name ("sum", "prod", "max", "min") is parsed at construction
    source: Expr
    axis: tuple[IterVar, ...]
    where: Expr | None
    dtype: str = ""

    def __post_init__(self):
        from .combiner import Combiner  # combiner.py builds its updates from this module
        object.__setattr__(self, "combiner", Combiner.of(self.combiner))
        object.__setattr__(self, "dtype", self.source.dtype)


def const(value, dtype=None) -> Const:
    """A constant of ``dtype`` (inferred from the Python value when omitted)."""
    d = dt.canonical(dtype) if dtype is not None else dt.scalar_dtype(value)
    return Const(value, d)


def as_expr(x, like: str | None = None) -> Expr:
    """Turn a Python number, IterVar or Expr into an Expr (weak scalars take ``like``)."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, (bool, int, float, np.generic)):
        d = dt.weak_scalar_dtype(x, like) if like else dt.scalar_dtype(x)
        return Const(x.item() if isinstance(x, np.generic) else x, d)
    raise LangError(f"cannot use {x!r} (a {type(x).__name__}) in an expression; "
                    "index tensors with T[i, j] and use Python numbers or lt.const for constants")


@dataclass(frozen=True, slots=True, repr=False)
class BufferLoad(Expr):
    """The lowered form of a Load: ``buffer[indices]`` with indices relative to the buffer."""

    buffer: Any
    indices: tuple[Expr, ...]
    dtype: str = ""

    def __post_init__(self):
        object.__setattr__(self, "dtype", self.buffer.dtype)
