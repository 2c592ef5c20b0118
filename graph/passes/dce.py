"""Dead-code elimination: drop the nodes whose outputs reach no graph output."""
from __future__ import annotations

from ..ir import Graph
from .base import PassStats, assemble, count, live_nodes


def dce(graph: Graph, stats: PassStats | None = None) -> Graph:
    """Remove every node none of whose outputs a graph output depends on (and the constants
    only they read). Counts ``nodes removed``.

    Before -> after::

        %a = Relu(%x); %b = Exp(%x); return %a     ->     %a = Relu(%x); return %a
    """
    keep = live_nodes(graph.nodes, graph.outputs)
    count(stats, "dce", "nodes removed", len(graph.nodes) - len(keep))
    if len(keep) == len(graph.nodes):
        return graph
    return assemble(graph.name, graph.input_types(), graph.consts, keep, list(graph.outputs))
