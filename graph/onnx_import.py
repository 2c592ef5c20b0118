"""Importing an ONNX model as a looptune Graph.

```python
g = lt.graph.from_onnx("model.onnx")                             # a path or an onnx.ModelProto
g = lt.graph.from_onnx(m, shapes={"x": (1, 3, 224, 224)})         # fix symbolic dimensions
```

What the importer does (operator definitions handle the opset differences themselves: where
ONNX moved an attribute to an input, the operator accepts both forms):

- opsets 13 to current of the default domain; an older model is refused with the command that
  converts it;
- initializers (and graph inputs that are also initializers) become constants; Constant nodes
  are folded into constants (their value attribute in every form);
- attributes become Python values (ints, floats, strings, lists, tensors as numpy arrays);
- every graph input must have a static shape (``shapes=`` fixes symbolic ones);
- every operator of the model must be in :func:`supported_ops`: the ones that are not are
  listed all at once, with counts, in one GraphError;
- dtypes map to numpy's names; bfloat16, float8, int4, strings and complex are refused;
- node names are kept (an empty or repeated name gets a unique one; whitespace and quotes are
  replaced by '_'), value names are kept as they are.

The ``onnx`` package is optional (``pip install looptune[onnx]``); it is imported here only
when a model is imported.
"""
from __future__ import annotations

import heapq
import os
import re
from collections import Counter
from typing import Any

import numpy as np

from ..errors import GraphError
from ..lang import dtype as dt
from .ir import Graph, Node, TensorType
from .registry import get_op, supported_ops

MIN_OPSET = 13
_DEFAULT_DOMAINS = ("", "ai.onnx")

# ONNX TensorProto.DataType -> numpy's name (the types looptune computes with)
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
           7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}


