"""Common-subexpression elimination: one node per distinct computation, one constant per
distinct value."""
from __future__ import annotations

import hashlib

from ..ir import Graph
from .base import Builder, PassStats, count


def cse(graph: Graph, stats: PassStats | None = None) -> Graph:
    """Merge nodes with equal op type, inputs and attributes (``Node`` hashes on exactly
    those, once the inputs are renamed to the merged values), and constants with equal dtype,
    shape and bytes. The later copy's readers read the first one; a graph output keeps its
    name (a node that writes one is kept). Counts ``nodes merged`` and ``constants merged``.

    Before -> after::

        %a = Relu(%x); %b = Relu(%x); %c = Add(%a, %b)   ->   %a = Relu(%x); %c = Add(%a, %a)
    """
    b = Builder(graph)
    merged_consts = _merge_consts(b, graph)
    seen: dict[tuple, tuple[str, ...]] = {}
    merged = 0
    for node in graph.nodes:
        n = node.with_(inputs=[b.name(i) if i else "" for i in node.inputs])
        key = (n.op_type, n.inputs, n.attrs)
        first = seen.get(key)
        if first is not None and all(_can_merge(b, n, o, f) for o, f in zip(n.outputs, first)):
            for o, f in zip(n.outputs, first):
                if o:
                    b.rename(o, f)
            merged += 1
            continue
        b.keep(n)
        seen.setdefault(key, n.outputs)
    out, _ = b.finish()
    count(stats, "cse", "constants merged", merged_consts)
    count(stats, "cse", "nodes merged", merged)
    return out


def _can_merge(b: Builder, n, out: str, first: str) -> bool:
    if not out:
        return True
    if not first:
        return b.uses(out) == 0
    return b.forward(n.with_(outputs=[out]), first) is not None


def _merge_consts(b: Builder, graph: Graph) -> int:
    """Rename each constant equal to an earlier one (not a graph output) to that one."""
    by_key: dict[tuple, str] = {}
    merged = 0
    for name, arr in graph.consts.items():
        key = (arr.dtype.str, arr.shape, hashlib.blake2b(arr.tobytes()).digest())
        if key in by_key and name not in graph.outputs:
            b.rename(name, by_key[key])
            merged += 1
        else:
            by_key.setdefault(key, name)
    return merged
