"""Small ONNX models built with onnx.helper as exporters write them (weights from a seeded rng):
the test models of the graph level and the models of ``benchmarks/models.py``.

    python -m looptune.graph.zoo cnn -o cnn.onnx [--batch 8 --size 32 --channels 32,64,128]

needs the ``onnx`` extra (``pip install -e ".[onnx]"``).

- ``mlp()``: a feature-major input (64 x batch, as column-major frameworks export it)
  transposed, normalised (Sub/Div by constants), a first layer MatMul(x, Transpose(W)) + Add,
  Relu, inference Dropout, Gemm(transB=1) + Tanh, Identity, MatMul + Add: 64 -> 48 -> 32 -> 10.
- ``cnn()``: (Conv-BatchNormalization-Relu-MaxPool) x 3, GlobalAveragePool, Flatten,
  Gemm(transB=1), Softmax.
- ``residual()``: Conv-BN-Relu, Conv-BN, Add(skip), Relu.
- ``transformer()``: one post-norm encoder layer as torch exports it: MatMul+Add for q/k/v,
  4 heads by Reshape/Transpose (k's ``transpose(-2, -1)`` a second Transpose), scores divided
  by sqrt(head_dim) computed from a Constant (Sqrt of a constant), Softmax, the output
  projection, a residual Add, LayerNormalization, a feed-forward with GELU in its Erf form
  (x * 0.5 * (1 + erf(x / sqrt 2))), a residual Add and a second layer norm decomposed into
  ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add (opset < 17 exports). Reshape shapes come from
  Constant nodes, one repeated as torch does.

Each builder returns an ``onnx.ModelProto`` (checked with onnx.checker and full shape
inference); ``MODELS`` maps names to builders, ``random_inputs(model)`` makes its inputs.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:              # the builders need onnx; the library itself does not
    from ..errors import GraphError
    raise GraphError("looptune.graph.zoo builds ONNX models and needs the onnx package: "
                     'pip install -e ".[onnx]"') from e

OPSET = 17


class _Builder:
    """Nodes, initializers and fresh names for one model."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.k = 0

    def weight(self, name: str, shape, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        arr = (self.rng.standard_normal(shape) * s).astype("float32")
        return self.init(name, arr)

    def init(self, name: str, arr) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(self, op: str, inputs, n_out: int = 1, name: str | None = None, **attrs):
        self.k += 1
        name = name or f"/{op.lower()}_{self.k}/{op}"
        outs = [f"{name}_output_{j}" for j in range(n_out)]     # torch's value names
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, arr, name: str | None = None) -> str:
        """A Constant node (exporters write small tensors so)."""
        t = numpy_helper.from_array(np.asarray(arr))
        return self.node("Constant", [], name=name, value=t)

    def model(self, graph_name: str, inputs, outputs) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, graph_name,
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                               for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                               for n in outputs], initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="looptune-tests")
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        onnx.checker.check_model(m, full_check=True)
        return m

    def conv_bn(self, x: str, cin: int, cout: int, tag: str, relu: bool = True) -> str:
        w = self.weight(f"{tag}.weight", (cout, cin, 3, 3))
        b = self.weight(f"{tag}.bias", (cout,), 0.1)
        y = self.node("Conv", [x, w, b], name=f"/{tag}/Conv", pads=[1, 1, 1, 1],
                      strides=[1, 1], kernel_shape=[3, 3])
        bn = [self.init(f"{tag}.bn.{k}", v)
              for k, v in zip(("scale", "bias", "mean", "var"), self._bn_params(cout))]
        y = self.node("BatchNormalization", [y, *bn], name=f"/{tag}/bn/BatchNormalization",
                      epsilon=1e-5)
        return self.node("Relu", [y], name=f"/{tag}/Relu") if relu else y

    def _bn_params(self, c: int):
        r = self.rng
        return [(1 + 0.1 * r.standard_normal(c)).astype("float32"),
                (0.1 * r.standard_normal(c)).astype("float32"),
                (0.1 * r.standard_normal(c)).astype("float32"),
                (0.5 + r.random(c)).astype("float32")]

    def linear(self, x: str, fin: int, fout: int, tag: str, gemm: bool) -> str:
        w = self.weight(f"{tag}.weight", (fout, fin) if gemm else (fin, fout))
        b = self.weight(f"{tag}.bias", (fout,), 0.1)
        if gemm:
            return self.node("Gemm", [x, w, b], name=f"/{tag}/Gemm", transB=1)
        y = self.node("MatMul", [x, w], name=f"/{tag}/MatMul")
        return self.node("Add", [y, b], name=f"/{tag}/Add")


