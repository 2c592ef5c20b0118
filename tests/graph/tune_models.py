"""Small graphs for the whole-model tuning, export and CLI tests (built with the Python
builder, weights from a fixed seed), importable from a test's subprocess script."""
from __future__ import annotations

import looptune as lt
import numpy as np


def twin(size: int = 9, channels: int = 4) -> lt.graph.Graph:
    """Conv+Relu twice (the same shapes: one task of weight 2), then GlobalAveragePool."""
    rng = np.random.default_rng(7)
    g = lt.graph.Graph("twin")
    h = g.input("x", (1, channels, size, size))
    for k in range(2):
        w = rng.standard_normal((channels, channels, 3, 3)).astype("float32") * 0.3
        h = g.op("Relu", g.op("Conv", h, g.const(w, name=f"w{k}"), pads=[1, 1, 1, 1]))
    g.output(g.op("GlobalAveragePool", h))
    return g


def small_cnn(batch: int = 1, size: int = 12) -> lt.graph.Graph:
    """Conv-BN-Relu-MaxPool twice, GlobalAveragePool, a 1x1 Conv classifier, Softmax."""
    rng = np.random.default_rng(11)
    g = lt.graph.Graph("small_cnn")
    h = g.input("image", (batch, 3, size, size))
    cin = 3
    for k, cout in enumerate((8, 12)):
        w = g.const(rng.standard_normal((cout, cin, 3, 3)).astype("float32") * 0.3, name=f"w{k}")
        b = g.const(rng.standard_normal(cout).astype("float32") * 0.1, name=f"b{k}")
        h = g.op("Conv", h, w, b, pads=[1, 1, 1, 1])
        bn = [g.const(a.astype("float32"), name=f"bn{k}.{n}") for n, a in
              zip(("scale", "bias", "mean", "var"),
                  (1 + 0.1 * rng.standard_normal(cout), 0.1 * rng.standard_normal(cout),
                   0.1 * rng.standard_normal(cout), 0.5 + rng.random(cout)))]
        h = g.op("Relu", g.op("BatchNormalization", h, *bn, epsilon=1e-5))
        h = g.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2])
        cin = cout
    h = g.op("GlobalAveragePool", h)                       # [batch, cin, 1, 1]
    fc = rng.standard_normal((10, cin, 1, 1)).astype("float32") * 0.3
    fcb = rng.standard_normal(10).astype("float32") * 0.1
    h = g.op("Conv", h, g.const(fc, name="fc.weight"), g.const(fcb, name="fc.bias"))
    g.output(g.op("Softmax", h, axis=1))                   # the classifier as a 1x1 conv
    return g


def tiny_transformer(seq: int = 6, d: int = 16, ffn: int = 24) -> lt.graph.Graph:
    """One attention head and a feed-forward block: MatMul+Add projections (k transposed by a
    Gemm), scaled scores, Softmax, residual Adds, LayerNormalization, a GELU in its Erf
    form."""
    rng = np.random.default_rng(13)
    g = lt.graph.Graph("tiny_transformer")
    x = g.input("tokens", (seq, d))

    def linear(h, fin, fout, tag):
        w = g.const((rng.standard_normal((fin, fout)) / np.sqrt(fin)).astype("float32"),
                    name=f"{tag}.weight")
        b = g.const(rng.standard_normal(fout).astype("float32") * 0.1, name=f"{tag}.bias")
        return g.op("Add", g.op("MatMul", h, w), b)

    def norm(h, tag):
        s = g.const((1 + 0.1 * rng.standard_normal(d)).astype("float32"), name=f"{tag}.scale")
        b = g.const((0.1 * rng.standard_normal(d)).astype("float32"), name=f"{tag}.bias")
        return g.op("LayerNormalization", h, s, b, axis=-1, epsilon=1e-5)

    q, v = linear(x, d, d, "q"), linear(x, d, d, "v")
    wk = g.const((rng.standard_normal((d, d)) / np.sqrt(d)).astype("float32"), name="k.weight_t")
    bk = g.const(rng.standard_normal((d, 1)).astype("float32") * 0.1, name="k.bias")
    kt = g.op("Gemm", wk, x, bk, transB=1)                 # k transposed: Wk^T x^T + bk
    s = g.op("Div", g.op("MatMul", q, kt), np.float32(np.sqrt(d)))
    a = g.op("MatMul", g.op("Softmax", s, axis=-1), v)
    h = norm(g.op("Add", x, linear(a, d, d, "o")), "norm1")
    f = linear(h, d, ffn, "ffn1")
    f = g.op("Mul", g.op("Mul", f, g.op("Add", g.op("Erf", g.op("Div", f, np.float32(
        np.sqrt(2.0)))), np.float32(1.0))), np.float32(0.5))
    g.output(norm(g.op("Add", h, linear(f, ffn, d, "ffn2")), "norm2"))
    return g


def inputs_for(g: lt.graph.Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {v: rng.standard_normal(g.types[v].shape).astype(g.types[v].dtype)
            for v in g.inputs}
