"""Operator fusion by op pattern (TVM's FuseOps): a graph -> fused groups, one kernel each.

```python
groups = lt.graph.fuse(g)            # execution order
for grp in groups:
    print(grp)                       # nodes, master op, pattern, inputs/outputs
dag = lower_group(groups[0])         # ONE compute DAG: dag.tensors are the build arguments
```

The pieces, in the order they run: :mod:`.postdom` (the forward graph with op patterns and the
post-dominator tree), :mod:`.partition` (the fusion rules on a union-find of nodes),
:mod:`.group` (groups as data, in execution order), :mod:`.lower` (a group -> its DAG).
"""
from __future__ import annotations

from ...errors import GraphError
from ..ir import Graph
from .group import Group, make_groups
from .lower import GroupDAG, lower_group, tensor_inputs
from .partition import MAX_FUSE_DEPTH, partition
from .postdom import forward_graph, post_dominator_tree

__all__ = ["Group", "GroupDAG", "fuse", "lower_group", "tensor_inputs"]


def fuse(graph: Graph, max_depth: int = MAX_FUSE_DEPTH) -> list[Group]:
    """Partition ``graph`` into fused groups (TVM's FuseOps rules; see
    :mod:`looptune.graph.fusion.partition`), returned in an execution order. ``max_depth``
    bounds the nodes of one group (1: no fusion, every node its own group)."""
    if not isinstance(graph, Graph):
        raise GraphError(f"fuse: expected a looptune.graph.Graph; got {type(graph).__name__}")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise GraphError(f"fuse: max_depth must be a positive int; got {max_depth!r}")
    fnodes = forward_graph(graph)
    owner = partition(fnodes, post_dominator_tree(fnodes), max_depth)
    return make_groups(graph, [fn.pattern for fn in fnodes], owner)
