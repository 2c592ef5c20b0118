"""What every graph pass shares: the statistics they report, a builder that rebuilds a graph
node by node while rules replace nodes, and the fixpoint driver of the rewriting passes.

A pass is a pure function ``(graph, stats=None) -> Graph``: it never mutates its argument. The
rewriting passes (constant folding, CSE, the algebraic rules, BN folding) share one shape: walk
the nodes in order, re-create each in a new graph (:class:`Builder`) with its inputs renamed,
and let the first matching rule replace it, either by a value that already exists (``Identity(x)
-> x``) or by new nodes whose last output keeps the old name; then drop the dead nodes. A rule
only looks *up* the graph (at the producers of a node's inputs), which the builder has already
rebuilt, so a chain rewrites in one sweep; :func:`rewrite` sweeps until nothing changes.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import GraphError
from ..ir import Graph, Node, TensorType
from ..registry import call_of, supported_ops

# ---- statistics ------------------------------------------------------------------------------


@dataclass
class PassRecord:
    """One run of one pass: node counts before and after (when the pipeline ran it) and what
    it did, as counts by kind (``{"identity": 2, "dead nodes removed": 3}``)."""

    name: str
    nodes_before: int | None = None
    nodes_after: int | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        nodes = (f"{self.nodes_before:>4} -> {self.nodes_after:<4}"
                 if self.nodes_before is not None and self.nodes_after is not None else " " * 12)
        did = ", ".join(f"{k} {v}" for k, v in self.counts.items()) or "no change"
        return f"{self.name:<16} {nodes}  {did}"


class PassStats:
    """What the passes did, one :class:`PassRecord` per pass run, in order. Give one to
    ``optimize(graph, stats=stats)`` (or to a single pass) and print it::

        fold_constants     42 -> 40    folded 2
        simplify           40 -> 31    identity 3, transpose_transpose 2, dead nodes removed 4
    """

    def __init__(self):
        self.records: list[PassRecord] = []
        self._open: PassRecord | None = None

    def begin(self, name: str, graph: Graph) -> None:
        """Open the record of a pass run (the pipeline calls this before each pass)."""
        self._open = PassRecord(name, nodes_before=len(graph.nodes))
        self.records.append(self._open)

    def end(self, graph: Graph) -> None:
        assert self._open is not None, "PassStats.end() without begin()"
        self._open.nodes_after = len(graph.nodes)
        self._open = None

    def add(self, pass_name: str, what: str, n: int = 1) -> None:
        """Count ``n`` events of kind ``what`` for ``pass_name`` (into the open record, or a
        new one when the pass runs on its own)."""
        if n == 0:
            return
        rec = self._open
        if rec is None or rec.name != pass_name:
            rec = PassRecord(pass_name)
            self.records.append(rec)
        rec.counts[what] = rec.counts.get(what, 0) + n

    def total(self, pass_name: str | None = None, what: str | None = None) -> int:
        """The sum of the counts of ``pass_name`` (every pass when None) of kind ``what``
        (every kind when None)."""
        return sum(v for r in self.records if pass_name in (None, r.name)
                   for k, v in r.counts.items() if what in (None, k))

    def as_dict(self) -> list[dict[str, Any]]:
        return [{"pass": r.name, "nodes_before": r.nodes_before, "nodes_after": r.nodes_after,
                 "counts": dict(r.counts)} for r in self.records]

    def __str__(self) -> str:
        return "\n".join(str(r) for r in self.records)


def count(stats: PassStats | None, pass_name: str, what: str, n: int = 1) -> None:
    if stats is not None:
        stats.add(pass_name, what, n)


# ---- helpers on graphs ---------------------------------------------------------------------


def use_counts(graph: Graph) -> dict[str, int]:
    """How many times each value is read: once per node input slot, once per graph output."""
    uses: dict[str, int] = {}
    for n in graph.nodes:
        for i in n.inputs:
            if i:
                uses[i] = uses.get(i, 0) + 1
    for o in graph.outputs:
        uses[o] = uses.get(o, 0) + 1
    return uses


def live_nodes(nodes: list[Node], outputs: Iterable[str]) -> list[Node]:
    """The nodes some output depends on, in their order."""
    live = set(outputs)
    keep = []
    for n in reversed(nodes):
        if any(o in live for o in n.outputs if o):
            keep.append(n)
            live.update(i for i in n.inputs if i)
    return keep[::-1]


def assemble(name: str, inputs: list[tuple[str, TensorType]], consts: dict[str, np.ndarray],
             nodes: list[Node], outputs: list[str]) -> Graph:
    """``Graph.from_parts`` that shares the (read-only) constant arrays instead of copying
    them, and keeps only the constants some node or output reads."""
    used = {i for n in nodes for i in n.inputs} | set(outputs)
    g = Graph(name)
    for n, t in inputs:
        g.input(n, t.shape, t.dtype)
    for n, arr in consts.items():
        if n in used:
            _share_const(g, n, arr)
    for node in nodes:
        for i in node.inputs:
            if i and i not in g.types:
                raise GraphError(f"{node.label}: input '{i}' is not defined before this node "
                                 "(a pass produced a graph out of order)")
        g._add_node(node)
    g.output(*outputs)
    return g


def _share_const(g: Graph, name: str, arr: np.ndarray) -> None:
    if arr.flags.writeable:
        arr = np.array(arr, order="C", copy=True)
        arr.setflags(write=False)
    g._claim(name, f"const '{name}'")
    g.consts[name] = arr
    g.types[name] = TensorType(tuple(int(s) for s in arr.shape), arr.dtype.name)


def has_ops(*ops: str) -> bool:
    """Whether every operator named is in the library (a rule that emits an operator checks)."""
    have = supported_ops()
    return all(o in have for o in ops)


# ---- the builder ---------------------------------------------------------------------------

_MANY = 1 << 30      # the use count of a value a rule created in this sweep: unknown, so "many"


class Builder:
    """A new graph under construction from ``old``, node by node. Rules read it (types,
    constants, producers, use counts) and add to it; see the module docstring."""

    def __init__(self, old: Graph):
        self.old = old
        self.g = Graph(old.name)
        for n, t in old.input_types():
            self.g.input(n, t.shape, t.dtype)
        for n, arr in old.consts.items():
            _share_const(self.g, n, arr)
        self._uses = use_counts(old)
        self._renamed: dict[str, str] = {}
        self._outputs = set(old.outputs)
        self._claimed: dict[str, str] = {}       # value -> the graph output name it will take
        self._taken = set(old.types)
        self._counter = 0

    # reading
    def name(self, v: str) -> str:
        """What the old value ``v`` is called in the new graph."""
        while v in self._renamed:
            v = self._renamed[v]
        return v

    def type(self, v: str) -> TensorType:
        return self.g.types[v]

    def shape(self, v: str) -> tuple[int, ...]:
        return self.g.types[v].shape

    def out_type(self, node: Node, k: int = 0) -> TensorType:
        """The type of output ``k`` of the node being rewritten (rules preserve it)."""
        return self.old.types[node.outputs[k]]

    def const(self, v: str) -> np.ndarray | None:
        """The value of ``v`` when it is a constant, else None."""
        return self.g.consts.get(v) if v else None

    def producer(self, v: str) -> Node | None:
        return self.g.producer(v) if v else None

    def producer_of(self, v: str, op_type: str) -> Node | None:
        """The node computing ``v`` when its op is ``op_type``, else None."""
        p = self.producer(v)
        return p if p is not None and p.op_type == op_type else None

    def uses(self, v: str) -> int:
        """How many times ``v`` is read (at least; exact at the start of a sweep)."""
        return self._uses.get(v, _MANY)

    def attrs(self, node: Node) -> dict[str, Any]:
        """The node's attributes with the operator's defaults filled in."""
        return call_of(self.g, node).attrs

    # building
    def fresh(self, base: str) -> str:
        while True:
            self._counter += 1
            name = f"{base}_{self._counter}"
            if name not in self._taken and name not in self.g.types:
                self._taken.add(name)
                return name

    def add(self, op_type: str, inputs, attrs: dict | None = None, out: str | None = None,
            base: str | None = None) -> str:
        """Add a node (single output) and return its output's name: ``out`` when given (a rule
        names its last node after the node it replaces), else a fresh name."""
        out = out or self.fresh(base or op_type.lower())
        self._taken.add(out)
        self.g._add_node(Node.make(op_type, inputs, [out], attrs or {}, out))
        return out

    def add_const(self, value, base: str = "const", dtype: str | None = None,
                  name: str | None = None) -> str:
        arr = np.asarray(value, dtype=dtype)
        name = name or self.fresh(base)
        self._taken.add(name)
        _share_const(self.g, name, np.array(arr, order="C", copy=True))
        return name

    def keep(self, node: Node) -> None:
        self.g._add_node(node)

    def forward(self, node: Node, value: str) -> str | None:
        """``value`` when it may stand for the node's (first) output, else None: a graph output
        keeps its name, so the value must be a node's output that can take that name."""
        out = node.outputs[0]
        if out not in self._outputs:
            return value
        if (value in self.g.consts or value in self.g.inputs or value in self._outputs
                or value in self._claimed or self.g.producer(value) is None):
            return None
        return value

    def rename(self, old: str, new: str) -> None:
        """From now on, readers of ``old`` read ``new``."""
        if old == new:
            return
        self._renamed[old] = new
        self._uses[new] = self._uses.get(new, 0) + self._uses.get(old, 0)
        if old in self._outputs:
            assert self.g.producer(new) is not None and new not in self._claimed, (
                f"graph output '{old}' cannot be renamed to '{new}' (rules check forward())")
            self._claimed[new] = old

    def finish(self) -> tuple[Graph, int]:
        """The new graph (dead nodes dropped, graph outputs under their names) and the number
        of dead nodes removed."""
        back = {}
        for o in self.old.outputs:
            v = self.name(o)
            if v != o:
                assert self._claimed.get(v) == o, f"graph output '{o}' lost its name to '{v}'"
                back[v] = o

        def rn(v: str) -> str:
            return back.get(v, v)

        nodes = [n.with_(inputs=[rn(i) for i in n.inputs], outputs=[rn(o) for o in n.outputs])
                 if back else n for n in self.g.nodes]
        outputs = [rn(self.name(o)) for o in self.old.outputs]
        keep = live_nodes(nodes, outputs)
        g = assemble(self.old.name, self.old.input_types(), self.g.consts, keep, outputs)
        return g, len(nodes) - len(keep)


