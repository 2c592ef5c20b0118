"""Helpers for operator tests: one node in a graph, its reference run, and its compute built
and run with the default schedule.

(Named graph_util, not util: tests/util.py is imported as ``util`` by other test folders, and
two modules of one name would shadow each other in one pytest session.)

```python
outs = check_op("Conv", [x, w], consts=(1,), pads=[1, 1, 1, 1], expect=[numpy_formula])
```
builds a graph with input ``x`` and constant ``w``, runs the reference, compares it with
``expect`` (an independent numpy formula), then builds the node's compute with
``lt.create_schedule`` + ``lt.build`` (constant inputs the operator reads at compile time are
not arguments; other constants are) and compares the kernel with the reference.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence

import numpy as np

import looptune as lt
from looptune.graph import Graph
from looptune.graph.registry import call_of, get_op

ALIVE: list = []      # built modules stay loaded for the session (see tests/util.py)
# whether ONNX Runtime can judge: tests that also check other things compare with it only
# when it is installed (tests that only compare with it importorskip it)
HAVE_ORT = all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def rand(rng: np.random.Generator, shape, dtype="float32", lo=-1.0, hi=1.0) -> np.ndarray:
    """Uniform values in [lo, hi] (integers inclusive; bool: random)."""
    d = np.dtype(dtype)
    if d.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if d.kind in "iu":
        info = np.iinfo(d)
        return rng.integers(max(int(lo), info.min), min(int(hi), info.max) + 1, size=shape,
                            dtype=d)
    return np.asarray(rng.uniform(lo, hi, size=shape)).astype(d)


def one_node(op_type: str, inputs: Sequence, consts: Sequence[int] = (), outputs=None,
             **attrs):
    """A graph applying ``op_type`` to ``inputs`` (arrays; None = omitted): inputs listed in
    ``consts`` are graph constants, the others graph inputs x0, x1, ... Returns (graph, feed)."""
    g = Graph(f"one_{op_type}")
    vals, feed = [], {}
    for k, a in enumerate(inputs):
        if a is None:
            vals.append(None)
        elif k in consts:
            vals.append(g.const(np.asarray(a), name=f"c{k}"))
        else:
            a = np.asarray(a)
            vals.append(g.input(f"x{k}", a.shape, a.dtype.name))
            feed[f"x{k}"] = a
    out = g.op(op_type, *vals, name="node", outputs=outputs, **attrs)
    g.output(*(out if isinstance(out, tuple) else (out,)))
    return g, feed


def node_tensors(g: Graph, node=None):
    """The placeholders of ``node``'s run-time inputs (constants the operator reads at compile
    time excluded), their value names, and the output tensors of its compute."""
    node = node if node is not None else g.nodes[-1]
    ctx = call_of(g, node)
    opdef = get_op(node.op_type)
    tensors, args, names = [], [], []
    for k, name in enumerate(node.inputs):
        if not name or k in opdef.const_inputs:
            tensors.append(None)
            continue
        t = ctx.in_types[k]
        ph = lt.placeholder(t.shape, t.dtype, name=f"in{k}")
        tensors.append(ph)
        args.append(ph)
        names.append(name)
    return args, names, opdef.compute(ctx, tensors)


def build_node(g: Graph, node=None, schedule=None):
    """Build the compute of ``node`` (default: the last) with the default schedule, or with
    ``schedule(args + outputs)`` returning a Schedule. Returns (function, the value names of
    the arguments, output tensors (None for an omitted output))."""
    args, names, outs = node_tensors(g, node)
    present = [o for o in outs if o is not None]
    s = schedule(args + present) if schedule else lt.create_schedule(present)
    f = lt.build(s, args + present)
    ALIVE.append(f)
    return f, names, outs


def run_node(g: Graph, feed: dict, node=None, schedule=None) -> list[np.ndarray | None]:
    """The compiled node's outputs on ``feed`` (graph inputs by name; constants come from
    the graph); None for outputs the compute leaves out."""
    env = {**g.consts, **feed}
    f, names, outs = build_node(g, node, schedule)
    arrays = [np.array(env[n], order="C") for n in names]     # 0-d stays 0-d
    results = [np.zeros(tuple(o.shape), o.dtype) if o is not None else None for o in outs]
    for r in results:
        if r is not None:
            r.fill(np.nan if r.dtype.kind == "f" else 0)
    f(*arrays, *(r for r in results if r is not None))
    return results


def assert_close(got, want, rtol=1e-5, atol=1e-6, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_op(op_type: str, inputs: Sequence, consts: Sequence[int] = (), expect=None,
             build: bool = True, outputs=None, rtol=1e-5, atol=1e-6, **attrs):
    """Reference of one node against ``expect`` (a list of arrays, or None), then its compiled
    compute against the reference. Returns the reference outputs."""
    g, feed = one_node(op_type, inputs, consts, outputs, **attrs)
    ref = g.run_reference(feed)
    if expect is not None:
        for k, (r, e) in enumerate(zip(ref, expect)):
            assert_close(r, np.asarray(e).astype(r.dtype), rtol, atol,
                         f"{op_type} reference output {k} vs numpy")
    if build:
        got = run_node(g, feed)
        for k, (r, o) in enumerate(zip(ref, [x for x in got if x is not None])):
            assert_close(o, r, rtol, atol, f"{op_type} compiled output {k} vs reference")
    return ref


def onnx_run(op_type: str, inputs: Sequence, opset: int = 18, n_out: int = 1,
             out_dtype=None, **attrs):
    """Run one node in ONNX Runtime (inputs as graph inputs; None = omitted; outputs of
    ``out_dtype``, default input 0's). The caller importorskips onnx and onnxruntime."""
    import onnxruntime as ort
    from onnx import helper

    names, infos, feed = [], [], {}
    for k, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        a = np.asarray(a)
        names.append(f"x{k}")
        elem = helper.np_dtype_to_tensor_dtype(a.dtype)
        infos.append(helper.make_tensor_value_info(f"x{k}", elem, list(a.shape)))
        feed[f"x{k}"] = a
    outs = [f"y{k}" for k in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype or np.asarray(inputs[0]).dtype))
    graph = helper.make_graph([node], "g", infos,
                              [helper.make_tensor_value_info(o, elem, None) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def kill_9_when(cmd: list[str], ready: Callable[[], bool], timeout: float = 300) -> None:
    """Start ``cmd`` (stdout discarded), wait until ``ready()`` (checked every 50 ms, at most
    ``timeout`` seconds) and kill it with SIGKILL; fails with the tail of its stderr when it
    ended before being killed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if ready():
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
