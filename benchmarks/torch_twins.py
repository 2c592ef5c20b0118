"""torch.nn.Module twins of benchmarks/models.py's four ONNX models, built from their weights.

    module = build("transformer", onnx.load("transformer.onnx"))   # eval mode, no grad

Each twin takes its weights from the ONNX model's initializers (the Constant nodes for the
head split and the decomposed layer norm's epsilon, the attributes for paddings, strides and
epsilons) and runs the same ops in the same order, one torch op per ONNX node where torch has
one (the ONNX graphs are written as torch exports them):

- ``cnn``: (Conv2d-BatchNorm2d-ReLU-MaxPool2d) x n, global average pool, flatten, Linear,
  softmax;
- ``resnet_stage``: Conv2d-BatchNorm2d-ReLU, Conv2d-BatchNorm2d, the residual add, ReLU;
- ``mlp``: Linear-ReLU-Linear (Gemm with transB=1 is torch.nn.Linear);
- ``transformer``: graph/zoo.py's post-norm encoder layer: q/k/v projections (MatMul+Add),
  heads by reshape/transpose, scores / sqrt(head_dim), softmax, the output projection, a
  residual add, LayerNorm, a feed-forward with GELU written in its erf form
  (x * (1 + erf(x / sqrt 2)) * 0.5), a residual add and the second layer norm decomposed
  (mean, sub, pow, mean, add eps, sqrt, div, mul, add) as the ONNX graph has it.

:func:`build` first checks that the ONNX graph's op sequence (Constant nodes aside) is the one
the twin mirrors, and raises :class:`TwinError` naming the first op that differs otherwise.
"""
from __future__ import annotations

import numpy as np
import torch
from onnx import helper, numpy_helper
from torch import nn


class TwinError(ValueError):
    """The ONNX model is not the one a torch twin mirrors."""


