"""The operator registry: every operator defined once.

An :class:`OpDef` holds an operator's ONNX name, its attribute defaults, its shape/dtype
inference, its numpy reference, its computation in looptune tensor expressions, and its op
pattern (how it fuses, after TVM's ``OpPatternKind``). The Python builder, the ONNX importer,
the reference run, the passes, fusion and the compiler all read this one table.

```python
@register("Relu", pattern=OpPattern.ELEMWISE)
def relu(): ...      # see graph/ops/elementwise.py for the shape of a definition
```
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GraphError

if TYPE_CHECKING:
    from ..lang.tensor import Tensor
    from .ir import Graph, Node, TensorType


class OpPattern(enum.IntEnum):
    """How an operator fuses (TVM's classes; the order matters: fusion compares them)."""

    ELEMWISE = 0              # out[i] = f(in[i]), same shape
    BROADCAST = 1             # out[i] = f(in[proj(i)]), inputs broadcast to the output
    INJECTIVE = 2             # each output element reads a computed index of an input
    COMM_REDUCE = 3           # commutative reduction (sum, max, mean over axes)
    OUT_ELEMWISE_FUSABLE = 4  # complex op (conv, matmul) that takes an elementwise epilogue
    TUPLE = 7                 # produces several outputs (Split)
    OPAQUE = 8                # fuses with nothing


class Missing:
    """Marks a required attribute in an OpDef's defaults."""

    def __repr__(self):
        return "REQUIRED"


REQUIRED = Missing()


@dataclass
class OpCall:
    """What an operator's functions see of one node: its attributes (defaults filled in), the
    types of its inputs, the values of its constant inputs, and how to raise an error that
    names the node."""

    node: Node
    attrs: dict[str, Any]
    in_types: list[TensorType | None]       # None for an omitted optional input
    consts: list[np.ndarray | None]         # the value of each constant input, else None
    out_types: list[TensorType] = field(default_factory=list)   # filled after inference
    graph: Graph | None = field(default=None, repr=False)      # where the inputs come from

    def error(self, msg: str) -> GraphError:
        """A GraphError naming the node and its op: raise ctx.error("what is wrong; do x")."""
        return GraphError(f"{self.node.label}: {msg}")

    def const(self, k: int, what: str) -> np.ndarray:
        """The value of input ``k``, which this operator needs at compile time (a shape, axes,
        pads...); a GraphError naming the input value, what it is for (``what``) and where it
        comes from when it is computed at run time."""
        if k >= len(self.consts) or self.consts[k] is None:
            raise self.error(self.not_constant(k, what))
        return self.consts[k]

    def not_constant(self, k: int, what: str) -> str:
        """Why input ``k`` (``what``: its role) cannot be used: it is not a constant."""
        value = self.node.inputs[k] if k < len(self.node.inputs) else ""
        if not value:
            return f"input {k} ({what}) is required here; give it as a constant"
        prod = self.graph.producer(value) if self.graph is not None else None
        if prod is not None:
            where = (f"; it is computed at run time by {prod.label}; the compiler needs it "
                     "folded to a constant (lt.graph.optimize folds nodes whose inputs are "
                     "all constants)")
        elif self.graph is not None and value in self.graph.inputs:
            where = ("; it is a graph input, given at run time; make it a constant (g.const, "
                     "or an ONNX initializer)")
        else:
            where = "; make it a constant (g.const, or an ONNX initializer)"
        return (f"input {k} ({what}, value '{value}') must be a constant known at compile "
                f"time (an initializer or a Constant node){where}")

    def has_input(self, k: int) -> bool:
        return k < len(self.in_types) and self.in_types[k] is not None

    @property
    def name(self) -> str:
        """A name for the tensors this node computes (a C identifier once sanitized)."""
        return self.node.name or self.node.outputs[0]


InferFn = Callable[[OpCall], "list[TensorType]"]
ReferenceFn = Callable[[OpCall, "list[np.ndarray | None]"], "list[np.ndarray]"]
ComputeFn = Callable[[OpCall, "list[Tensor | None]"], "list[Tensor]"]


@dataclass(frozen=True)
class OpDef:
    """One operator. ``compute`` gets one looptune tensor per input (None for an omitted input
    or one listed in ``const_inputs``, which it reads with ``ctx.const(k, ...)``) and returns
    the output tensors; None means the operator only runs on the reference path."""

    name: str
    pattern: OpPattern | Callable[[OpCall], OpPattern]
    infer: InferFn
    reference: ReferenceFn
    compute: ComputeFn | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    inputs: tuple[int, int] = (1, 1)            # min and max number of inputs
    outputs: int | Callable[[dict, int], int] = 1
    const_inputs: tuple[int, ...] = ()           # inputs needed at compile time
    doc: str = ""

    def num_outputs(self, attrs: dict, n_inputs: int) -> int:
        return self.outputs(attrs, n_inputs) if callable(self.outputs) else self.outputs

    def pattern_of(self, ctx: OpCall) -> OpPattern:
        return self.pattern(ctx) if callable(self.pattern) else self.pattern


_OPS: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    """Add an operator to the table (one definition per name)."""
    assert opdef.name not in _OPS, f"operator {opdef.name} is defined twice"
    _OPS[opdef.name] = opdef
    return opdef


def _load_library() -> None:
    from . import ops  # noqa: F401 - importing the package registers every operator


def get_op(op_type: str, where: str = "") -> OpDef:
    """The definition of ``op_type``; a GraphError listing what exists when there is none."""
    _load_library()
    if op_type not in _OPS:
        raise GraphError(f"{where + ': ' if where else ''}unknown operator {op_type!r}; "
                         f"supported: {', '.join(sorted(_OPS))}")
    return _OPS[op_type]


def supported_ops() -> list[str]:
    """The names of every operator in the table, sorted."""
    _load_library()
    return sorted(_OPS)


def call_of(graph: Graph, node: Node) -> OpCall:
    """The OpCall of ``node`` in ``graph`` (attributes checked and defaulted)."""
    opdef = get_op(node.op_type, where=node.label)
    n = len(node.inputs)
    lo, hi = opdef.inputs
    if not lo <= n <= hi:
        want = f"{lo}" if lo == hi else f"{lo} to {hi}"
        raise GraphError(f"{node.label}: takes {want} inputs; got {n}")
    attrs = dict(opdef.attrs)
    for k, v in node.attrs:
        if k not in opdef.attrs:
            known = ", ".join(sorted(opdef.attrs)) or "none"
            raise GraphError(f"{node.label}: unknown attribute {k!r} (attributes: {known})")
        attrs[k] = v
    missing = [k for k, v in attrs.items() if isinstance(v, Missing)]
    if missing:
        raise GraphError(f"{node.label}: missing required attribute(s) {', '.join(missing)}")
    in_types = [graph.types[i] if i else None for i in node.inputs]
    consts = [graph.consts.get(i) if i else None for i in node.inputs]
    ctx = OpCall(node, attrs, in_types, consts, graph=graph)
    if node.outputs and all(o in graph.types for o in node.outputs if o):
        ctx.out_types = [graph.types[o] for o in node.outputs if o]
    return ctx


def infer_node(graph: Graph, node: Node) -> list[TensorType]:
    """Check ``node`` against its definition and infer its output types."""
    ctx = call_of(graph, node)
    for k, i in enumerate(node.inputs):
        if i and i not in graph.types:
            raise GraphError(f"{node.label}: input {k} '{i}' is not a value of the graph")
    opdef = get_op(node.op_type)
    # the operator's inference reads its compile-time inputs with ctx.const(k, role), whose
    # error names the role; one it does not read is refused after it, by its ONNX name
    missing = [k for k in opdef.const_inputs if ctx.has_input(k) and ctx.consts[k] is None]
    try:
        types = opdef.infer(ctx)
    except GraphError:
        raise
    except Exception as e:       # an inference function must only raise GraphError
        if missing:
            raise _not_constant(ctx, missing[0]) from None
        raise GraphError(f"{node.label}: shape inference failed: {type(e).__name__}: {e}") \
            from e
    if missing:
        raise _not_constant(ctx, missing[0])
    want = len(node.outputs)
    if len(types) < want:
        raise GraphError(f"{node.label}: has {want} outputs; {node.op_type} gives {len(types)}")
    return list(types[:len(node.outputs)])


def _not_constant(ctx: OpCall, k: int) -> GraphError:
    return ctx.error(ctx.not_constant(k, input_role(ctx.node.op_type, k)))


def input_role(op_type: str, k: int) -> str:
    """What input ``k`` of ``op_type`` is for: its name in the ONNX operator schema (``pads``
    for input 1 of Pad) where onnx is installed and defines the operator, else ``input k of
    <op>``."""
    try:
        from onnx import defs
        inputs = defs.get_schema(op_type).inputs
    except Exception:            # noqa: BLE001 - onnx missing, or no schema: a plain role
        return f"input {k} of {op_type}"
    if not inputs:
        return f"input {k} of {op_type}"
    return f"{op_type}'s '{inputs[min(k, len(inputs) - 1)].name}'"
