"""A fused group as ONE compute DAG: the kernel's build arguments.

Each external input the group reads as a tensor becomes a placeholder (``p0, p1, ...`` in order
of first use); a constant that an operator reads at compile time (``ctx.const``: a shape, axes,
pads) stays a compile-time value and is no argument. The nodes' ``OpDef.compute`` results are
chained directly along the group's internal edges; the group's outputs (values read outside it,
graph outputs) are the DAG's outputs, in the group's order.

Names are canonical: placeholders ``p<k>`` and stages named by op type and position in the group
(``conv0``, ``add1``, ``relu2``), never by the graph's node names, so two identical groups (same
op sequence, attributes, shapes, dtypes) give the same DAG text, hence the same
``lt.search.auto_task`` digest: one task and one kernel for both.
"""
from __future__ import annotations

from dataclasses import dataclass

import looptune as lt

from ...errors import GraphError, LooptuneError
from ...lang.tensor import PlaceholderOp, Tensor
from ..registry import OpCall, call_of, get_op
from .group import Group


@dataclass
class GroupDAG:
    """The compute DAG of a group: ``tensors`` are the build arguments (the input placeholders
    then the outputs); ``inputs`` and ``outputs`` the graph values bound to them, in order."""

    group: Group
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    placeholders: tuple[Tensor, ...]
    results: tuple[Tensor, ...]

    @property
    def tensors(self) -> list[Tensor]:
        return [*self.placeholders, *self.results]

    @property
    def args(self) -> tuple[str, ...]:
        """The graph values of the build arguments, in order (inputs, then outputs)."""
        return self.inputs + self.outputs


class _StageCall(OpCall):
    """An OpCall whose tensors get a canonical stage name; errors still name the graph's node."""

    stage = ""

    @property
    def name(self) -> str:
        return self.stage


def _call(group: Group, node, k: int) -> OpCall:
    ctx = call_of(group.graph, node)
    out = _StageCall(ctx.node, ctx.attrs, ctx.in_types, ctx.consts, ctx.out_types)
    out.stage = f"{node.op_type.lower()}{k}"
    return out


def tensor_inputs(group: Group) -> tuple[str, ...]:
    """The external inputs the group reads as tensors (not only at compile time)."""
    made = {o for n in group.nodes for o in n.outputs if o}
    seen: list[str] = []
    for node in group.nodes:
        const_in = get_op(node.op_type).const_inputs
        for k, v in enumerate(node.inputs):
            if v and v not in made and k not in const_in and v not in seen:
                seen.append(v)
    return tuple(seen)


def lower_group(group: Group) -> GroupDAG:
    """The group's compute DAG; a GraphError naming the node whose compute fails."""
    graph = group.graph
    inputs = tensor_inputs(group)
    env: dict[str, Tensor] = {}
    for k, v in enumerate(inputs):
        t = graph.types[v]
        env[v] = lt.placeholder(t.shape, t.dtype, name=f"p{k}")
    for k, node in enumerate(group.nodes):
        opdef = get_op(node.op_type)
        if opdef.compute is None:
            raise GraphError(f"{node.label}: {node.op_type} has no tensor-expression compute; "
                             "it only runs on the numpy reference")
        ctx = _call(group, node, k)
        args = [env[v] if v and j not in opdef.const_inputs else None
                for j, v in enumerate(node.inputs)]
        try:
            outs = list(opdef.compute(ctx, args))
        except GraphError:
            raise
        except LooptuneError as e:
            raise GraphError(f"{node.label}: its compute failed: {e}") from e
        names = [o for o in node.outputs if o]
        if len(outs) < len(names):
            raise GraphError(f"{node.label}: its compute gave {len(outs)} tensors for "
                             f"{len(names)} outputs")
        for v, t in zip(node.outputs, outs):
            if v:
                _check_type(node, v, t, graph.types[v])
                env[v] = t
    results = _distinct_outputs([env[v] for v in group.outputs])
    return GroupDAG(group, inputs, group.outputs, tuple(env[v] for v in inputs), results)


def _check_type(node, value: str, t: Tensor, want) -> None:
    shape = tuple(getattr(s, "value", s) for s in t.shape)
    if shape != want.shape or t.dtype != want.dtype:
        raise GraphError(f"{node.label}: its compute gave {t.dtype}{list(shape)} for output "
                         f"'{value}', but inference says {want} (an operator definition bug)")


def _distinct_outputs(ts: list[Tensor]) -> tuple[Tensor, ...]:
    """The outputs as computed tensors, each its own: an output that is an input placeholder
    (an Identity) or that repeats another output becomes a copy stage."""
    out: list[Tensor] = []
    for k, t in enumerate(ts):
        if isinstance(t.op, PlaceholderOp) or any(t is u for u in out):
            src = t
            t = lt.compute(src.shape, lambda *i, s=src: s[i], name=f"copy{k}")
        out.append(t)
    return tuple(out)
