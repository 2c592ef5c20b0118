"""Tensors and the operations that produce them: placeholder, compute, reduce_axis, var."""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

from ..errors import LangError
from . import dtype as dt
from .bounds import check_reads
from .expr import Const, Expr, IterKind, IterVar, Load, Reduce, Var, as_expr
from .visitor import ExprVisitor, collect_loads, collect_vars


class Tensor:
    """A tensor value: the output of a placeholder or a compute. Identity is the object."""

    __slots__ = ("shape", "dtype", "name", "op")

    def __init__(self, shape: tuple, dtype: str, name: str, op: Operation):
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.op = op

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> Load:
        idx = indices if isinstance(indices, tuple) else (indices,)
        if len(idx) != self.ndim:
            raise LangError(f"tensor '{self.name}' has rank {self.ndim} (shape "
                            f"{_shape_str(self.shape)}) but was indexed with {len(idx)} "
                            f"indices; give one index per dimension")
        out = []
        for n, i in enumerate(idx):
            if isinstance(i, slice):
                raise LangError(f"tensor '{self.name}': index {n} is a slice; index with "
                                "expressions of the compute's axes, e.g. A[i, k]")
            e = as_expr(i)
            if not dt.is_int(e.dtype):
                raise LangError(f"tensor '{self.name}': index {n} is {e} of dtype {e.dtype}; "
                                "indices must be integers (use // or .astype('int32'))")
            if e.dtype != "int32":
                from .ops import cast
                e = cast(e, "int32")
            out.append(e)
        return Load(self, tuple(out))

    def astype(self, dtype):
        raise LangError(f"tensor '{self.name}'.astype: cast an element instead, e.g. "
                        f"lt.compute(shape, lambda *i: {self.name}[i].astype('{dtype}'))")

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={_shape_str(self.shape)}, dtype={self.dtype})"


def _shape_str(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


class Operation:
    __slots__ = ("name", "tag", "output")

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return ()


class PlaceholderOp(Operation):
    __slots__ = ()

    def __repr__(self):
        return f"placeholder({self.name})"


class ComputeOp(Operation):
    """``output[axis] = body``; ``reduce_axis`` is the axis of the body's Reduce, if any."""

    __slots__ = ("axis", "reduce_axis", "body", "_inputs")

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return self._inputs

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.body, Reduce)

    def __repr__(self):
        return f"compute({self.name})"


def _norm_shape(shape, what: str) -> tuple:
    if isinstance(shape, (int, Expr)) or dt.as_size(shape) is not None:
        shape = (shape,)
    if not isinstance(shape, Sequence):
        raise LangError(f"{what}: shape must be a tuple of ints or lt.var sizes; got {shape!r}")
    out = []
    for s in shape:
        n = dt.as_size(s)
        if n is None and isinstance(s, Const) and dt.is_int(s.dtype):
            n = int(s.value)
        if n is not None:
            out.append(_check_extent(n, f"{what}: shape entry {n}"))
        elif isinstance(s, Expr):
            if not dt.is_int(s.dtype):
                raise LangError(f"{what}: shape entry {s} has dtype {s.dtype}; sizes are integers")
            out.append(s)
        else:
            raise LangError(f"{what}: shape entry {s!r} is not an int or an integer expression")
    return tuple(out)


def _check_extent(n: int, what: str) -> int:
    if n <= 0:
        raise LangError(f"{what} must be positive")
    if n > dt.MAX_EXTENT:
        raise LangError(f"{what} is too large: loop variables and extents are 32-bit, so a "
                        f"dimension must be at most 2**31 - 1 = {dt.MAX_EXTENT}; split the "
                        "data into several tensors")
    return n


def placeholder(shape, dtype="float32", name: str = "placeholder") -> Tensor:
    """An input tensor of ``shape`` (ints, numpy integers or ``lt.var`` sizes; each dimension
    at most 2**31 - 1) and ``dtype``."""
    op = PlaceholderOp()
    op.name, op.tag = name, ""
    t = Tensor(_norm_shape(shape, f"placeholder '{name}'"), dt.canonical(dtype), name, op)
    op.output = t
    return t


def var(name: str = "n", dtype="int32") -> Var:
    """A symbolic integer size, bound from the arrays' shapes when the function is called."""
    d = dt.canonical(dtype)
    if not dt.is_int(d):
        raise LangError(f"lt.var('{name}'): sizes are integers; got dtype {d}")
    return Var(name, d)


def reduce_axis(dom, name: str = "k") -> IterVar:
    """A reduction axis over ``range(dom)`` or ``range(lo, hi)`` when ``dom`` is a pair."""
    def size(x) -> Expr:
        n = dt.as_size(x)
        return as_expr(x) if n is None else Const(n, "int32" if abs(n) <= dt.MAX_EXTENT
                                                  else "int64")
    if isinstance(dom, Sequence) and len(dom) == 2:
        lo, hi = size(dom[0]), size(dom[1])
        from .simplify import simplify
        ext = simplify(hi - lo)
    else:
        lo, ext = Const(0, "int32"), size(dom)
    if not dt.is_int(ext.dtype) or isinstance(ext, Const) and ext.value <= 0:
        raise LangError(f"reduce_axis '{name}': the extent {ext} must be a positive integer")
    if isinstance(ext, Const):
        _check_extent(int(ext.value), f"reduce_axis '{name}': the extent {ext.value}")
    if isinstance(lo, Const) and abs(int(lo.value)) > dt.MAX_EXTENT:
        raise LangError(f"reduce_axis '{name}': the start {lo.value} does not fit a 32-bit "
                        "loop variable")
    return IterVar(Var(name), lo, ext, IterKind.REDUCE)


