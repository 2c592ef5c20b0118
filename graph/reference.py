"""Running a graph node by node on numpy: the oracle for every pass, fusion and compiled model."""
from __future__ import annotations

import numpy as np

from ..backends.arrays import as_host_array
from ..errors import GraphError
from .registry import call_of, get_op


def bind_inputs(graph, inputs, named: dict, what: str) -> dict[str, np.ndarray]:
    """The graph's inputs by name from positional ``inputs`` (a list in graph order), a dict,
    or keywords; each checked against its declared shape and dtype."""
    if isinstance(inputs, dict):
        named = {**inputs, **named}
        inputs = None
    given = list(inputs) if inputs is not None else []
    if isinstance(inputs, np.ndarray):
        given = [inputs]
    if len(given) > len(graph.inputs):
        raise GraphError(f"{what}: graph '{graph.name}' takes {len(graph.inputs)} inputs "
                         f"({', '.join(graph.inputs)}); got {len(given)}")
    env = dict(zip(graph.inputs, given))
    for k, v in named.items():
        if k not in graph.inputs:
            raise GraphError(f"{what}: graph '{graph.name}' has no input named '{k}'; its inputs "
                             f"are {', '.join(graph.inputs) or 'none'}")
        if k in env:
            raise GraphError(f"{what}: input '{k}' is given twice (by position and by name)")
        env[k] = v
    missing = [n for n in graph.inputs if n not in env]
    if missing:
        raise GraphError(f"{what}: missing input(s) {', '.join(missing)} of graph "
                         f"'{graph.name}'; pass them in order or by name")
    for n in graph.inputs:
        t = graph.types[n]
        v = env[n]                       # a torch tensor, DLPack, buffer: viewed, not copied
        a = as_host_array(v, f"{what}: input '{n}'", GraphError) if hasattr(v, "__dlpack__") \
            else np.asarray(v)
        if a.dtype.name != t.dtype:
            raise GraphError(f"{what}: input '{n}' has dtype {a.dtype}; graph '{graph.name}' "
                             f"declares {t.dtype} (convert with .astype('{t.dtype}'))")
        if tuple(a.shape) != t.shape:
            raise GraphError(f"{what}: input '{n}' has shape {tuple(a.shape)}; graph "
                             f"'{graph.name}' declares {t.shape}")
        env[n] = a
    return env


def run_reference(graph, inputs=None, **named) -> list[np.ndarray]:
    """Evaluate ``graph`` with each operator's numpy reference, in node order."""
    env = bind_inputs(graph, inputs, named, "run_reference")
    env.update(graph.consts)
    for node in graph.nodes:
        ctx = call_of(graph, node)
        args = [env[i] if i else None for i in node.inputs]
        outs = get_op(node.op_type).reference(ctx, args)
        for name, val in zip(node.outputs, outs):
            if not name:
                continue
            val = np.asarray(val)
            t = graph.types[name]
            assert val.shape == t.shape and val.dtype.name == t.dtype, (
                f"{node.label}: the reference gave {val.dtype}{list(val.shape)}, inference "
                f"said {t}")
            env[name] = val
    return [np.array(env[o]) for o in graph.outputs]
