"""The operator graph: typed values, immutable nodes, and the Graph that holds them.

```python
g = lt.graph.Graph("tiny")
x = g.input("x", (1, 3, 32, 32))                 # float32 unless dtype= is given
w = g.const(np.random.rand(8, 3, 3, 3).astype("float32"), name="w")
y = g.op("Relu", g.op("Conv", x, w, pads=[1, 1, 1, 1]))
g.output(y)
print(g)
```

Values are named (as in ONNX): a graph input, a constant (a numpy array held by the graph) or
the output of exactly one node. Every node is a frozen value; each ``g.op`` runs the operator's
shape and dtype inference at once, so a mistake is a :class:`GraphError` naming the node, its
op type and the offending input, raised where the user wrote it. Passes never mutate a graph:
they build a new one with :meth:`Graph.from_parts`, which checks and infers it again.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import GraphError
from ..lang import dtype as dt
from .builder import BuilderMixin


@dataclass(frozen=True, slots=True)
class TensorType:
    """The static type of a value: a shape of positive ints (``()`` for a scalar) and a dtype
    in numpy's spelling."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        assert all(isinstance(s, int) and s >= 0 for s in self.shape), self.shape
        assert self.dtype in dt.SUPPORTED, self.dtype

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(s) for s in self.shape)}]"


def _freeze(v: Any) -> Any:
    """Attribute values as hashable data: lists become tuples, arrays tuples of Python scalars."""
    if isinstance(v, np.ndarray):
        return _freeze(v.tolist())
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    return v


@dataclass(frozen=True, slots=True)
class Node:
    """One operator application. ``inputs`` and ``outputs`` are value names (``""`` stands for
    an omitted optional input, as in ONNX); ``attrs`` is a sorted tuple of (name, value) pairs
    with hashable values, so equal nodes compare and hash equal (CSE relies on it)."""

    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    name: str = ""

    @staticmethod
    def make(op_type: str, inputs, outputs, attrs: dict | None = None, name: str = "") -> Node:
        items = tuple(sorted((str(k), _freeze(v)) for k, v in (attrs or {}).items()))
        return Node(op_type, tuple(inputs), tuple(outputs), items, name)

    @property
    def attributes(self) -> dict[str, Any]:
        return dict(self.attrs)

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def with_(self, **changes) -> Node:
        """A copy with some fields replaced (``attrs`` may be given as a dict)."""
        if isinstance(changes.get("attrs"), dict):
            changes["attrs"] = tuple(sorted((k, _freeze(v)) for k, v in
                                            changes["attrs"].items()))
        for key in ("inputs", "outputs"):
            if key in changes:
                changes[key] = tuple(changes[key])
        fields = {f: getattr(self, f) for f in ("op_type", "inputs", "outputs", "attrs", "name")}
        fields.update(changes)
        return Node(**fields)

    @property
    def label(self) -> str:
        """How error messages name the node: ``node 'conv1' (Conv)``."""
        return f"node '{self.name or self.outputs[0]}' ({self.op_type})"


class Value:
    """A handle on a named value of a graph, as the builder returns it: pass it to ``g.op``
    and ``g.output``. ``.shape``, ``.dtype`` and ``.type`` are its inferred type."""

    __slots__ = ("graph", "name")

    def __init__(self, graph: Graph, name: str):
        self.graph = graph
        self.name = name

    @property
    def type(self) -> TensorType:
        return self.graph.types[self.name]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"Value({self.name}: {self.type})"


_NAME_OK = re.compile(r"^[^\x00]+$")