class _Graph:
    """An ONNX model's nodes (Constant nodes aside), initializers and constants, by name."""

    def __init__(self, name: str, proto):
        self.name = name
        g = proto.graph
        self.values = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        for n in g.node:
            if n.op_type == "Constant":
                self.values[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        self.nodes = [n for n in g.node if n.op_type != "Constant"]

    def expect(self, ops) -> None:
        got = [n.op_type for n in self.nodes]
        if got == list(ops):
            return
        k = next((i for i, (a, b) in enumerate(zip(got, ops)) if a != b), min(len(got), len(ops)))
        have = f"{got[k]} ({self.nodes[k].name or 'unnamed'})" if k < len(got) else "the end"
        want = ops[k] if k < len(ops) else "the end"
        raise TwinError(f"torch twin of {self.name}: the ONNX graph's op {k} (Constant nodes "
                        f"aside) is {have}, the twin expects {want}; this twin mirrors only "
                        f"the {self.name} model of benchmarks/models.py")

    def of(self, op: str) -> list:
        return [n for n in self.nodes if n.op_type == op]

    def tensor(self, node, i: int) -> torch.Tensor:
        """Input ``i`` of ``node``, an initializer or a Constant, as a torch tensor."""
        name = node.input[i]
        if name not in self.values:
            raise TwinError(f"torch twin of {self.name}: input {i} ({name!r}) of "
                            f"{node.op_type} {node.name!r} is computed, not a weight; "
                            "the twin needs it as an initializer or a Constant")
        return torch.from_numpy(np.array(self.values[name]))

    def attr(self, node, key: str, default=None):
        for a in node.attribute:
            if a.name == key:
                return helper.get_attribute_value(a)
        return default


def _load(module: nn.Module, **tensors: torch.Tensor) -> nn.Module:
    """Copy the tensors into the module's parameters/buffers of the same names."""
    state = {k: v.reshape(module.state_dict()[k].shape) for k, v in tensors.items()}
    module.load_state_dict(state, strict=False)
    return module


def _conv(g: _Graph, node) -> nn.Conv2d:
    w = g.tensor(node, 1)
    pads = list(g.attr(node, "pads", [0, 0, 0, 0]))
    if pads[:2] != pads[2:] or g.attr(node, "group", 1) != 1 or g.attr(node, "dilations"):
        raise TwinError(f"torch twin of {g.name}: Conv {node.name!r} has asymmetric pads "
                        f"{pads}, groups or dilations; the twin builds plain nn.Conv2d only")
    c = nn.Conv2d(w.shape[1], w.shape[0], tuple(w.shape[2:]),
                  stride=tuple(g.attr(node, "strides", [1, 1])), padding=tuple(pads[:2]),
                  bias=len(node.input) > 2)
    return _load(c, weight=w, **({"bias": g.tensor(node, 2)} if len(node.input) > 2 else {}))


def _bn(g: _Graph, node) -> nn.BatchNorm2d:
    scale = g.tensor(node, 1)
    bn = nn.BatchNorm2d(scale.shape[0], eps=g.attr(node, "epsilon", 1e-5))
    return _load(bn, weight=scale, bias=g.tensor(node, 2), running_mean=g.tensor(node, 3),
                 running_var=g.tensor(node, 4))


def _gemm(g: _Graph, node) -> nn.Linear:
    attrs = (g.attr(node, "transA", 0), g.attr(node, "transB", 0), g.attr(node, "alpha", 1.0),
             g.attr(node, "beta", 1.0))
    if attrs != (0, 1, 1.0, 1.0):
        raise TwinError(f"torch twin of {g.name}: Gemm {node.name!r} has (transA, transB, "
                        f"alpha, beta) {attrs}; the twin mirrors nn.Linear's (0, 1, 1.0, 1.0)")
    w = g.tensor(node, 1)
    return _load(nn.Linear(w.shape[1], w.shape[0]), weight=w, bias=g.tensor(node, 2))


def _matmul_add(g: _Graph, matmul, add) -> nn.Linear:
    """MatMul(x, W) + b as nn.Linear (its weight is W transposed, as torch exports it)."""
    w = g.tensor(matmul, 1)
    bias = g.tensor(add, 1)
    return _load(nn.Linear(w.shape[0], w.shape[1]), weight=w.T.contiguous(), bias=bias)


def _pool(g: _Graph, node) -> nn.MaxPool2d:
    if any(g.attr(node, "pads", [0])) or g.attr(node, "ceil_mode", 0):
        raise TwinError(f"torch twin of {g.name}: MaxPool {node.name!r} pads or rounds up; "
                        "the twin builds an unpadded nn.MaxPool2d only")
    return nn.MaxPool2d(tuple(g.attr(node, "kernel_shape")), tuple(g.attr(node, "strides")))


class CNN(nn.Module):
    """(Conv-BN-ReLU-MaxPool) x n, global average pool, flatten, Linear, softmax."""

    def __init__(self, g: _Graph):
        super().__init__()
        n = len(g.of("Conv"))
        g.expect(["Conv", "BatchNormalization", "Relu", "MaxPool"] * max(n, 1)
                 + ["GlobalAveragePool", "Flatten", "Gemm", "Softmax"])
        layers = []
        for conv, bn, pool in zip(g.of("Conv"), g.of("BatchNormalization"), g.of("MaxPool")):
            layers += [_conv(g, conv), _bn(g, bn), nn.ReLU(), _pool(g, pool)]
        self.features = nn.Sequential(*layers)
        self.fc = _gemm(g, g.of("Gemm")[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1)
        return torch.softmax(self.fc(x), dim=-1)


class ResidualBlock(nn.Module):
    """A ResNet basic block: Conv-BN-ReLU, Conv-BN, + x, ReLU."""

    def __init__(self, g: _Graph):
        super().__init__()
        g.expect(["Conv", "BatchNormalization", "Relu", "Conv", "BatchNormalization", "Add",
                  "Relu"])
        (c1, c2), (b1, b2) = g.of("Conv"), g.of("BatchNormalization")
        self.conv1, self.bn1, self.conv2, self.bn2 = _conv(g, c1), _bn(g, b1), _conv(g, c2), \
            _bn(g, b2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(h)) + x)


class MLP(nn.Module):
    """Linear-ReLU-Linear."""

    def __init__(self, g: _Graph):
        super().__init__()
        g.expect(["Gemm", "Relu", "Gemm"])
        self.fc1, self.fc2 = (_gemm(g, n) for n in g.of("Gemm"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


_ENCODER_OPS = ("MatMul", "Add", "MatMul", "Add", "MatMul", "Add", "Reshape", "Transpose",
                "Reshape", "Transpose", "Transpose", "Reshape", "Transpose", "MatMul", "Sqrt",
                "Div", "Softmax", "MatMul", "Transpose", "Reshape", "MatMul", "Add", "Add",
                "LayerNormalization", "MatMul", "Add", "Div", "Erf", "Add", "Mul", "Mul",
                "MatMul", "Add", "Add", "ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt",
                "Div", "Mul", "Add", "Identity")


class EncoderLayer(nn.Module):
    """graph/zoo.py's transformer(): a post-norm encoder layer, op for op."""

    def __init__(self, g: _Graph):
        super().__init__()
        g.expect(_ENCODER_OPS)
        n = g.nodes
        lin = [_matmul_add(g, n[i], n[i + 1]) for i in (0, 2, 4, 20, 24, 31)]
        self.q, self.k, self.v, self.out, self.ffn1, self.ffn2 = lin
        split = g.tensor(n[6], 1).tolist()              # [batch, seq, heads, head_dim]
        self.heads, self.head_dim = int(split[2]), int(split[3])
        self.register_buffer("hd", g.tensor(n[14], 0).reshape(()))   # Sqrt's operand
        ln = n[23]
        self.norm1 = _load(nn.LayerNorm(self.q.out_features, eps=g.attr(ln, "epsilon", 1e-5)),
                           weight=g.tensor(ln, 1), bias=g.tensor(ln, 2))
        self.register_buffer("sqrt2", g.tensor(n[26], 1).reshape(()))
        self.register_buffer("one", g.tensor(n[28], 1).reshape(()))
        self.register_buffer("one_half", g.tensor(n[30], 1).reshape(()))
        self.register_buffer("two", g.tensor(n[36], 1).reshape(()))
        self.register_buffer("eps", g.tensor(n[38], 1).reshape(()))
        self.register_buffer("norm2_weight", g.tensor(n[41], 1))
        self.register_buffer("norm2_bias", g.tensor(n[42], 1))

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        b, s, _ = t.shape
        return t.reshape(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        p = torch.softmax(q @ k.transpose(-2, -1) / torch.sqrt(self.hd), dim=-1)
        o = (p @ v).transpose(1, 2).reshape(b, s, d)
        h = self.norm1(x + self.out(o))
        f = self.ffn1(h)
        f = f * (torch.erf(f / self.sqrt2) + self.one) * self.one_half     # GELU, erf form
        h = h + self.ffn2(f)
        c = h - h.mean(-1, keepdim=True)                                # layer norm, decomposed
        var = torch.pow(c, self.two).mean(-1, keepdim=True)
        return c / torch.sqrt(var + self.eps) * self.norm2_weight + self.norm2_bias


TWINS = {"cnn": CNN, "resnet_stage": ResidualBlock, "mlp": MLP, "transformer": EncoderLayer}


def build(name: str, proto) -> nn.Module:
    """The torch twin of benchmarks/models.py's model ``name`` with the weights of ``proto``
    (an ``onnx.ModelProto``), in eval mode with gradients off."""
    if name not in TWINS:
        raise TwinError(f"no torch twin for model {name!r}; choose from {', '.join(TWINS)}")
    module = TWINS[name](_Graph(name, proto)).eval()
    for p in module.parameters():
        p.requires_grad_(False)
    return module

