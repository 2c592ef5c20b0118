"""The dataflow of a graph as fusion sees it, and its post-dominator tree (TVM's
``IndexedForwardGraph`` and ``DominatorTree``).

Every node of the graph (in topological order) gets its op pattern and its out-edges: one per
consumer, labelled with the consumer's pattern, except that a BROADCAST consumer reading this
value at its own output shape is an ELEMWISE edge (``conv -> add(bias)`` is elementwise from the
conv's side). A node whose value is a graph output is *externally referenced*: it has no
post-dominator, so it never fuses into its consumers (its value must exist on its own).

The post-dominator of a node is the least common ancestor, in the tree built so far, of all its
consumers (the graph is processed from its end), as TVM computes it; ``pattern`` is the most
complex edge or node pattern met on the paths from the node up to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Graph, Node
from ..registry import OpPattern, call_of, get_op


@dataclass
class FNode:
    """A node of the forward graph: its pattern, its consumers (node index -> edge pattern),
    and whether its value leaves the graph."""

    index: int
    node: Node
    pattern: OpPattern
    outputs: dict[int, OpPattern] = field(default_factory=dict)
    extern_ref: bool = False


def node_pattern(graph: Graph, node: Node) -> OpPattern:
    """The op pattern of ``node`` (OPAQUE when its operator has no compute: it runs on numpy)."""
    opdef = get_op(node.op_type, where=node.label)
    if opdef.compute is None:
        return OpPattern.OPAQUE
    return OpPattern(opdef.pattern_of(call_of(graph, node)))


def forward_graph(graph: Graph) -> list[FNode]:
    """The nodes of ``graph`` in topological order, with patterns and labelled out-edges."""
    index = {}
    fnodes = []
    for k, node in enumerate(graph.nodes):
        fnodes.append(FNode(k, node, node_pattern(graph, node),
                            extern_ref=any(o in graph.outputs for o in node.outputs if o)))
        for o in node.outputs:
            if o:
                index[o] = k
    for k, node in enumerate(graph.nodes):
        pat = fnodes[k].pattern
        out_shape = graph.types[node.outputs[0]].shape if node.outputs[0] else None
        for v in node.inputs:
            if v not in index:
                continue                      # a graph input or a constant
            edge = pat
            # add(conv, bias) is elementwise seen from the conv: it reads it at its own shape
            if edge == OpPattern.BROADCAST and graph.types[v].shape == out_shape:
                edge = OpPattern.ELEMWISE
            src = fnodes[index[v]]
            src.outputs[k] = max(src.outputs.get(k, edge), edge)
    return fnodes


@dataclass
class DomNode:
    """A node of the post-dominator tree: its immediate post-dominator (``parent``, None at a
    root), depth, and the combined pattern of every path from the node to ``parent``."""

    index: int
    parent: DomNode | None = None
    depth: int = 1
    pattern: OpPattern = OpPattern.OPAQUE


def post_dominator_tree(fnodes: list[FNode]) -> list[DomNode]:
    """TVM's ``DominatorTree::PostDom``: nodes from last to first, each one's parent the least
    common ancestor of its consumers."""
    tree: list[DomNode | None] = [None] * len(fnodes)
    for k in range(len(fnodes) - 1, -1, -1):
        fn = fnodes[k]
        d = DomNode(k)
        if not fn.extern_ref:
            pattern = OpPattern.ELEMWISE
            parent = None
            for j, (c, edge) in enumerate(sorted(fn.outputs.items())):
                if j == 0:
                    parent = tree[c]
                else:
                    parent, pattern = _lca(parent, tree[c], pattern)
                pattern = max(pattern, edge)
            d.parent = parent
            d.depth = parent.depth + 1 if parent is not None else 1
            d.pattern = pattern
        tree[k] = d
    return tree                                   # type: ignore[return-value]


def _lca(a: DomNode | None, b: DomNode | None, pattern: OpPattern
         ) -> tuple[DomNode | None, OpPattern]:
    """The least common ancestor of ``a`` and ``b``, and ``pattern`` combined with the
    patterns of every tree edge climbed to reach it."""
    while a is not b:
        if a is None or b is None:
            return None, pattern
        if a.depth < b.depth:
            pattern, b = max(pattern, b.pattern), b.parent
        elif b.depth < a.depth:
            pattern, a = max(pattern, a.pattern), a.parent
        else:
            pattern = max(pattern, a.pattern, b.pattern)
            a, b = a.parent, b.parent
    return a, pattern