def _param_names(fcompute: Callable, ndim: int, name: str) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return [f"{params[0].name}{n}" for n in range(ndim)]
    names = [p.name for p in params]
    if len(names) != ndim:
        raise LangError(f"compute '{name}': the shape has {ndim} dimensions but fcompute takes "
                        f"{len(names)} arguments ({', '.join(names)}); take one per dimension")
    return names


def compute(shape, fcompute: Callable, name: str = "compute", tag: str = "") -> Tensor:
    """A tensor whose element at each index of ``shape`` is ``fcompute(*index)``.

    ``shape`` holds ints (numpy integers too, each at most 2**31 - 1) or ``lt.var`` sizes.

    Reads are checked here: an index whose range over the compute's domain is known exactly
    (affine in the axes, e.g. ``A[i + 1]`` or ``A[2*i, k - 1]``) and leaves the tensor raises
    ``LangError`` naming the tensor, the index and its range. Guards count: only the taken
    side of ``lt.if_then_else`` reads, so padding such as ``lt.if_then_else(i >= 1, A[i - 1],
    0)`` is accepted. Not checked: data-dependent indices (gathers such as ``A[I[i]]``) and
    reads under guards that are not per-axis bounds (``i + j < n``); build with the target
    option ``-bounds-check`` to check those at run time. See :mod:`looptune.lang.bounds`.
    """
    shp = _norm_shape(shape, f"compute '{name}'")
    names = _param_names(fcompute, len(shp), name)
    axis = tuple(IterVar(Var(n), Const(0, "int32"), as_expr(s), IterKind.SPATIAL)
                 for n, s in zip(names, shp))
    body = fcompute(*axis)
    if isinstance(body, (list, tuple)):
        raise LangError(f"compute '{name}': fcompute returned {len(body)} values; a compute "
                        "has one output, write one compute per output")
    try:
        body = as_expr(body)
    except LangError as e:
        raise LangError(f"compute '{name}': {e}") from None
    _check_body(name, body, axis, shp)
    check_reads(name, body, axis)
    return make_compute(name, axis, body, tag)


def make_compute(name: str, axis: tuple[IterVar, ...], body: Expr, tag: str = "") -> Tensor:
    """A new tensor computed by ``body`` over ``axis`` (parts already checked)."""
    return compute_op(name, axis, body, tag).output


def compute_op(name: str, axis: tuple[IterVar, ...], body: Expr, tag: str = "",
               output: Tensor | None = None) -> ComputeOp:
    """A ComputeOp from checked parts; with ``output`` the op computes that existing tensor
    (schedules use this to rewrite a stage without touching the user's tensor)."""
    op = ComputeOp()
    op.name, op.tag, op.axis, op.body = name, tag, tuple(axis), body
    op.reduce_axis = body.axis if isinstance(body, Reduce) else ()
    op._inputs = tuple(dict.fromkeys(ld.tensor for ld in collect_loads(body)))
    shape = tuple(a.extent.value if isinstance(a.extent, Const) else a.extent for a in axis)
    op.output = output if output is not None else Tensor(shape, body.dtype, name, op)
    return op


def _check_body(name: str, body: Expr, axis, shape) -> tuple[IterVar, ...]:
    """Reductions only at the top; every variable is an axis, a reduce axis or a size."""
    rax: tuple[IterVar, ...] = ()
    inner = [body]
    if isinstance(body, Reduce):
        rax = body.axis
        inner = [body.source] + ([body.where] if body.where is not None else [])
    for e in inner:
        if _contains_reduce(e):
            raise LangError(f"compute '{name}': a reduction (lt.sum/max/min/prod) may only be "
                            "the whole body of a compute; compute the reduction as its own "
                            "tensor and use it here")
    allowed = {a.var for a in axis} | {a.var for a in rax}
    for s in shape:
        if isinstance(s, Expr):
            allowed |= collect_vars(s)
    for r in rax:
        allowed |= collect_vars(r.min) | collect_vars(r.extent)
    for ld in collect_loads(body):
        for s in ld.tensor.shape:
            if isinstance(s, Expr):
                allowed |= collect_vars(s)
    unknown = [v for v in collect_vars(body) if v not in allowed]
    if unknown:
        names = ", ".join(sorted(v.name for v in unknown))
        raise LangError(f"compute '{name}': the body uses {names}, which is neither an axis of "
                        f"this compute ({', '.join(a.name for a in axis)}) nor an axis of its "
                        "reduction; list reduction axes in lt.sum(..., axis=[...])")
    return rax


class _HasReduce(ExprVisitor):
    def __init__(self):
        self.found = False

    def visit_Reduce(self, e):
        self.found = True


def _contains_reduce(e: Expr) -> bool:
    v = _HasReduce()
    v.visit(e)
    return v.found
