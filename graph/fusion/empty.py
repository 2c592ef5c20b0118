"""Empty values (a dimension of size 0) never reach a kernel: a compute cannot produce them.

An empty tensor holds no data, so each one is a constant: :func:`drop_empty_values` rewrites
the graph before fusion so that no node computes one, and the nodes that read one no longer
need it. Rules, in graph order (each ``before -> after``)::

    %e: f32[2, 0] = Slice(%x; ...)              ->  %e = const f32[2, 0]      (no kernel)
    %a, %e: f32[2, 0] = Split(%x; split=[3, 0]) ->  %a = Identity(%x)         (or a Slice)
    %y = Concat(%a, %e; axis=1)                 ->  %y = Identity(%a)         (empties dropped)
    %s = ReduceSum(%e)         (constant inputs) ->  %s = const (its reference, once)

A node that still reads an empty value after these (a Gemm whose A and B are empty, say)
makes its group run on numpy (:func:`looptune.graph.compile.build_kernels` checks
:func:`touches_empty`). Graph inputs are never empty (``g.input`` refuses size 0).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from ..registry import call_of, get_op
from .group import Group
from .lower import tensor_inputs


def is_empty(graph: Graph, value: str) -> bool:
    return bool(value) and graph.types[value].size == 0


def drop_empty_values(graph: Graph) -> Graph:
    """``graph`` with every empty value a constant and no node computing or (where a rule
    above applies) reading one; ``graph`` itself when no node computes an empty value."""
    made = [o for n in graph.nodes for o in n.outputs if o]
    if not any(is_empty(graph, o) for o in made):
        return graph
    consts = dict(graph.consts)
    nodes: list[Node] = []
    for node in graph.nodes:
        outs = [o for o in node.outputs if o]
        empty_outs = [o for o in outs if is_empty(graph, o)]
        if empty_outs and (len(empty_outs) == len(outs) or node.op_type == "Split"):
            for o in empty_outs:                            # constants, computed by no node
                consts[o] = np.zeros(graph.types[o].shape, graph.types[o].dtype)
            if node.op_type == "Split" and len(empty_outs) < len(outs):
                nodes.extend(_split_as_slices(graph, node))
            continue
        if node.op_type == "Concat":
            node = _concat_without_empties(graph, node)
        reads_empty = any(is_empty(graph, i) for i in node.inputs)
        if reads_empty and all(not i or i in consts for i in node.inputs):
            consts.update(_fold(graph, node, consts))
            continue
        nodes.append(node)
    return graph.replace(nodes=nodes, consts=consts)


def _split_as_slices(graph: Graph, node: Node) -> list[Node]:
    """Each non-empty output of a Split as its own Slice (an Identity when it is the whole
    input); the empty ones are constants already."""
    x = node.inputs[0]
    shape = graph.types[x].shape
    axis = call_of(graph, node).attrs["axis"] % len(shape)
    out, start = [], 0
    for k, o in enumerate(node.outputs):
        size = graph.types[o].shape[axis] if o else 0
        if o and size:
            name = f"{node.name or o}_{k}"
            if size == shape[axis]:
                out.append(Node.make("Identity", [x], [o], {}, name))
            else:
                out.append(Node.make("Slice", [x], [o], {"starts": [start],
                                                         "ends": [start + size],
                                                         "axes": [axis]}, name))
        start += size
    return out


def _concat_without_empties(graph: Graph, node: Node) -> Node:
    keep = [i for i in node.inputs if i and not is_empty(graph, i)]
    if len(keep) == len(node.inputs) or not keep:
        return node
    if len(keep) == 1:
        return Node.make("Identity", keep, node.outputs, {}, node.name)
    return node.with_(inputs=tuple(keep))


def _fold(graph: Graph, node: Node, consts: dict) -> dict[str, np.ndarray]:
    """The outputs of a node whose inputs are all constants, by its numpy reference."""
    ctx = call_of(graph, node)
    ctx.consts = [consts.get(i) if i else None for i in node.inputs]
    vals = get_op(node.op_type).reference(ctx, [consts[i] if i else None for i in node.inputs])
    return {o: np.asarray(v, dtype=graph.types[o].dtype).reshape(graph.types[o].shape)
            for o, v in zip(node.outputs, vals) if o}


def touches_empty(group: Group) -> bool:
    """Whether ``group`` reads or computes an empty tensor (it then runs on numpy)."""
    g = group.graph
    return (any(is_empty(g, v) for v in tensor_inputs(group))
            or any(is_empty(g, o) for n in group.nodes for o in n.outputs))
