"""Algebraic simplification: the seeds' rewrite rules as a table of small functions.

Each rule looks at one node (its inputs already rewritten) and the producers of its inputs,
and returns the value that now stands for the node's output, or None when it does not match
(adding nothing then). Each is commented ``# before -> after``; :data:`RULES` lists them in the
order they are tried; :func:`simplify` applies them until none matches (see ``base.rewrite``).
A rule that would only move work (sink a Transpose, merge two Muls) requires the value it
absorbs to have no other reader, so the graph never grows. Every rule keeps the value exact up
to float rounding (no rule depends on fast-math identities such as x*0 = 0).
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node
from .base import Builder, PassStats, has_ops, rewrite

# ---- helpers -----------------------------------------------------------------------------------


def _to(b: Builder, n: Node, x: str) -> str | None:
    """Replace ``n`` by the existing value ``x`` when it has the same type (and may)."""
    return b.forward(n, x) if b.type(x) == b.out_type(n) else None


def _perm(b: Builder, t: Node) -> tuple[int, ...]:
    """A Transpose's perm (ONNX's default: reverse the axes)."""
    p = t.attr("perm")
    return tuple(p) if p is not None else tuple(reversed(range(len(b.shape(t.inputs[0])))))


def _single_use_producer(b: Builder, v: str, op_type: str) -> Node | None:
    return b.producer_of(v, op_type) if b.uses(v) == 1 else None


def _attr_or_input(b: Builder, n: Node, attr: str, k: int) -> tuple | None:
    """An attribute that later opsets moved to input ``k`` (pads, axes): from either form;
    None when absent or computed at run time."""
    v = n.attr(attr)
    if v is not None:
        return tuple(v)
    if len(n.inputs) > k and n.inputs[k]:
        c = b.const(n.inputs[k])
        return None if c is None else tuple(int(x) for x in c.reshape(-1))
    return None


def _const_operand(b: Builder, n: Node) -> tuple[str, np.ndarray] | None:
    """(x, c) for a binary node with exactly one constant input c (either side)."""
    if len(n.inputs) != 2:
        return None
    c0, c1 = b.const(n.inputs[0]), b.const(n.inputs[1])
    if (c0 is None) == (c1 is None):
        return None
    return (n.inputs[1], c0) if c0 is not None else (n.inputs[0], c1)


def _fold(fn, a: np.ndarray, c: np.ndarray, dtype: str) -> np.ndarray:
    return np.asarray(fn(a, c), dtype=dtype)

# ---- removals ----------------------------------------------------------------------------------


def _identity(b: Builder, n: Node) -> str | None:
    # Identity(x) -> x
    return _to(b, n, n.inputs[0]) if n.op_type == "Identity" else None


def _dropout(b: Builder, n: Node) -> str | None:
    # Dropout(x) -> x   (inference: training_mode absent or a constant false; mask unread)
    if n.op_type != "Dropout":
        return None
    if len(n.inputs) > 2 and n.inputs[2]:
        mode = b.const(n.inputs[2])
        if mode is None or bool(mode.reshape(-1)[0]):
            return None
    if len(n.outputs) > 1 and n.outputs[1] and b.uses(n.outputs[1]) > 0:
        return None
    return _to(b, n, n.inputs[0])


def _pad_zero(b: Builder, n: Node) -> str | None:
    # Pad(x, pads=[0, ..., 0]) -> x
    if n.op_type != "Pad":
        return None
    pads = _attr_or_input(b, n, "pads", 1)
    return None if pads is None or any(pads) else _to(b, n, n.inputs[0])


_VARIADIC = ("Sum", "Max", "Min", "Mean", "Concat")


def _single_input(b: Builder, n: Node) -> str | None:
    # Sum(x) -> x, Concat(x) -> x (and Max, Min, Mean of one input)
    if n.op_type in _VARIADIC and len(n.inputs) == 1:
        return _to(b, n, n.inputs[0])
    return None


_SAME_TYPE_NOOPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Cast", "Tile")


def _type_noop(b: Builder, n: Node) -> str | None:
    # Reshape/Flatten/Squeeze/Unsqueeze/Expand/Cast/Tile(x) -> x   (output type == x's type)
    return _to(b, n, n.inputs[0]) if n.op_type in _SAME_TYPE_NOOPS else None


_RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def _reshape_reshape(b: Builder, n: Node) -> str | None:
    # Reshape(Reshape|Flatten|Squeeze|Unsqueeze(x), s) -> Reshape(x, s)
    if n.op_type != "Reshape":
        return None
    p = b.producer(n.inputs[0])
    if p is None or p.op_type not in _RESHAPES:
        return None
    shape = b.add_const(np.array(b.out_type(n).shape, np.int64), base="shape")
    return b.add("Reshape", [p.inputs[0], shape], out=n.outputs[0])

# ---- transposes --------------------------------------------------------------------------------


def _transpose_identity(b: Builder, n: Node) -> str | None:
    # Transpose(x, perm=[0, 1, ..., r-1]) -> x
    if n.op_type == "Transpose" and _perm(b, n) == tuple(range(len(b.shape(n.inputs[0])))):
        return _to(b, n, n.inputs[0])
    return None


def _transpose_transpose(b: Builder, n: Node) -> str | None:
    # Transpose(Transpose(x, p), q) -> x if p[q[i]] == i for all i, else Transpose(x, p[q])
    t = b.producer_of(n.inputs[0], "Transpose") if n.op_type == "Transpose" else None
    if t is None:
        return None
    p, q = _perm(b, t), _perm(b, n)
    perm = tuple(p[i] for i in q)
    if perm == tuple(range(len(perm))):
        return _to(b, n, t.inputs[0])
    return b.add("Transpose", [t.inputs[0]], {"perm": perm}, out=n.outputs[0])


#: Elementwise ops of one tensor whatever its layout (extra inputs, as Clip's, are scalars).
ELEMENTWISE_UNARY = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Erf", "Neg", "Abs",
    "Reciprocal", "Gelu", "Elu", "Selu", "Softplus", "Softsign", "HardSigmoid", "HardSwish",
    "Clip", "Cast", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Not", "Identity"})


def _sink_transpose_unary(b: Builder, n: Node) -> str | None:
    # U(Transpose(x, p)) -> Transpose(U(x), p)   (U elementwise; Clip's min/max are scalars)
    if n.op_type not in ELEMENTWISE_UNARY or any(b.shape(i) != () for i in n.inputs[1:] if i):
        return None
    t = _single_use_producer(b, n.inputs[0], "Transpose")
    if t is None:
        return None
    u = b.add(n.op_type, [t.inputs[0], *n.inputs[1:]], n.attributes, base=n.outputs[0])
    return b.add("Transpose", [u], {"perm": _perm(b, t)}, out=n.outputs[0])


#: Elementwise ops of two tensors with numpy broadcasting.
ELEMENTWISE_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min")


def _sink_transpose_binary_const(b: Builder, n: Node) -> str | None:
    # B(Transpose(x, p), c) -> Transpose(B(x, c'), p), c' = c transposed back (c constant)
    if n.op_type not in ELEMENTWISE_BINARY or len(n.inputs) != 2:
        return None
    for k in (0, 1):
        t = _single_use_producer(b, n.inputs[k], "Transpose")
        c = b.const(n.inputs[1 - k])
        if t is None or c is None or b.out_type(n).shape != b.shape(n.inputs[k]):
            continue
        p = _perm(b, t)
        if c.ndim:
            c = np.transpose(c.reshape((1,) * (len(p) - c.ndim) + c.shape), np.argsort(p))
        ins = [t.inputs[0], b.add_const(c, base=n.inputs[1 - k])]
        u = b.add(n.op_type, ins if k == 0 else ins[::-1], n.attributes, base=n.outputs[0])
        return b.add("Transpose", [u], {"perm": p}, out=n.outputs[0])
    return None


def _sink_transpose_binary_pair(b: Builder, n: Node) -> str | None:
    # B(Transpose(x, p), Transpose(y, p)) -> Transpose(B(x, y), p)   (x, y of one shape)
    if n.op_type not in ELEMENTWISE_BINARY or len(n.inputs) != 2 or n.inputs[0] == n.inputs[1]:
        return None
    ta, tb = (_single_use_producer(b, i, "Transpose") for i in n.inputs)
    if ta is None or tb is None or _perm(b, ta) != _perm(b, tb):
        return None
    x, y = ta.inputs[0], tb.inputs[0]
    if b.shape(x) != b.shape(y):
        return None
    u = b.add(n.op_type, [x, y], n.attributes, base=n.outputs[0])
    return b.add("Transpose", [u], {"perm": _perm(b, ta)}, out=n.outputs[0])

# ---- GEMM, MatMul, ReduceMean -------------------------------------------------------------


def _gemm_transposed(b: Builder, n: Node) -> str | None:
    # Gemm(A, B, transA=1, transB=1) -> Transpose(Gemm(B, A))   (no C, or beta = 0)
    if n.op_type != "Gemm" or not has_ops("Transpose"):
        return None
    a = b.attrs(n)
    if not (a["transA"] and a["transB"]):
        return None
    if len(n.inputs) > 2 and n.inputs[2] and a["beta"] != 0:
        return None
    attrs = {"alpha": a["alpha"]} if a["alpha"] != 1 else {}
    g = b.add("Gemm", [n.inputs[1], n.inputs[0]], attrs, base=n.outputs[0])
    return b.add("Transpose", [g], {"perm": (1, 0)}, out=n.outputs[0])


def _gemm_absorb_transpose(b: Builder, n: Node) -> str | None:
    # Gemm(Transpose(A), B, transA=t) -> Gemm(A, B, transA=1-t)   (likewise B and transB)
    if n.op_type != "Gemm":
        return None
    ins, attrs, hit = list(n.inputs), b.attrs(n), False
    for k, key in ((0, "transA"), (1, "transB")):
        t = b.producer_of(ins[k], "Transpose")
        if t is not None and _perm(b, t) == (1, 0):
            ins[k], attrs[key], hit = t.inputs[0], 1 - attrs[key], True
    if not hit:
        return None
    return b.add("Gemm", ins, attrs, out=n.outputs[0])


def _swap_last2(rank: int) -> tuple[int, ...]:
    return tuple(range(rank - 2)) + (rank - 1, rank - 2)


def _matmul_transposed(b: Builder, n: Node) -> str | None:
    # MatMul(Transpose(A), Transpose(B)) -> Transpose(MatMul(B, A))   (both swap the last 2 axes)
    if n.op_type != "MatMul":
        return None
    ta, tb = (_single_use_producer(b, i, "Transpose") for i in n.inputs)
    if ta is None or tb is None:
        return None
    ra, rb = len(b.shape(ta.inputs[0])), len(b.shape(tb.inputs[0]))
    if ra < 2 or rb < 2 or _perm(b, ta) != _swap_last2(ra) or _perm(b, tb) != _swap_last2(rb):
        return None
    m = b.add("MatMul", [tb.inputs[0], ta.inputs[0]], base=n.outputs[0])
    return b.add("Transpose", [m], {"perm": _swap_last2(len(b.out_type(n).shape))},
                 out=n.outputs[0])


def _reducemean_global_pool(b: Builder, n: Node) -> str | None:
    # ReduceMean(x, axes=[2, 3], keepdims=1) -> GlobalAveragePool(x)      (x N,C,H,W)
    # ReduceMean(x, axes=[2, 3], keepdims=0) -> Flatten(GlobalAveragePool(x))
    if n.op_type != "ReduceMean" or not has_ops("GlobalAveragePool"):
        return None
    r = len(b.shape(n.inputs[0]))
    axes = _attr_or_input(b, n, "axes", 1)
    if r != 4 or axes is None or sorted(a % r for a in axes) != [2, 3]:
        return None
    if b.attrs(n)["keepdims"]:
        return b.add("GlobalAveragePool", [n.inputs[0]], out=n.outputs[0])
    if not has_ops("Flatten"):
        return None
    pooled = b.add("GlobalAveragePool", [n.inputs[0]], base=n.outputs[0])
    return b.add("Flatten", [pooled], {"axis": 1}, out=n.outputs[0])

# ---- Mul / Add by constants --------------------------------------------------------------------


def _sub_const(b: Builder, n: Node) -> str | None:
    # x - c -> x + (-c)
    c = b.const(n.inputs[1]) if n.op_type == "Sub" else None
    if c is None or b.const(n.inputs[0]) is not None or c.dtype == np.bool_:
        return None
    neg = b.add_const(np.negative(c), base=n.inputs[1])
    return b.add("Add", [n.inputs[0], neg], out=n.outputs[0])


def _div_const(b: Builder, n: Node) -> str | None:
    # x / c -> x * (1/c)   (floats; 1/c rounds once, so the result may differ in the last bit)
    c = b.const(n.inputs[1]) if n.op_type == "Div" else None
    if c is None or c.dtype.kind != "f" or b.const(n.inputs[0]) is not None:
        return None
    inv = b.add_const(np.reciprocal(c), base=n.inputs[1])
    return b.add("Mul", [n.inputs[0], inv], out=n.outputs[0])


def _chain(b: Builder, n: Node, outer: str, inner: str):
    """(x, a, c) for outer(inner(x, a), c) with a, c constants, inner read once."""
    oc = _const_operand(b, n) if n.op_type == outer else None
    if oc is None:
        return None
    v, c = oc
    p = _single_use_producer(b, v, inner)
    ic = _const_operand(b, p) if p is not None else None
    return None if ic is None else (ic[0], ic[1], c)


def _merge_chain(b: Builder, n: Node, op: str, fn, base: str) -> str | None:
    """op(op(x, a), c) -> op(x, fn(a, c)) for an associative ``op`` computed by ``fn``."""
    m = _chain(b, n, op, op)
    if m is None:
        return None
    x, a, c = m
    ac = b.add_const(_fold(fn, a, c, b.type(x).dtype), base=base)
    return b.add(op, [x, ac], out=n.outputs[0])


def _mul_mul(b: Builder, n: Node) -> str | None:
    # (x * a) * c -> x * (a*c)
    return _merge_chain(b, n, "Mul", np.multiply, "scale")


def _add_add(b: Builder, n: Node) -> str | None:
    # (x + a) + c -> x + (a+c)
    return _merge_chain(b, n, "Add", np.add, "shift")


def _add_mul(b: Builder, n: Node) -> str | None:
    # (x + a) * c -> x*c + a*c   (so a chain of Mul/Add by constants ends as one Mul, one Add)
    m = _chain(b, n, "Mul", "Add")
    if m is None:
        return None
    x, a, c = m
    d = b.type(x).dtype
    xc = b.add("Mul", [x, b.add_const(np.asarray(c, d), base="scale")], base=n.outputs[0])
    return b.add("Add", [xc, b.add_const(_fold(np.multiply, a, c, d), base="shift")],
                 out=n.outputs[0])


def _neutral(b: Builder, n: Node, op: str, unit: int) -> str | None:
    xc = _const_operand(b, n) if n.op_type == op else None
    if xc is None or not np.all(xc[1] == unit):
        return None
    return _to(b, n, xc[0])


def _mul_one(b: Builder, n: Node) -> str | None:
    # x * 1 -> x   (the 1s do not broadcast x to a larger shape)
    return _neutral(b, n, "Mul", 1)


def _add_zero(b: Builder, n: Node) -> str | None:
    # x + 0 -> x   (the 0s do not broadcast x to a larger shape)
    return _neutral(b, n, "Add", 0)

# ---- layout transforms ------------------------------------------------------------------------


def _layout_noop(b: Builder, n: Node) -> str | None:
    # LayoutTransform(x, A -> A) -> x
    if n.op_type == "LayoutTransform" and n.attr("src_layout") == n.attr("dst_layout"):
        return _to(b, n, n.inputs[0])
    return None


def _layout_layout(b: Builder, n: Node) -> str | None:
    # LayoutTransform(LayoutTransform(x, A -> B), B -> A) -> x;  (..., B -> C) -> (x, A -> C)
    if n.op_type != "LayoutTransform":
        return None
    t = b.producer_of(n.inputs[0], "LayoutTransform")
    if t is None:
        return None
    src, dst = t.attr("src_layout"), n.attr("dst_layout")
    if src == dst:
        return _to(b, n, t.inputs[0])
    return b.add("LayoutTransform", [t.inputs[0]], {"src_layout": src, "dst_layout": dst},
                 out=n.outputs[0])


#: The rules, in the order they are tried on each node.
RULES = [
    _identity, _dropout, _pad_zero, _single_input, _type_noop, _reshape_reshape,
    _transpose_identity, _transpose_transpose, _sink_transpose_unary,
    _sink_transpose_binary_const, _sink_transpose_binary_pair,
    _gemm_absorb_transpose, _gemm_transposed, _matmul_transposed, _reducemean_global_pool,
    _sub_const, _div_const, _mul_one, _add_zero, _mul_mul, _add_add, _add_mul,
    _layout_noop, _layout_layout,
]


def simplify(graph: Graph, stats: PassStats | None = None, rules=None) -> Graph:
    """Apply the algebraic rules (:data:`RULES`, or the ``rules`` given) until none matches.
    Counts each rule's rewrites under its name (``transpose_transpose 2``) and the nodes the
    rewrites left dead.

    Before -> after::

        %t = Transpose(%x; perm=[0, 2, 1]); %r = Relu(%t); %y = Transpose(%r; perm=[0, 2, 1])
        ->  %y = Relu(%x)
    """
    return rewrite(graph, RULES if rules is None else list(rules), stats, "simplify")