Rule = Callable[[Builder, Node], "str | None"]


def rule_name(rule: Rule) -> str:
    return rule.__name__.lstrip("_")


def rewrite(graph: Graph, rules: list[Rule], stats: PassStats | None, pass_name: str,
            max_sweeps: int = 50) -> Graph:
    """Apply ``rules`` until none matches. For each node (inputs renamed), the first rule that
    returns a value replaces it; a rule returns None without adding anything when it does not
    match. Counts each rule's rewrites and the dead nodes removed into ``stats``."""
    original = graph
    for sweep in range(max_sweeps):
        b = Builder(graph)
        changed = 0
        for node in graph.nodes:
            n = node.with_(inputs=[b.name(i) if i else "" for i in node.inputs])
            for rule in rules:
                mark = len(b.g.nodes)
                res = rule(b, n)
                if res is None:
                    assert len(b.g.nodes) == mark, f"rule {rule_name(rule)} added nodes " \
                                                   "and then did not match"
                    continue
                count(stats, pass_name, rule_name(rule))
                b.rename(n.outputs[0], res)
                changed += 1
                break
            else:
                b.keep(n)
        if not changed and sweep == 0 and len(live_nodes(b.g.nodes, graph.outputs)) == len(
                graph.nodes):
            return original                      # nothing to do: the same object back
        graph, dead = b.finish()
        count(stats, pass_name, "dead nodes removed", dead)
        if not changed:
            return graph
    raise AssertionError(f"{pass_name}: the rules did not reach a fixpoint in {max_sweeps} "
                         "sweeps (two rules undo each other)")