class Graph(BuilderMixin):
    """A graph of operators over named, typed values. Build it with :meth:`input`,
    :meth:`const`, :meth:`op` (or a shorthand such as :meth:`conv2d`, see graph/builder.py)
    and :meth:`output` (or import one with ``from_onnx``); passes return new graphs."""

    def __init__(self, name: str = "graph"):
        if not isinstance(name, str) or not name or not _NAME_OK.match(name):
            raise GraphError(f"Graph(name={name!r}): the name must be a non-empty string")
        self.name = name
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.consts: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []
        self.types: dict[str, TensorType] = {}
        self._producer: dict[str, Node] = {}
        self._counter = 0

    # ---- building ----------------------------------------------------------------------------

    def _fresh(self, base: str) -> str:
        while True:
            self._counter += 1
            name = f"{base}_{self._counter}"
            if name not in self.types:
                return name

    def _claim(self, name: str, what: str) -> str:
        if not isinstance(name, str) or not name or not _NAME_OK.match(name):
            raise GraphError(f"{what}: a value name must be a non-empty string; got {name!r}")
        if name in self.types:
            raise GraphError(f"{what}: the graph already has a value named '{name}'; give "
                             "each input, constant and node output its own name")
        return name

    def input(self, name: str, shape, dtype: str = "float32") -> Value:
        """A graph input of a static ``shape`` (positive ints) and ``dtype``."""
        self._claim(name, f"input '{name}'")
        shp = _check_shape(shape, f"input '{name}'")
        try:
            d = dt.canonical(dtype)
        except Exception:
            raise GraphError(f"input '{name}': unknown dtype {dtype!r}; use one of "
                             f"{', '.join(dt.SUPPORTED)}") from None
        self.types[name] = TensorType(shp, d)
        self.inputs.append(name)
        return Value(self, name)

    def const(self, value, name: str | None = None, dtype: str | None = None) -> Value:
        """A constant (a weight): the array is copied and held by the graph."""
        arr = np.array(value, dtype=dtype) if dtype is not None else np.array(value)
        if arr.dtype == np.float64 and dtype is None and not isinstance(value, np.ndarray):
            arr = arr.astype(np.float32)          # Python floats: the graph's default dtype
        if arr.dtype.name not in dt.SUPPORTED:
            raise GraphError(f"const '{name or '?'}': dtype {arr.dtype} is not supported; use "
                             f"one of {', '.join(dt.SUPPORTED)}")
        name = self._claim(name, f"const '{name}'") if name is not None else self._fresh("const")
        arr = np.array(arr, order="C", copy=True)      # ascontiguousarray makes 0-d 1-d
        arr.setflags(write=False)
        self.consts[name] = arr
        self.types[name] = TensorType(tuple(int(s) for s in arr.shape), arr.dtype.name)
        return Value(self, name)

    def op(self, op_type: str, *inputs, name: str | None = None, outputs: int | None = None,
           **attrs):
        """Apply operator ``op_type`` (ONNX's name and attributes) to ``inputs`` (Values,
        value names, ``None`` for an omitted optional input, or numpy arrays/Python numbers,
        which become constants). Returns a Value, or a tuple of Values when the operator has
        several outputs (``outputs=n`` asks for n where the count is variable, as Split)."""
        from .registry import get_op
        opdef = get_op(op_type, where=f"g.op('{op_type}')")
        names = [self._input_name(x, op_type, k) for k, x in enumerate(inputs)]
        n_out = opdef.num_outputs(attrs, len(names)) if outputs is None else outputs
        base = (name or op_type.lower())
        outs = [self._claim(name, f"g.op('{op_type}', name={name!r})") if (name and n_out == 1)
                else self._fresh(base) for _ in range(n_out)]
        node = Node.make(op_type, names, outs, attrs, name or outs[0])
        self._add_node(node)
        vals = tuple(Value(self, o) for o in outs)
        return vals[0] if len(vals) == 1 else vals

    def _input_name(self, x, op_type: str, k: int) -> str:
        if x is None:
            return ""
        if isinstance(x, Value):
            if x.graph is not self:
                raise GraphError(f"g.op('{op_type}'): input {k} ('{x.name}') belongs to another "
                                 "graph; build every value of a graph with that graph's methods")
            return x.name
        if isinstance(x, str):
            if x not in self.types:
                raise GraphError(f"g.op('{op_type}'): input {k} names '{x}', which is not a "
                                 "value of this graph")
            return x
        if isinstance(x, (np.ndarray, np.generic, int, float, bool, list, tuple)):
            return self.const(x).name
        raise GraphError(f"g.op('{op_type}'): input {k} is a {type(x).__name__}; pass a Value "
                         "from g.input/g.const/g.op, a value name or a numpy array")

    def _add_node(self, node: Node) -> None:
        from .registry import infer_node
        for o in node.outputs:
            if o in self.types:
                raise GraphError(f"{node.label}: output '{o}' is already a value of the graph")
        out_types = infer_node(self, node)
        self.nodes.append(node)
        for o, t in zip(node.outputs, out_types):
            if o:
                self.types[o] = t
                self._producer[o] = node

    def output(self, *values) -> None:
        """Mark values as graph outputs, in order (call once with all, or once per output)."""
        for v in values:
            name = v.name if isinstance(v, Value) else v
            if not isinstance(name, str) or name not in self.types:
                raise GraphError(f"g.output: {v!r} is not a value of graph '{self.name}'")
            self.outputs.append(name)

    # ---- reading -------------------------------------------------------------------------------

    def producer(self, value: str) -> Node | None:
        """The node computing ``value`` (None for inputs and constants)."""
        return self._producer.get(value)

    def consumers(self, value: str) -> list[Node]:
        """The nodes reading ``value``, in graph order (a node reading it twice counts once)."""
        return [n for n in self.nodes if value in n.inputs]

    def is_const(self, value: str) -> bool:
        return value in self.consts

    def value(self, name: str) -> Value:
        if name not in self.types:
            raise GraphError(f"graph '{self.name}' has no value named '{name}'")
        return Value(self, name)

    def __str__(self) -> str:
        from .printer import graph_str
        return graph_str(self)

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, "
                f"{len(self.consts)} constants, {len(self.outputs)} outputs)")

    def to_dot(self) -> str:
        """The graph in Graphviz DOT (render with ``dot -Tpng``)."""
        from .printer import graph_dot
        return graph_dot(self)

    def run_reference(self, inputs=None, **named) -> list[np.ndarray]:
        """Run the graph node by node on numpy: the oracle every compiled model is checked
        against. Inputs positional (a list in :attr:`inputs` order) or a dict / keywords by
        name. Returns the outputs as a list."""
        from .reference import run_reference
        return run_reference(self, inputs, **named)

    # ---- rebuilding (for passes) -----------------------------------------------------------

    @staticmethod
    def from_parts(name: str, inputs: list[tuple[str, TensorType]], consts: dict[str, np.ndarray],
                   nodes, outputs: list[str]) -> Graph:
        """A new graph from its parts: nodes must be in an order where each input is defined
        before use (the order passes keep); types are inferred again and checked."""
        g = Graph(name)
        for n, t in inputs:
            g.input(n, t.shape, t.dtype)
        for n, arr in consts.items():
            g.const(arr, name=n)
        for node in nodes:
            for i in node.inputs:
                if i and i not in g.types:
                    raise GraphError(f"{node.label}: input '{i}' is not defined before this node "
                                     "(a pass produced a graph out of order, or the value "
                                     "does not exist)")
            g._add_node(node)
        g.output(*outputs)
        g._counter = 0
        return g

    def input_types(self) -> list[tuple[str, TensorType]]:
        return [(n, self.types[n]) for n in self.inputs]

    def replace(self, *, nodes=None, consts=None, outputs=None, name=None) -> Graph:
        """A new graph with some parts replaced (consts not read by any node or output are
        dropped; a pass need not track them)."""
        nodes = list(self.nodes if nodes is None else nodes)
        consts = dict(self.consts if consts is None else consts)
        outputs = list(self.outputs if outputs is None else outputs)
        used = {i for n in nodes for i in n.inputs} | set(outputs)
        consts = {k: v for k, v in consts.items() if k in used}
        return Graph.from_parts(name or self.name, self.input_types(), consts, nodes, outputs)


def _check_shape(shape, what: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        out = tuple(int(s) for s in shape)
        ok = all(not isinstance(s, bool) and int(s) == s for s in shape)
    except (TypeError, ValueError):
        ok = False
    if not ok or any(s <= 0 for s in out):
        raise GraphError(f"{what}: shape must be a tuple of positive ints; got {shape!r}")
    return out
