"""looptune as an ONNX backend: ``onnx.backend.base.Backend`` for the ONNX backend test suite.

```python
from looptune.graph.onnx_backend import LooptuneBackend
rep = LooptuneBackend.prepare(model)                    # the numpy reference run of the graph
rep = LooptuneBackend.prepare(model, mode="compile")    # lt.graph.compile(g, target="c")
outs = rep.run([x])                                     # the model's outputs, in order
```

Modes: ``"reference"`` runs the imported graph node by node on numpy (``optimize=True`` runs
it after ``lt.graph.optimize``); ``"compile"`` compiles it with ``lt.graph.compile``. The ONNX
suite passes everything as graph inputs, including tensors an operator needs at compile time
(a Reshape's shape, a Slice's starts, ...): the representation imports the graph once per
signature of the inputs, fixing the inputs that feed such operands (``OpDef.const_inputs``)
as constants, and using the shapes of the arrays for inputs the model declares symbolically.

The classes are made on first use, so importing this module does not import ``onnx``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import GraphError
from .ir import Node
from .onnx_import import _check_ops, _check_opset, _onnx, compile_time_values, from_onnx, load_model

MODES = ("reference", "compile")
__all__ = ["MODES", "const_fed_inputs", "graph_api"]   # + LooptuneBackend, LooptuneRep (lazy)


def const_fed_inputs(model) -> list[str]:
    """The graph inputs of ``model`` whose values some node needs at compile time, directly
    (a Reshape's shape) or through nodes computing such an operand (Shape/Size excepted)."""
    gp = model.graph
    inits = {t.name for t in gp.initializer}
    ins = [vi.name for vi in gp.input if vi.name not in inits]
    nodes = [Node.make(n.op_type, n.input, n.output) for n in gp.node
             if n.domain in ("", "ai.onnx") and n.op_type != "Constant"]
    needed = compile_time_values(nodes)
    return [i for i in ins if i in needed]


class _RepImpl:
    """What a prepared model does; LooptuneRep adds onnx's BackendRep as a base."""

    def __init__(self, model, mode: str = "reference", target: str = "c",
                 optimize: bool = False):
        if mode not in MODES:
            raise GraphError(f"LooptuneBackend.prepare: mode={mode!r}; use one of "
                             f"{', '.join(MODES)}")
        self.model = load_model(model)
        _check_opset(self.model)
        _check_ops(self.model)
        self.mode, self.target, self.optimize = mode, target, optimize
        gp = self.model.graph
        inits = {t.name for t in gp.initializer}
        self.input_names = [vi.name for vi in gp.input if vi.name not in inits]
        self.output_names = [o.name for o in gp.output]
        self.bound = const_fed_inputs(self.model)
        self._cache: dict[tuple, Any] = {}

    def _key(self, arrays: dict[str, np.ndarray]) -> tuple:
        key = []
        for n in self.input_names:
            a = arrays[n]
            key.append((n, a.shape, a.dtype.str, a.tobytes() if n in self.bound else None))
        return tuple(key)

    def _runner(self, arrays: dict[str, np.ndarray]):
        key = self._key(arrays)
        if key not in self._cache:
            consts = {n: arrays[n] for n in self.bound}
            shapes = {n: arrays[n].shape for n in self.input_names if n not in self.bound
                      and arrays[n].ndim and self._symbolic(n)}
            g = from_onnx(self.model, shapes=shapes, constants=consts)
            self._cache[key] = (g, self._prepare_graph(g))
        return self._cache[key]

    def _symbolic(self, name: str) -> bool:
        vi = next(v for v in self.model.graph.input if v.name == name)
        tt = vi.type.tensor_type
        return not tt.HasField("shape") or any(not d.HasField("dim_value")
                                               for d in tt.shape.dim)

    def _prepare_graph(self, g):
        if self.mode == "compile":
            return graph_api("compile")(g, target=self.target)
        return graph_api("optimize")(g) if self.optimize else g

    def run_arrays(self, inputs) -> list[np.ndarray]:
        arrays = self._bind(inputs)
        g, prepared = self._runner(arrays)
        args = [arrays[n] for n in g.inputs]
        if self.mode == "compile":
            return [np.asarray(o) for o in prepared(*args)]
        return prepared.run_reference(args)

    def _bind(self, inputs) -> dict[str, np.ndarray]:
        if isinstance(inputs, dict):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise GraphError(f"LooptuneRep.run: missing input(s) {', '.join(missing)}")
            return {n: np.asarray(inputs[n]) for n in self.input_names}
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(self.input_names):
            raise GraphError(f"LooptuneRep.run: the model takes {len(self.input_names)} "
                             f"input(s) ({', '.join(self.input_names)}); got {len(inputs)}")
        return {n: np.asarray(x) for n, x in zip(self.input_names, inputs)}


def graph_api(name: str):
    """``lt.graph.<name>`` (compile, optimize, fuse), or a GraphError when this checkout
    does not have it."""
    from .. import graph
    fn = getattr(graph, name, None)
    if not callable(fn):
        raise GraphError(f"lt.graph.{name} is not available in this version of looptune")
    return fn


def _make_classes() -> dict[str, type]:
    _onnx()
    from onnx import helper
    from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

    class LooptuneRep(_RepImpl, BackendRep):
        """A prepared model: ``run(inputs)`` returns its outputs (a named tuple)."""

        def run(self, inputs, **kwargs):
            outs = self.run_arrays(inputs)
            return namedtupledict("Outputs", self.output_names)(*outs)

    class LooptuneBackend(Backend):
        """looptune behind ONNX's backend API (CPU only)."""

        @classmethod
        def is_compatible(cls, model, device: str = "CPU", **kwargs) -> bool:
            try:
                m = load_model(model)
                _check_opset(m)
                _check_ops(m)
            except GraphError:
                return False
            return cls.supports_device(device)

        @classmethod
        def prepare(cls, model, device: str = "CPU", mode: str = "reference",
                    target: str = "c", optimize: bool = False, **kwargs) -> LooptuneRep:
            if not cls.supports_device(device):
                raise GraphError(f"LooptuneBackend.prepare: device {device!r} is not "
                                 "supported; looptune runs ONNX models on the CPU")
            return LooptuneRep(model, mode=mode, target=target, optimize=optimize)

        @classmethod
        def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
            arrays = [np.asarray(x) for x in inputs]
            ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                 a.shape)
                   for n, a in zip(node.input, arrays) if n]
            outs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
            graph = helper.make_graph([node], f"node_{node.op_type}", ins, outs)
            opset = kwargs.pop("opset_version", None) or _default_opset()
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
            rep = cls.prepare(model, device, **kwargs)
            return rep.run([a for n, a in zip(node.input, arrays) if n])

        @classmethod
        def supports_device(cls, device: str) -> bool:
            try:
                return Device(device).type == DeviceType.CPU
            except AttributeError:          # DeviceType has no such name
                return False

    return {"LooptuneRep": LooptuneRep, "LooptuneBackend": LooptuneBackend}


def _default_opset() -> int:
    import onnx
    return onnx.defs.onnx_opset_version()


_CLASSES: dict[str, type] = {}


def __getattr__(name: str):
    if name in ("LooptuneBackend", "LooptuneRep"):
        if not _CLASSES:
            _CLASSES.update(_make_classes())
        return _CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
