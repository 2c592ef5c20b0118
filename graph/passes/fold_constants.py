"""Constant folding: a node whose inputs are all constants is evaluated once, at compile time,
with its operator's numpy reference, and becomes a constant."""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..registry import call_of, get_op
from .base import Builder, PassStats, count

#: The size limit of a folded constant: a node is folded only when each of its outputs takes
#: at most ``max(FOLD_LIMIT_BYTES, the bytes of its constant inputs)``. Folding never trades a
#: cheap node for a huge weight (``Expand`` of a scalar to a 1 GB tensor stays a node), while
#: a transpose or reshape of a weight of any size still folds.
FOLD_LIMIT_BYTES = 1 << 20

#: Operators whose output depends only on the input's type (static here), never its values.
SHAPE_OPS = ("Shape", "Size")


def fold_constants(graph: Graph, stats: PassStats | None = None,
                   limit_bytes: int = FOLD_LIMIT_BYTES) -> Graph:
    """Replace every node whose inputs are all constants (and ``Shape``/``Size`` of any value,
    whose shapes are static) by constants holding its reference outputs, named as its outputs
    were. One sweep in graph order folds whole constant subgraphs. Counts ``nodes folded`` and
    ``too large to fold`` (see :data:`FOLD_LIMIT_BYTES`).

    Before -> after::

        %wt = Transpose(%w); %y = MatMul(%x, %wt)    ->    %wt = const; %y = MatMul(%x, %wt)
    """
    b = Builder(graph)
    folded = skipped = 0
    for node in graph.nodes:
        n = node.with_(inputs=[b.name(i) if i else "" for i in node.inputs])
        fold = _foldable(b, n)
        if fold and not _fits(b, n, limit_bytes):
            skipped += 1
            fold = False
        if not fold:
            b.keep(n)
            continue
        outs = _evaluate(b, n)
        for name, arr in zip(n.outputs, outs):
            if name:
                b.add_const(arr, name=name)
        folded += 1
    count(stats, "fold_constants", "nodes folded", folded)
    count(stats, "fold_constants", "too large to fold", skipped)
    if not folded:
        return graph
    return b.finish()[0]


def _foldable(b: Builder, n: Node) -> bool:
    if n.op_type in SHAPE_OPS:
        return True
    return all(b.const(i) is not None for i in n.inputs if i)


def _evaluate(b: Builder, n: Node) -> list[np.ndarray]:
    ctx = call_of(b.g, n)
    ctx.out_types = [b.out_type(n, k) for k, o in enumerate(n.outputs) if o]
    if n.op_type in SHAPE_OPS:
        args = [np.empty(b.shape(i), b.type(i).dtype) if i else None for i in n.inputs]
    else:
        args = [b.const(i) if i else None for i in n.inputs]
    outs = get_op(n.op_type).reference(ctx, args)
    res = []
    for o, val in zip(n.outputs, outs):
        t = b.old.types[o] if o else None
        val = np.asarray(val)
        assert t is None or (val.shape == t.shape and val.dtype.name == t.dtype), (
            f"{n.label}: the reference gave {val.dtype}{list(val.shape)}, inference said {t}")
        res.append(val)
    return res


def _fits(b: Builder, n: Node, limit: int) -> bool:
    budget = max(limit, sum(b.const(i).nbytes for i in n.inputs if b.const(i) is not None))
    return all(b.old.types[o].nbytes <= budget for o in n.outputs if o)
