"""Shorthands of the graph builder: ``g.conv2d(x, w, stride=1, pad=1)`` for
``g.op("Conv", x, w, strides=[1, 1], pads=[1, 1, 1, 1])``.

Each is a thin wrapper over :meth:`Graph.op` (ONNX's operator and attributes underneath, so a
graph built either way, or imported from ONNX, is the same graph); sizes given as one int
apply to every spatial axis of a 2-D operator.
"""
from __future__ import annotations


def _pair(v, what: str, op: str) -> list[int]:
    from ..errors import GraphError
    vals = [v, v] if isinstance(v, int) else list(v)
    if len(vals) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in vals):
        raise GraphError(f"g.{op}: {what} must be an int or a pair of ints; got {v!r}")
    return vals


class BuilderMixin:
    """Named shorthands for the common operators (see the module docstring)."""

    def conv2d(self, x, w, b=None, *, stride=1, pad=0, dilation=1, groups: int = 1, name=None):
        """2-D convolution, NCHW input and OIHW weights (ONNX Conv); ``pad`` pads each side."""
        ph, pw = _pair(pad, "pad", "conv2d")
        return self.op("Conv", x, w, *([b] if b is not None else []), name=name,
                       strides=_pair(stride, "stride", "conv2d"), pads=[ph, pw, ph, pw],
                       dilations=_pair(dilation, "dilation", "conv2d"), group=groups)

    def max_pool2d(self, x, kernel, *, stride=None, pad=0, name=None):
        ph, pw = _pair(pad, "pad", "max_pool2d")
        return self.op("MaxPool", x, name=name, kernel_shape=_pair(kernel, "kernel", "max_pool2d"),
                       strides=_pair(stride if stride is not None else kernel, "stride",
                                     "max_pool2d"), pads=[ph, pw, ph, pw])

    def avg_pool2d(self, x, kernel, *, stride=None, pad=0, name=None):
        ph, pw = _pair(pad, "pad", "avg_pool2d")
        return self.op("AveragePool", x, name=name,
                       kernel_shape=_pair(kernel, "kernel", "avg_pool2d"),
                       strides=_pair(stride if stride is not None else kernel, "stride",
                                     "avg_pool2d"), pads=[ph, pw, ph, pw])

    def global_avg_pool(self, x, name=None):
        return self.op("GlobalAveragePool", x, name=name)

    def dense(self, x, w, b=None, name=None):
        """``x @ w.T + b`` with ``w`` of shape (out, in), as torch.nn.Linear (ONNX Gemm)."""
        return self.op("Gemm", x, w, *([b] if b is not None else []), name=name, transB=1)

    def matmul(self, a, b, name=None):
        return self.op("MatMul", a, b, name=name)

    def batch_norm(self, x, scale, bias, mean, var, *, epsilon: float = 1e-5, name=None):
        return self.op("BatchNormalization", x, scale, bias, mean, var, name=name,
                       epsilon=epsilon)

    def layer_norm(self, x, scale, bias=None, *, axis: int = -1, epsilon: float = 1e-5,
                   name=None):
        return self.op("LayerNormalization", x, scale, *([bias] if bias is not None else []),
                       name=name, axis=axis, epsilon=epsilon)

    def softmax(self, x, axis: int = -1, name=None):
        return self.op("Softmax", x, name=name, axis=axis)

    def relu(self, x, name=None):
        return self.op("Relu", x, name=name)

    def add(self, a, b, name=None):
        return self.op("Add", a, b, name=name)

    def mul(self, a, b, name=None):
        return self.op("Mul", a, b, name=name)

    def reshape(self, x, shape, name=None):
        return self.op("Reshape", x, self.const([int(s) for s in shape], dtype="int64"),
                       name=name)

    def transpose(self, x, perm=None, name=None):
        return self.op("Transpose", x, name=name, **({"perm": list(perm)} if perm else {}))

    def flatten(self, x, axis: int = 1, name=None):
        return self.op("Flatten", x, name=name, axis=axis)

    def concat(self, *xs, axis: int, name=None):
        return self.op("Concat", *xs, name=name, axis=axis)
