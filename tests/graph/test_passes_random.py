"""The whole pipeline keeps outputs equal on random graphs (a small generator of CNN- and
transformer-like graphs full of what the rules look for), and on the test models each pass
fires."""
from __future__ import annotations

import numpy as np
import pytest
from passes_util import assert_same_outputs, needs, rand

from looptune.graph import Graph
from looptune.graph.passes import PassStats, optimize

_CNN_OPS = ("Conv", "BatchNormalization", "Transpose", "Identity", "Dropout", "Pad", "ReduceMean",
            "GlobalAveragePool", "Flatten", "Gemm", "Reshape", "MaxPool")


class _RandomCNN:
    """Grows a graph from a 4-D input by random steps; each step keeps the 4-D shape or
    changes only the channels, so any step can follow any other."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.g = Graph(f"random{seed}")
        n, c = int(self.rng.integers(1, 3)), int(self.rng.choice([3, 4, 6, 8]))
        h, w = (int(v) for v in self.rng.integers(4, 9, size=2))
        self.cur = self.g.input("x", (n, c, h, w))
        self.seen = [self.cur]

    def const(self, *shape):
        return self.g.const(rand(self.rng, *shape))

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def step(self):
        g, x = self.g, self.cur
        c = x.shape[1]
        kind = self.pick(["conv", "conv", "bn", "act", "const", "transpose", "noop", "residual",
                          "reshape", "pad", "pool"])
        if kind == "conv":
            k = int(self.pick([4, 6, 8, 12, 16, 5]))
            ks = int(self.pick([1, 3]))
            attrs = {"pads": [ks // 2] * 4}
            group = self.pick([1, 1, 2]) if c % 2 == 0 and k % 2 == 0 else 1
            bias = [self.const(k)] if self.rng.random() < 0.5 else []
            y = g.op("Conv", x, self.const(k, c // group, ks, ks), *bias, group=group, **attrs)
        elif kind == "bn":
            p = [self.g.const(self.rng.uniform(0.5, 1.5, c).astype("float32")), self.const(c),
                 self.const(c), self.g.const(self.rng.uniform(0.5, 2, c).astype("float32"))]
            y = g.op("BatchNormalization", x, *p)
        elif kind == "act":
            y = g.op(self.pick(["Relu", "Sigmoid", "Tanh"]), x)
        elif kind == "const":
            op = self.pick(["Add", "Mul", "Sub", "Div"])
            cst = self.pick([self.const(c, 1, 1), self.g.const(np.float32(1.5)),
                             self.const(1, c, 1, 1)])
            y = g.op(op, x, cst)
        elif kind == "transpose":
            t = g.op("Transpose", x, perm=[0, 2, 3, 1])
            t = g.op(self.pick(["Relu", "Tanh", "Neg"]), t)
            if self.rng.random() < 0.5:
                t = g.op("Mul", t, self.const(c))                        # NHWC: channels last
            y = g.op("Transpose", t, perm=[0, 3, 1, 2])
        elif kind == "noop":
            y = g.op(self.pick(["Identity", "Dropout"]), x)
        elif kind == "residual":
            same = [v for v in self.seen if v.shape == x.shape and v.name != x.name]
            y = g.op("Add", x, self.pick(same)) if same else g.op("Relu", x)
        elif kind == "reshape":
            n, c, h, w = x.shape
            flat = g.op("Reshape", x, np.array([n, c, h * w], np.int64))
            y = g.op("Reshape", flat, np.array([n, c, h, w], np.int64))
        elif kind == "pad":
            y = g.op("Pad", x, np.zeros(8, np.int64))
        else:
            y = g.op("MaxPool", x, kernel_shape=[1, 1]) if min(x.shape[2:]) < 4 else \
                g.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2])
        self.cur = y
        self.seen.append(y)

    def build(self, steps: int) -> Graph:
        for _ in range(steps):
            self.step()
        g, x = self.g, self.cur
        head = g.op("Flatten", g.op("ReduceMean", x, axes=[2, 3], keepdims=1))
        w = g.input("w", (5, x.shape[1])) if self.rng.random() < 0.5 else self.const(5, x.shape[1])
        g.output(g.op("Gemm", head, w, transB=1), self.pick(self.seen[1:] or [x]))
        return g


@needs(*_CNN_OPS)
@pytest.mark.parametrize("seed", range(24))
def test_the_pipeline_keeps_random_cnn_graphs_equal(seed):
    g = _RandomCNN(seed).build(steps=8)
    before = str(g)
    stats = PassStats()
    opt = optimize(g, stats=stats, target="c -march=x86-64")             # 4 lanes: blocks
    assert str(g) == before
    assert_same_outputs(g, opt, seed, rtol=2e-4, atol=2e-4)
    assert len(opt.nodes) <= len(g.nodes) + 2 * stats.total("layout_nchwc", "convs blocked") + 2
    for n in opt.nodes:          # what stays: an Identity/Dropout from an input to an output
        assert n.op_type != "BatchNormalization", f"{n.label} left in"
        assert n.op_type != "ReduceMean" or len(opt.types[n.inputs[0]].shape) == 5, n.label
        assert n.op_type not in ("Identity", "Dropout") or (
            n.inputs[0] in g.inputs and n.outputs[0] in g.outputs), f"{n.label} left in"


def _random_attention(seed: int) -> Graph:
    """Transformer-like: projections with transposed weights, heads split by Reshape and
    Transpose, k transposed twice, scaled scores, a decomposed layer norm."""
    rng = np.random.default_rng(seed)
    b, s, d, heads = int(rng.integers(1, 3)), int(rng.integers(3, 7)), 12, 3
    g = Graph(f"attn{seed}")
    x = g.input("x", (b, s, d))

    def proj(v, tag):
        w = g.op("Transpose", g.const(rand(rng, d, d)))                   # folds
        y = g.op("Add", g.op("MatMul", v, w), g.const(rand(rng, d)))
        y = g.op("Reshape", y, np.array([b, s, heads, d // heads], np.int64))
        return g.op("Transpose", y, perm=[0, 2, 1, 3])                    # b, h, s, d/h

    q, k, v = proj(x, "q"), proj(x, "k"), proj(x, "v")
    kt = g.op("Transpose", g.op("Transpose", k, perm=[0, 1, 3, 2]), perm=[0, 1, 3, 2])
    kt = g.op("Transpose", kt, perm=[0, 1, 3, 2])
    scale = g.op("Sqrt", g.const(np.float32(d // heads)))
    att = g.op("Softmax", g.op("Div", g.op("MatMul", q, kt), scale), axis=-1)
    o = g.op("Transpose", g.op("MatMul", att, v), perm=[0, 2, 1, 3])
    o = g.op("Add", g.op("Reshape", o, np.array([b, s, d], np.int64)), x)
    mean = g.op("ReduceMean", o, axes=[-1], keepdims=1)
    cen = g.op("Sub", o, mean)
    var = g.op("ReduceMean", g.op("Mul", cen, cen), axes=[-1], keepdims=1)
    y = g.op("Div", cen, g.op("Sqrt", g.op("Add", var, np.float32(1e-5))))
    y = g.op("Add", g.op("Mul", y, g.const(rand(rng, d))), g.const(rand(rng, d)))
    g.output(g.op("Identity", y, name="y"))
    return g


@needs("MatMul", "Transpose", "Reshape", "Softmax", "ReduceMean", "Identity")
@pytest.mark.parametrize("seed", range(6))
def test_the_pipeline_keeps_random_attention_graphs_equal(seed):
    g = _random_attention(seed)
    stats = PassStats()
    opt = optimize(g, stats=stats)
    assert_same_outputs(g, opt, seed)
    assert stats.total("fold_constants", "nodes folded") == 4               # 3 weights, sqrt
    assert stats.total("simplify", "transpose_transpose") >= 1
    assert opt.outputs == ["y"] and len(opt.nodes) < len(g.nodes) - 6


@pytest.mark.parametrize("name", ["mlp", "cnn", "residual", "transformer"])
def test_each_test_model_keeps_its_outputs_and_passes_fire(name):
    pytest.importorskip("onnx")
    import models

    from looptune.graph import from_onnx
    model = models.MODELS[name]()
    g = from_onnx(model)
    stats = PassStats()
    opt = optimize(g, stats=stats, target="c -march=x86-64")
    feed = models.random_inputs(model)
    for got, want in zip(opt.run_reference(feed), g.run_reference(feed)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    fired = {r.name for r in stats.records if r.counts}
    expect = {"mlp": {"simplify"}, "cnn": {"fold_batchnorm", "layout_nchwc"},
              "residual": {"fold_batchnorm", "layout_nchwc"},
              "transformer": {"fold_constants", "cse", "simplify"}}[name]
    assert expect <= fired, str(stats)
    assert len(opt.nodes) <= len(g.nodes) or "layout_nchwc" in fired