def mlp(batch: int = 4) -> onnx.ModelProto:
    b = _Builder(1)
    x = b.node("Transpose", ["x"], name="/in/Transpose", perm=[1, 0])   # feature-major input
    x = b.node("Sub", [x, b.init("mean", np.float32(0.5))], name="/norm/Sub")
    x = b.node("Div", [x, b.init("std", np.float32(0.25))], name="/norm/Div")
    w1 = b.weight("fc1.weight", (48, 64))
    h = b.node("MatMul", [x, b.node("Transpose", [w1], name="/fc1/Transpose", perm=[1, 0])],
               name="/fc1/MatMul")
    h = b.node("Add", [h, b.weight("fc1.bias", (48,), 0.1)], name="/fc1/Add")
    h = b.node("Relu", [h], name="/act1/Relu")
    h = b.node("Dropout", [h, b.init("ratio", np.float32(0.1))], name="/drop/Dropout")
    h = b.node("Tanh", [b.linear(h, 48, 32, "fc2", gemm=True)], name="/act2/Tanh")
    h = b.node("Identity", [h], name="/id/Identity")
    y = b.linear(h, 32, 10, "fc3", gemm=False)
    b.nodes.append(helper.make_node("Identity", [y], ["y"], name="/out/Identity"))
    return b.model("mlp", [("x", [64, batch])], ["y"])


def cnn(batch: int = 2, size: int = 16, channels=(8, 16, 16)) -> onnx.ModelProto:
    b = _Builder(2)
    x, cin = "x", 3
    for k, cout in enumerate(channels):
        x = b.conv_bn(x, cin, cout, f"layer{k + 1}")
        x = b.node("MaxPool", [x], name=f"/layer{k + 1}/MaxPool", kernel_shape=[2, 2],
                   strides=[2, 2])
        cin = cout
    x = b.node("GlobalAveragePool", [x], name="/pool/GlobalAveragePool")
    x = b.node("Flatten", [x], name="/Flatten", axis=1)
    x = b.linear(x, cin, 10, "fc", gemm=True)
    b.nodes.append(helper.make_node("Softmax", [x], ["y"], name="/Softmax", axis=-1))
    return b.model("cnn", [("x", [batch, 3, size, size])], ["y"])


def residual(batch: int = 2, channels: int = 8, size: int = 12) -> onnx.ModelProto:
    b = _Builder(3)
    h = b.conv_bn("x", channels, channels, "conv1")
    h = b.conv_bn(h, channels, channels, "conv2", relu=False)
    h = b.node("Add", [h, "x"], name="/Add")
    b.nodes.append(helper.make_node("Relu", [h], ["y"], name="/Relu"))
    return b.model("residual", [("x", [batch, channels, size, size])], ["y"])


def _heads(b: _Builder, x: str, tag: str, shape_const: str, perm) -> str:
    y = b.node("Reshape", [x, shape_const], name=f"/attn/{tag}/Reshape")
    return b.node("Transpose", [y], name=f"/attn/{tag}/Transpose", perm=perm)


def _attention(b: _Builder, x: str, batch: int, seq: int, d: int, heads: int) -> str:
    hd = d // heads
    q, k, v = (b.linear(x, d, d, f"attn.{t}", gemm=False) for t in "qkv")
    split = np.array([batch, seq, heads, hd], dtype="int64")
    shapes = [b.const(split, name=f"/attn/Constant_{t}") for t in "qkv"]   # torch repeats it
    q = _heads(b, q, "q", shapes[0], [0, 2, 1, 3])
    k = _heads(b, k, "k", shapes[1], [0, 2, 1, 3])
    k = b.node("Transpose", [k], name="/attn/k/Transpose_1", perm=[0, 1, 3, 2])
    v = _heads(b, v, "v", shapes[2], [0, 2, 1, 3])
    s = b.node("MatMul", [q, k], name="/attn/MatMul")
    scale = b.node("Sqrt", [b.const(np.float32(hd))], name="/attn/Sqrt")
    s = b.node("Div", [s, scale], name="/attn/Div")
    p = b.node("Softmax", [s], name="/attn/Softmax", axis=-1)
    o = b.node("MatMul", [p, v], name="/attn/MatMul_1")
    o = b.node("Transpose", [o], name="/attn/Transpose", perm=[0, 2, 1, 3])
    o = b.node("Reshape", [o, b.const(np.array([batch, seq, d], "int64"))],
               name="/attn/Reshape")
    return b.linear(o, d, d, "attn.out", gemm=False)


