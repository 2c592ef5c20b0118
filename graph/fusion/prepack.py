"""Constant weights in the layout their kernels read fastest, once, at compile time.

A kernel's loop nest vectorizes its innermost output axis; a weight read transposed there is
a strided gather per vector lane (4 KiB apart for a 1024-wide ``torch.nn.Linear``), which no
schedule of the auto scheduler's first choices recovers. The weight is a constant, so the
compiler stores it transposed instead. Rules (each ``before -> after``)::

    %y = Gemm(%a, %W; transB=1)   W constant  ->  %y = Gemm(%a, %W_t; transB=0), W_t = W.T
    %y = Gemm(%A, %b; transA=1)   A constant  ->  %y = Gemm(%A_t, %b; transA=0), A_t = A.T

A constant read by other nodes too stays as it is for them (the transposed copy is extra).
``lt.graph.compile`` runs :func:`prepack_weights` after the pass pipeline (not with
``optimize=False``).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node

# (op, attribute, input position): a constant input read transposed when the attribute is 1
_TRANSPOSED_READS = (("Gemm", "transB", 1), ("Gemm", "transA", 0))


def prepack_weights(graph: Graph) -> Graph:
    """``graph`` with each rule above applied; ``graph`` itself when none applies."""
    consts = dict(graph.consts)
    made: dict[str, str] = {}                     # constant -> its transposed copy
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        for op, attr, k in _TRANSPOSED_READS:
            if node.op_type != op or not node.attr(attr, 0) or len(node.inputs) <= k:
                continue
            w = node.inputs[k]
            if w not in graph.consts or graph.consts[w].ndim != 2:
                continue
            if w not in made:
                made[w] = _fresh(f"{w}_t", graph, consts)
                consts[made[w]] = np.ascontiguousarray(graph.consts[w].T)
            inputs = list(node.inputs)
            inputs[k] = made[w]
            node = node.with_(inputs=inputs, attrs={**node.attributes, attr: 0})
            changed = True
        nodes.append(node)
    return graph.replace(nodes=nodes, consts=consts) if changed else graph


def _fresh(base: str, graph: Graph, taken: dict) -> str:
    name, n = base, 0
    while name in graph.types or name in taken:
        n += 1
        name = f"{base}_{n}"
    return name
