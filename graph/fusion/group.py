"""Fused groups as data: which nodes, which master op, which pattern, what goes in and out.

```python
for group in lt.graph.fuse(g):
    print(group)
```
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Graph, Node
from ..printer import node_str
from ..registry import OpPattern


@dataclass(frozen=True, eq=False)
class Group:
    """One fused group: the nodes that become ONE kernel.

    ``nodes`` in topological order; ``master`` the node that decides how the kernel is
    scheduled (the conv/matmul of an epilogue group, else the most complex node, the last one
    among equals); ``pattern`` the group's op pattern; ``inputs`` the values it reads from
    outside (graph inputs, constants, other groups' outputs) in order of first use;
    ``outputs`` the values it computes that are read outside it or are graph outputs.
    ``patterns`` holds each node's own pattern (same order as ``nodes``)."""

    index: int
    nodes: tuple[Node, ...]
    master: Node
    pattern: OpPattern
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    patterns: tuple[OpPattern, ...]
    graph: Graph = field(repr=False)

    @property
    def name(self) -> str:
        """``fused_<op>_<op>...``: the operator types in order (TVM's naming)."""
        return "fused_" + "_".join(n.op_type.lower() for n in self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def __str__(self) -> str:
        g = self.graph
        ins = ", ".join(f"%{v}: {g.types[v]}" + (" (const)" if v in g.consts else "")
                        for v in self.inputs)
        lines = [f"group {self.index} {self.name} [{self.pattern.name}, master "
                 f"{self.master.label}]", f"  inputs: {ins or '-'}"]
        for node, pat in zip(self.nodes, self.patterns):
            lines.append(f"{node_str(g, node)}    # {pat.name}")
        lines.append("  outputs: " + ", ".join(f"%{v}: {g.types[v]}" for v in self.outputs))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Group({self.index}, {self.name}, {self.pattern.name}, "
                f"inputs={list(self.inputs)}, outputs={list(self.outputs)})")


def make_groups(graph: Graph, patterns: list[OpPattern], owner: list[int]) -> list[Group]:
    """The groups of a partition (``owner[k]``: the representative of node k's group), in an
    execution order: each group after the groups whose outputs it reads."""
    members: dict[int, list[int]] = {}
    for k, r in enumerate(owner):
        members.setdefault(r, []).append(k)
    node_group = {}
    for r, ks in members.items():
        for k in ks:
            for o in graph.nodes[k].outputs:
                if o:
                    node_group[o] = r
    deps = {r: {node_group[i] for k in ks for i in graph.nodes[k].inputs
                if i in node_group and node_group[i] != r} for r, ks in members.items()}
    order = _topological(members, deps)
    readers: dict[str, set[int]] = {}
    for k, node in enumerate(graph.nodes):
        for i in node.inputs:
            readers.setdefault(i, set()).add(k)
    return [_group(graph, patterns, members[r], k, readers) for k, r in enumerate(order)]


def _topological(members: dict[int, list[int]], deps: dict[int, set[int]]) -> list[int]:
    """Groups in dependence order; among ready ones, the one with the earliest node first."""
    done: set[int] = set()
    order = []
    pending = sorted(members, key=lambda r: members[r][0])
    while pending:
        ready = next((r for r in pending if deps[r] <= done), None)
        assert ready is not None, "fusion made a cycle between groups"
        order.append(ready)
        done.add(ready)
        pending.remove(ready)
    return order


def _group(graph: Graph, patterns: list[OpPattern], ks: list[int], index: int,
           readers: dict[str, set[int]]) -> Group:
    nodes = tuple(graph.nodes[k] for k in ks)
    pats = tuple(patterns[k] for k in ks)
    made = {o for n in nodes for o in n.outputs if o}
    inputs: list[str] = []
    for n in nodes:
        for i in n.inputs:
            if i and i not in made and i not in inputs:
                inputs.append(i)
    inside = set(ks)
    outputs = [o for n in nodes for o in n.outputs if o and (
        o in graph.outputs or readers.get(o, set()) - inside)]
    top = max(pats)
    anchor = [n for n, p in zip(nodes, pats) if p == OpPattern.OUT_ELEMWISE_FUSABLE]
    master = anchor[0] if anchor else [n for n, p in zip(nodes, pats) if p == top][-1]
    return Group(index, nodes, master, top, tuple(inputs), tuple(outputs), pats, graph)