def _gelu_erf(b: _Builder, x: str) -> str:
    t = b.node("Div", [x, b.const(np.float32(np.sqrt(2.0)))], name="/ffn/gelu/Div")
    t = b.node("Erf", [t], name="/ffn/gelu/Erf")
    t = b.node("Add", [t, b.const(np.float32(1.0))], name="/ffn/gelu/Add")
    t = b.node("Mul", [x, t], name="/ffn/gelu/Mul")
    return b.node("Mul", [t, b.const(np.float32(0.5))], name="/ffn/gelu/Mul_1")


def _layernorm_decomposed(b: _Builder, x: str, d: int, tag: str) -> str:
    mean = b.node("ReduceMean", [x], name=f"/{tag}/ReduceMean", axes=[-1], keepdims=1)
    c = b.node("Sub", [x, mean], name=f"/{tag}/Sub")
    var = b.node("Pow", [c, b.const(np.float32(2.0))], name=f"/{tag}/Pow")
    var = b.node("ReduceMean", [var], name=f"/{tag}/ReduceMean_1", axes=[-1], keepdims=1)
    var = b.node("Add", [var, b.const(np.float32(1e-5))], name=f"/{tag}/Add")
    y = b.node("Div", [c, b.node("Sqrt", [var], name=f"/{tag}/Sqrt")], name=f"/{tag}/Div")
    y = b.node("Mul", [y, b.weight(f"{tag}.weight", (d,), 0.1)], name=f"/{tag}/Mul")
    return b.node("Add", [y, b.weight(f"{tag}.bias", (d,), 0.1)], name=f"/{tag}/Add_1")


def transformer(batch: int = 2, seq: int = 8, d: int = 32, heads: int = 4,
                ffn: int = 64) -> onnx.ModelProto:
    b = _Builder(4)
    a = _attention(b, "x", batch, seq, d, heads)
    h = b.node("Add", ["x", a], name="/Add")
    h = b.node("LayerNormalization", [h, b.weight("norm1.weight", (d,), 0.1),
                                      b.weight("norm1.bias", (d,), 0.1)],
               name="/norm1/LayerNormalization", axis=-1, epsilon=1e-5)
    f = _gelu_erf(b, b.linear(h, d, ffn, "ffn.1", gemm=False))
    f = b.linear(f, ffn, d, "ffn.2", gemm=False)
    h = b.node("Add", [h, f], name="/Add_1")
    y = _layernorm_decomposed(b, h, d, "norm2")
    b.nodes.append(helper.make_node("Identity", [y], ["y"], name="/out/Identity"))
    return b.model("transformer", [("x", [batch, seq, d])], ["y"])


MODELS = {"mlp": mlp, "cnn": cnn, "residual": residual, "transformer": transformer}


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal float32 inputs for every graph input of ``model``."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name not in inits:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            out[vi.name] = rng.standard_normal(shape).astype("float32")
    return out


def main(argv: list[str] | None = None) -> int:
    """Write one of the models as an .onnx file."""
    ap = argparse.ArgumentParser(prog="python -m looptune.graph.zoo",
                                 description="Write a small ONNX model (onnx.helper-built).")
    ap.add_argument("model", choices=sorted(MODELS), help="which model")
    ap.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    ap.add_argument("--batch", type=int, help="batch size (default: the builder's)")
    ap.add_argument("--size", type=int, help="cnn: input height and width")
    ap.add_argument("--channels", help="cnn: the three conv widths, e.g. 32,64,128")
    ns = ap.parse_args(argv)
    kw = {}
    if ns.batch is not None:
        kw["batch"] = ns.batch
    if ns.model == "cnn" and ns.size is not None:
        kw["size"] = ns.size
    if ns.model == "cnn" and ns.channels:
        kw["channels"] = tuple(int(c) for c in ns.channels.split(","))
    onnx.save(MODELS[ns.model](**kw), ns.output)
    print(f"wrote {ns.output}: {ns.model} {kw or '(default sizes)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
