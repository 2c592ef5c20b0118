"""The operator graph level: a graph IR over looptune's operator machinery.

```python
g = lt.graph.Graph("tiny")
x = g.input("x", (1, 3, 32, 32))
y = g.op("Relu", g.op("Conv", x, g.const(w, name="w"), pads=[1, 1, 1, 1]))
g.output(y)
ref = g.run_reference({"x": xin})
```
"""
from __future__ import annotations

from ..errors import GraphError
from .ir import Graph, Node, TensorType, Value
from .registry import OpDef, OpPattern, get_op, register, supported_ops
from .onnx_import import from_onnx
from .fusion import fuse
from .compile import compile  # noqa: A004
from .tune import tune
from .passes import PassStats, default_pipeline, optimize  # noqa: F401 - the pass pipeline

__all__ = ["Graph", "GraphError", "Node", "OpDef", "OpPattern", "TensorType", "Value",
           "get_op", "register", "supported_ops", "from_onnx", "fuse", "compile", "tune"]
