"""What the loop steps build: relations between a stage's loops, annotation kinds, new loops.

A stage's ``relations`` (``Split``/``Fuse``, in the order they were applied) tell bound
inference how each original axis is computed from the leaf loops; its ``annotations`` map a
leaf loop to an :class:`Annot` (and a thread tag for ``BIND``). A loop takes one annotation:
``STREAM`` (streaming stores, see ``Stage.stream``) implies SIMD, so it excludes ``VECTORIZE``.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ..lang.expr import Const, Expr, IterKind, IterVar, Var
from ..lang.simplify import simplify


class Annot(enum.Enum):
    UNROLL = "unroll"
    VECTORIZE = "vectorize"
    PARALLEL = "parallel"
    BIND = "bind"
    STREAM = "stream"        # non-temporal stores in the stage's innermost loop (implies SIMD)


THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z")


@dataclass(frozen=True, slots=True)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(frozen=True, slots=True)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


def split_extents(extent: Expr, factor: int | None, nparts: int | None) -> tuple[Expr, Expr]:
    """(outer, inner) extents of a split; constant extents are computed in Python ints (no
    32-bit overflow on the way: ``N + factor - 1`` may exceed 2**31 - 1 when N does not)."""
    if isinstance(extent, Const):
        n = int(extent.value)
        if factor is not None:
            return Const(-(-n // factor), "int32"), Const(factor, "int32")
        return Const(nparts, "int32"), Const(-(-n // nparts), "int32")
    if factor is not None:
        return (extent + (factor - 1)) // factor, Const(factor, "int32")
    return Const(nparts, "int32"), (extent + (nparts - 1)) // nparts


def new_loop(name: str, extent: Expr, kind: IterKind) -> IterVar:
    return IterVar(Var(name), Const(0, "int32"), simplify(extent), kind)
