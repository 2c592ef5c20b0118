"""The text and Graphviz forms of a graph."""
from __future__ import annotations

import json


def _fmt_attr(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return "[" + ", ".join(_fmt_attr(x) for x in v) + "]"
    return repr(v) if isinstance(v, str) else str(v)


def node_str(graph, node) -> str:
    outs = ", ".join(f"%{o}: {graph.types[o]}" for o in node.outputs if o)
    ins = ", ".join(("%" + i) if i else "_" for i in node.inputs)
    attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in node.attrs)
    return f"  {outs} = {node.op_type}({ins}{'; ' + attrs if attrs else ''})"


def graph_str(graph) -> str:
    """One line per node with its outputs' types; inputs, constants and outputs first."""
    lines = [f"graph {graph.name}("
             + ", ".join(f"%{n}: {graph.types[n]}" for n in graph.inputs) + ") {"]
    for name in graph.consts:
        lines.append(f"  %{name}: {graph.types[name]} = const")
    lines.extend(node_str(graph, n) for n in graph.nodes)
    lines.append("  return " + ", ".join("%" + o for o in graph.outputs))
    lines.append("}")
    return "\n".join(lines)


def _q(s: str) -> str:
    return json.dumps(s)        # a DOT string literal: quotes and backslashes escaped


def graph_dot(graph, groups=None) -> str:
    """Graphviz DOT: inputs as ellipses, constants as notes, nodes as boxes; with ``groups``
    (fused groups, lists of nodes) each group is a cluster."""
    lines = [f"digraph {_q(graph.name)} {{", "  rankdir=TB;", "  node [fontsize=10];"]
    for n in graph.inputs:
        lines.append(f"  {_q('v:' + n)} [label={_q(n + chr(10) + str(graph.types[n]))}, "
                     "shape=ellipse];")
    for n in graph.consts:
        lines.append(f"  {_q('v:' + n)} [label={_q(n + chr(10) + str(graph.types[n]))}, "
                     "shape=note, color=gray];")
    node_id = {}
    for k, node in enumerate(graph.nodes):
        node_id[id(node)] = f"n{k}"
    clusters = []
    if groups:
        for gi, grp in enumerate(groups):
            nodes = getattr(grp, "nodes", grp)
            clusters.append((gi, [node_id[id(n)] for n in nodes if id(n) in node_id]))
    for k, node in enumerate(graph.nodes):
        label = node.op_type + "\n" + ", ".join(str(graph.types[o]) for o in node.outputs if o)
        lines.append(f"  n{k} [label={_q(label)}, shape=box];")
    for gi, ids in clusters:
        lines.append(f"  subgraph cluster_{gi} {{ label={_q('group ' + str(gi))}; "
                     + " ".join(ids) + "; }")
    producer = {o: node_id[id(n)] for n in graph.nodes for o in n.outputs if o}
    for node in graph.nodes:
        for i in node.inputs:
            if i:
                src = producer.get(i, _q("v:" + i))
                lines.append(f"  {src} -> {node_id[id(node)]};")
    for o in graph.outputs:
        lines.append(f"  {_q('out:' + o)} [label={_q(o)}, shape=doublecircle];")
        lines.append(f"  {producer.get(o, _q('v:' + o))} -> {_q('out:' + o)};")
    lines.append("}")
    return "\n".join(lines)