def _onnx():
    """The onnx module, or a GraphError saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise GraphError("from_onnx: the onnx package is not installed; install it with "
                         "`pip install looptune[onnx]` (or `pip install onnx`)") from None
    return onnx


def dtype_of(elem_type: int, what: str) -> str:
    """numpy's name for ONNX element type ``elem_type``; a GraphError naming ``what`` (an
    input, an initializer, a node) for the types looptune does not compute with."""
    if elem_type in _DTYPES:
        return _DTYPES[elem_type]
    onnx = _onnx()
    try:
        name = onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        name = f"element type {elem_type}"
    raise GraphError(f"{what}: dtype {name} is not supported by looptune (supported: "
                     f"{', '.join(dt.SUPPORTED)}); convert the model to one of those")


def load_model(model: Any):
    """An onnx.ModelProto from a path or a ModelProto (checked to be one)."""
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise GraphError(f"from_onnx: no such file: {path}")
        from google.protobuf.message import DecodeError
        try:
            return onnx.load(path)
        except (DecodeError, OSError, ValueError) as e:     # not protobuf, external data...
            raise GraphError(f"from_onnx: {path} is not a readable ONNX model "
                             f"({type(e).__name__}: {e})") from None
    raise GraphError(f"from_onnx: expected a path or an onnx.ModelProto; got "
                     f"{type(model).__name__}")


def from_onnx(model: Any, shapes: dict[str, Any] | None = None, *,
              constants: dict[str, Any] | None = None, name: str | None = None) -> Graph:
    """Import an ONNX model (a path or an ``onnx.ModelProto``) as a :class:`Graph`.

    ``shapes`` maps graph input names to static shapes, replacing symbolic dimensions
    (``{"x": (1, 3, 224, 224)}``). ``constants`` maps graph input names to arrays that become
    constants of the graph (an input the model reads as a shape or axes, say). Raises
    GraphError for an unsupported opset, operator (all of them at once), dtype, a symbolic
    input dimension without ``shapes``, or a node whose shapes or attributes do not fit.
    """
    onnx = _onnx()
    m = load_model(model)
    _check_opset(m)
    gp = m.graph
    _check_ops(m)
    inits = {t.name: t for t in gp.initializer}
    consts: dict[str, np.ndarray] = {}
    for t in gp.initializer:
        consts[t.name] = _tensor(onnx, t, f"initializer '{t.name}'")
    consts.update(_bound_inputs(gp, inits, constants or {}))
    inputs = _inputs(gp, set(consts), shapes or {})
    nodes, folded = _nodes(onnx, gp)
    consts.update(folded)
    used = {i for n in nodes for i in n.inputs} | {o.name for o in gp.output}
    consts = {k: v for k, v in consts.items() if k in used}
    gname = name or _graph_name(gp.name)
    g = _build(gname, inputs, consts, _toposort(nodes),
               [o.name for o in gp.output])
    _check_outputs(gp, g)
    return g


# ---- building, with the values operators need at compile time computed at import ----------


def _build(name: str, inputs, consts, nodes: list[Node], outputs: list[str]) -> Graph:
    """The graph of ``nodes``. A node computing a value that some operator needs at compile
    time (a Reshape's shape as exporters write it: Shape -> Gather -> Concat) is evaluated
    here, once its inputs are constants (Shape and Size: once its input's type is known), and
    its outputs become constants; every other node stays a node (the passes fold the rest)."""
    g = Graph.from_parts(name, inputs, consts, [], [])
    needed = compile_time_values(nodes)
    for node in nodes:
        for i in node.inputs:
            if i and i not in g.types:
                raise GraphError(f"{node.label}: input '{i}' is not produced by any node, "
                                 "initializer or graph input of the model")
        if all(o in needed for o in node.outputs if o) and _evaluable(g, node):
            for o, v in zip(node.outputs, _evaluate(g, node)):
                if o:
                    g.const(v, name=o)
        else:
            g._add_node(node)        # from_parts' step: infer, check, record
    g.output(*outputs)
    return g


def compile_time_values(nodes: list[Node]) -> set[str]:
    """Values that flow into an operand an operator needs at compile time (``const_inputs``),
    up through the nodes computing them (stopping at Shape/Size, which read types only)."""
    producer = {o: n for n in nodes for o in n.outputs if o}
    stack = [n.inputs[k] for n in nodes for k in get_op(n.op_type).const_inputs
             if k < len(n.inputs) and n.inputs[k]]
    needed: set[str] = set()
    while stack:
        v = stack.pop()
        if v in needed:
            continue
        needed.add(v)
        p = producer.get(v)
        if p is not None and p.op_type not in _TYPE_ONLY:
            stack.extend(i for i in p.inputs if i)
    return needed


_TYPE_ONLY = ("Shape", "Size")


def _evaluable(g: Graph, node: Node) -> bool:
    if node.op_type in _TYPE_ONLY:
        return True
    return all(not i or g.is_const(i) for i in node.inputs)


def _evaluate(g: Graph, node: Node) -> list[np.ndarray]:
    """``node``'s outputs by its numpy reference, on a graph of just that node."""
    ins = [(i, g.types[i]) for i in dict.fromkeys(node.inputs) if i and not g.is_const(i)]
    consts = {i: g.consts[i] for i in node.inputs if i and g.is_const(i)}
    one = Graph.from_parts("fold", ins, consts, [node], [o for o in node.outputs if o])
    zeros = [np.zeros(t.shape, t.dtype) for _, t in ins]      # Shape/Size read no data
    return _by_slot(node, one.run_reference(zeros))


def _by_slot(node: Node, values: list[np.ndarray]) -> list[np.ndarray | None]:
    it = iter(values)
    return [next(it) if o else None for o in node.outputs]


# ---- model-level checks ------------------------------------------------------------------------


def _check_opset(m) -> None:
    versions = [o.version for o in m.opset_import if o.domain in _DEFAULT_DOMAINS]
    if not versions:
        raise GraphError("from_onnx: the model imports no version of the default ONNX domain "
                         "(opset_import lists none); looptune reads opsets "
                         f"{MIN_OPSET} and newer")
    if versions[0] < MIN_OPSET:
        raise GraphError(f"from_onnx: the model uses opset {versions[0]}; looptune reads opsets "
                         f"{MIN_OPSET} and newer: convert it with onnx.version_converter."
                         f"convert_version(model, {MIN_OPSET})")


def _check_ops(m) -> None:
    """One GraphError listing every operator of the model looptune lacks, with counts."""
    have = set(supported_ops()) | {"Constant"}
    missing: Counter[str] = Counter()
    for n in m.graph.node:
        if n.domain not in _DEFAULT_DOMAINS:
            missing[f"{n.domain}::{n.op_type}"] += 1
        elif n.op_type not in have:
            missing[n.op_type] += 1
    if missing:
        listed = ", ".join(f"{op} ({k})" for op, k in sorted(missing.items()))
        raise GraphError(f"from_onnx: the model uses {len(missing)} operator type(s) looptune "
                         f"does not support: {listed}; supported: {', '.join(sorted(have))}")


def _graph_name(name: str) -> str:
    name = re.sub(r"[\s\"'\\]+", "_", name or "").strip("_")
    return name or "onnx_model"


# ---- values ------------------------------------------------------------------------------------


def _tensor(onnx, t, what: str) -> np.ndarray:
    """A TensorProto as a numpy array (dtype checked first, so a bfloat16 weight is refused
    with a message rather than converted)."""
    dtype_of(t.data_type, what)
    try:
        arr = onnx.numpy_helper.to_array(t)
    except (OSError, ValueError, TypeError) as e:     # external data not loaded, bad data
        raise GraphError(f"{what}: cannot read its data ({type(e).__name__}: {e}); load the "
                         "model from its file so external data is found") from None
    return np.asarray(arr)


def _static_shape(vi, what: str, fixed) -> tuple[int, ...]:
    tt = vi.type.tensor_type
    if fixed is not None:
        shp = _user_shape(fixed, what)
        if tt.HasField("shape"):
            dims = tt.shape.dim
            if len(dims) != len(shp):
                raise GraphError(f"{what}: shapes= gives rank {len(shp)} {shp}; the model "
                                 f"declares rank {len(dims)}")
            for k, (d, s) in enumerate(zip(dims, shp)):
                if d.HasField("dim_value") and d.dim_value != s:
                    raise GraphError(f"{what}: shapes= gives {s} for dimension {k}; the model "
                                     f"fixes it to {d.dim_value}")
        return shp
    if not tt.HasField("shape"):
        raise GraphError(f"{what}: the model gives no shape; pass shapes={{'{vi.name}': "
                         "(...)}} (looptune compiles static shapes)")
    out = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value <= 0:
            raise GraphError(f"{what}: dimension {k} has size {d.dim_value}; looptune graphs "
                             "take non-empty tensors")
        if not d.HasField("dim_value"):
            sym = d.dim_param or "?"
            dims = [x.dim_value if x.HasField("dim_value") else (x.dim_param or "?")
                    for x in tt.shape.dim]
            raise GraphError(f"{what} has a symbolic dimension '{sym}' (dimension {k} of "
                             f"{dims}); pass shapes={{'{vi.name}': (...)}} with static sizes "
                             "(looptune compiles static shapes)")
        out.append(int(d.dim_value))
    return tuple(out)


def _user_shape(shape, what: str) -> tuple[int, ...]:
    try:
        shp = tuple(int(s) for s in shape)
        ok = all(int(s) == s and not isinstance(s, bool) for s in shape)
    except (TypeError, ValueError):
        ok = False
    if not ok or any(s <= 0 for s in shp):
        raise GraphError(f"{what}: shapes= must give a tuple of positive ints; got {shape!r}")
    return shp


def _tensor_type(vi, what: str):
    if vi.type.WhichOneof("value") != "tensor_type":
        kind = vi.type.WhichOneof("value") or "no type"
        raise GraphError(f"{what} is of type {kind.replace('_type', '')}, not a tensor; "
                         "looptune graphs take tensors only")
    return vi.type.tensor_type


def _inputs(gp, const_names: set[str], shapes: dict) -> list[tuple[str, TensorType]]:
    names = [vi.name for vi in gp.input if vi.name not in const_names]
    unknown = sorted(set(shapes) - {vi.name for vi in gp.input})
    if unknown:
        raise GraphError(f"from_onnx: shapes= names {', '.join(unknown)}, which the model does "
                         f"not take; its inputs are {', '.join(names) or 'none'}")
    out = []
    for vi in gp.input:
        if vi.name in const_names:
            continue
        what = f"input '{vi.name}'"
        tt = _tensor_type(vi, what)
        d = dtype_of(tt.elem_type, what)
        out.append((vi.name, TensorType(_static_shape(vi, what, shapes.get(vi.name)), d)))
    return out


def _bound_inputs(gp, inits: dict, constants: dict) -> dict[str, np.ndarray]:
    """Graph inputs the caller fixes as constants, checked against their declared type."""
    decl = {vi.name: vi for vi in gp.input if vi.name not in inits}
    out = {}
    for k, v in constants.items():
        if k not in decl:
            raise GraphError(f"from_onnx: constants= names '{k}', which is not an input of the "
                             f"model; its inputs are {', '.join(decl) or 'none'}")
        what = f"input '{k}'"
        d = dtype_of(_tensor_type(decl[k], what).elem_type, what)
        arr = np.asarray(v)
        if arr.dtype.name != d:
            raise GraphError(f"{what}: constants= gives dtype {arr.dtype}; the model declares "
                             f"{d}")
        out[k] = arr
    return out


# ---- nodes -------------------------------------------------------------------------------------


def attr_value(onnx, a, what: str) -> Any:
    """An AttributeProto as a Python value: ints, floats, strings, lists, numpy arrays."""
    AP = onnx.AttributeProto
    if a.type in (AP.TENSOR, AP.TENSORS):
        ts = [a.t] if a.type == AP.TENSOR else list(a.tensors)
        arrs = [_tensor(onnx, t, f"{what}, attribute '{a.name}'") for t in ts]
        return arrs[0] if a.type == AP.TENSOR else arrs
    if a.type in (AP.GRAPH, AP.GRAPHS, AP.SPARSE_TENSOR, AP.SPARSE_TENSORS, AP.TYPE_PROTO,
                  AP.TYPE_PROTOS):
        kind = AP.AttributeType.Name(a.type).lower()
        raise GraphError(f"{what}: attribute '{a.name}' is a {kind}, which looptune does not "
                         "import")
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, list):
        return [x.decode("utf-8") if isinstance(x, bytes) else x for x in v]
    return v


def _constant_value(onnx, node, what: str) -> np.ndarray:
    """The value a Constant node defines, from whichever value attribute it has."""
    if len(node.attribute) != 1:
        raise GraphError(f"{what}: a Constant needs exactly one value attribute; got "
                         f"{[a.name for a in node.attribute]}")
    a = node.attribute[0]
    if a.name in ("value_string", "value_strings"):
        raise GraphError(f"{what}: string constants are not supported by looptune")
    if a.name == "sparse_value":
        raise GraphError(f"{what}: sparse constants are not supported by looptune")
    v = attr_value(onnx, a, what)
    kinds = {"value": None, "value_float": "float32", "value_floats": "float32",
             "value_int": "int64", "value_ints": "int64"}
    if a.name not in kinds:
        raise GraphError(f"{what}: unknown Constant attribute '{a.name}'")
    return np.asarray(v, dtype=kinds[a.name])


def _node_name(node, k: int, seen: set[str]) -> str:
    base = re.sub(r"[\s\"'\\]", "_", node.name) or f"{node.op_type.lower()}_{k}"
    name, i = base, 1
    while name in seen:
        i += 1
        name = f"{base}_{i}"
    seen.add(name)
    return name


def _nodes(onnx, gp) -> tuple[list[Node], dict[str, np.ndarray]]:
    """The model's nodes as looptune Nodes; Constant nodes become constants instead."""
    nodes, folded, seen = [], {}, set()
    for k, n in enumerate(gp.node):
        name = _node_name(n, k, seen)
        what = f"node '{name}' ({n.op_type})"
        if n.op_type == "Constant":
            folded[n.output[0]] = _constant_value(onnx, n, what)
            continue
        attrs = {a.name: attr_value(onnx, a, what) for a in n.attribute}
        if n.op_type in ("Cast", "CastLike") and "to" in attrs:
            dtype_of(attrs["to"], f"{what}: to")
        nodes.append(Node.make(n.op_type, list(n.input), list(n.output), attrs, name))
    return nodes, folded


def _toposort(nodes: list[Node]) -> list[Node]:
    """Nodes in an order where each value is defined before use: the model's own order when
    it is one (ONNX asks producers to write them so), else the nearest such order (Kahn's
    algorithm taking the earliest ready node first)."""
    producer = {o: k for k, n in enumerate(nodes) for o in n.outputs if o}
    deps = [{producer[i] for i in n.inputs if i in producer} for n in nodes]
    users: list[list[int]] = [[] for _ in nodes]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    waiting = [len(ds) for ds in deps]
    ready = [k for k, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        k = heapq.heappop(ready)
        out.append(k)
        for u in users[k]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    rest = [k for k in range(len(nodes)) if k not in set(out)]     # a cycle: _build names it
    return [nodes[k] for k in out + rest]


def _check_outputs(gp, g: Graph) -> None:
    """The model's declared output types against what looptune infers (static dims only)."""
    for vi in gp.output:
        if vi.type.WhichOneof("value") is None:
            continue                      # an untyped output (run_node makes those)
        tt = _tensor_type(vi, f"output '{vi.name}'")
        got = g.types[vi.name]
        if tt.elem_type and dtype_of(tt.elem_type, f"output '{vi.name}'") != got.dtype:
            raise GraphError(f"output '{vi.name}': the model declares dtype "
                             f"{_DTYPES[tt.elem_type]}; looptune infers {got}")
        if not tt.HasField("shape"):
            continue
        dims = tt.shape.dim
        bad = len(dims) != len(got.shape) or any(
            d.HasField("dim_value") and d.dim_value != s for d, s in zip(dims, got.shape))
        if bad:
            decl = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                    for d in dims]
            raise GraphError(f"output '{vi.name}': the model declares shape {decl}; looptune "
                             f"infers {got}")
