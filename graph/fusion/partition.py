"""Partitioning a graph into fused groups: TVM's ``GraphPartitioner`` (FuseOps).

Every node starts as its own group (a union-find set). Walking the nodes in topological order,
a node is merged, with every node on the paths between them, into its immediate
post-dominator when the rules allow it:

- phase 0, an OUT_ELEMWISE_FUSABLE node (conv, matmul): into its post-dominator when every
  path there is elementwise and every node on the way at most BROADCAST (the epilogue: bias,
  activation, scaling);
- phase 0, an ELEMWISE/BROADCAST node: into a post-dominator reached through injective
  patterns (or a reduction: injective inputs of a reduction fuse into it), every node on the way
  at most INJECTIVE; the post-dominator's group itself may be anything but OPAQUE/TUPLE;
- phase 1, an INJECTIVE (or TUPLE) node: into its post-dominator when every node on the way
  is at most INJECTIVE and the post-dominator's group is INJECTIVE or a reduction (after
  phase 0, so that a conv finishes taking its epilogue first);
- a COMM_REDUCE node is never merged into a consumer (it may be the sink of the rules above);
  an OPAQUE node stays alone.

A node with several consumers fuses only into their common post-dominator, and only when all
the paths to it pass the rule's check: no fusion "across" a branch that the rule does not allow.
"""
from __future__ import annotations

from ..registry import OpPattern
from .postdom import DomNode, FNode

MAX_FUSE_DEPTH = 256        # most nodes in one group (TVM's default)


class _Set:
    """A union-find set of nodes: its pattern, whether it holds a complex anchor, its size."""

    __slots__ = ("parent", "pattern", "anchor", "size")

    def __init__(self, pattern: OpPattern):
        self.parent: _Set | None = None
        self.pattern = pattern
        self.anchor = pattern == OpPattern.OUT_ELEMWISE_FUSABLE
        self.size = 1

    def root(self) -> _Set:
        r = self
        while r.parent is not None:
            r = r.parent
        p = self
        while p is not r:                     # path compression
            p.parent, p = r, p.parent
        return r


class _Partitioner:
    def __init__(self, fnodes: list[FNode], tree: list[DomNode], max_depth: int):
        self.fnodes = fnodes
        self.tree = tree
        self.max_depth = max_depth
        self.sets = [_Set(fn.pattern) for fn in fnodes]

    # the paths between a node and its post-dominator -----------------------------------------

    def check_path(self, src: int, sink: int, cond) -> bool:
        """Every node on a path from ``src`` (excluded) to ``sink`` satisfies
        ``cond(pattern of its group, is_sink)``."""
        seen: set[int] = set()

        def visit(k: int) -> bool:
            if k in seen:
                return True
            seen.add(k)
            if not cond(self.sets[k].root().pattern, k == sink):
                return False
            return k == sink or all(visit(c) for c in self.fnodes[k].outputs)
        return all(visit(c) for c in self.fnodes[src].outputs)

    def commit(self, src: int, sink: int) -> None:
        """Merge every node on the paths from ``src`` to ``sink`` into ``sink``'s group."""
        target = self.sets[sink]
        for k in self._path_nodes(src, sink):
            self._merge(self.sets[k], target)

    def _path_nodes(self, src: int, sink: int):
        """Each node on the paths from ``src`` to ``sink`` once (``sink`` excluded)."""
        seen: set[int] = set()
        stack = [src]
        while stack:
            k = stack.pop()
            if k == sink or k in seen:
                continue
            seen.add(k)
            yield k
            stack.extend(self.fnodes[k].outputs)

    def _merge(self, child: _Set, parent: _Set) -> None:
        child, parent = child.root(), parent.root()
        if child is parent:
            return
        parent.size += child.size
        child.parent = parent
        if child.anchor:
            assert not parent.anchor, "fusion merged two complex (conv/matmul) groups"
            parent.anchor = True
            parent.pattern = max(parent.pattern, child.pattern)

    def fused_size(self, src: int, sink: int) -> int:
        """How many nodes the sink's group would hold with ``src``'s path merged in."""
        total = self.sets[sink].root().size
        for k in self._path_nodes(src, sink):
            total += self.sets[k].size if self.sets[k].parent is None else 1
        return total

    # the rules ------------------------------------------------------------------------------

    def run(self, phase: int) -> None:
        for k, fn in enumerate(self.fnodes):
            own = self.sets[k]
            dom = self.tree[k]
            if own.pattern == OpPattern.OPAQUE or dom.parent is None:
                continue
            sink = dom.parent.index
            sink_set = self.sets[sink]
            if own.root() is sink_set.root() or sink_set.pattern == OpPattern.TUPLE:
                continue
            if self.fused_size(k, sink) > self.max_depth:
                continue
            rule = _rule(own.pattern, dom.pattern, phase)
            if rule is not None and self.check_path(k, sink, rule):
                self.commit(k, sink)


def _rule(pattern: OpPattern, dom_pattern: OpPattern, phase: int):
    """The check of the paths to the post-dominator for a node of ``pattern`` whose paths
    there combine to ``dom_pattern`` in ``phase``; None: this node does not fuse now."""
    if pattern == OpPattern.OUT_ELEMWISE_FUSABLE:
        if phase == 0 and dom_pattern == OpPattern.ELEMWISE:
            return lambda kind, is_sink: kind <= OpPattern.BROADCAST
        return None
    if pattern <= OpPattern.BROADCAST:
        if phase == 0 and (dom_pattern <= OpPattern.INJECTIVE or
                           dom_pattern == OpPattern.COMM_REDUCE):
            return _elemwise_path
        return None
    if pattern in (OpPattern.INJECTIVE, OpPattern.TUPLE):
        return _injective_path if phase == 1 else None
    return None                                   # COMM_REDUCE: only ever a sink


def _elemwise_path(kind: OpPattern, is_sink: bool) -> bool:
    # injective ops on parallel branches may join an elementwise anchor; the sink may already
    # be a reduction or a conv's group
    if not is_sink:
        return kind <= OpPattern.INJECTIVE
    return kind <= OpPattern.COMM_REDUCE or kind == OpPattern.OUT_ELEMWISE_FUSABLE


def _injective_path(kind: OpPattern, is_sink: bool) -> bool:
    # a transpose or reshape feeding a reduction is read through its index map by the
    # reduction's loop (TVM's "injective inputs fuse into a reduction")
    return kind <= OpPattern.INJECTIVE or (is_sink and kind == OpPattern.COMM_REDUCE)


def partition(fnodes: list[FNode], tree: list[DomNode], max_depth: int = MAX_FUSE_DEPTH
              ) -> list[int]:
    """The group of each node: the index of its group's representative node."""
    p = _Partitioner(fnodes, tree, max_depth)
    for phase in (0, 1):
        p.run(phase)
    roots = {}
    out = []
    for k in range(len(fnodes)):
        r = p.sets[k].root()
        out.append(roots.setdefault(id(r), k))
    return out
