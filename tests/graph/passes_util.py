"""Helpers for the pass tests: run a pass with statistics, compare the result with the reference
run of the original graph on seeded random inputs, and skip a test while an operator it needs
is not in the library yet.

```python
opt, stats = check_pass(g, simplify)          # outputs equal to g's reference run
assert op_types(opt) == ["Relu"] and stats.total("simplify", "identity") == 1
```
"""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt
from looptune.graph import Graph
from looptune.graph.passes import PassStats


def needs(*ops: str):
    """Skip while an operator the test builds is not registered (the library lands in
    parallel)."""
    missing = [o for o in ops if o not in lt.graph.supported_ops()]
    return pytest.mark.skipif(bool(missing), reason=f"operator(s) {', '.join(missing)} not "
                              "in the library yet")


def op_types(g: Graph) -> list[str]:
    return [n.op_type for n in g.nodes]


def random_feed(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for name in g.inputs:
        t = g.types[name]
        if np.dtype(t.dtype).kind == "f":
            feed[name] = rng.standard_normal(t.shape).astype(t.dtype)
        else:
            feed[name] = rng.integers(-5, 6, size=t.shape).astype(t.dtype)
    return feed


def assert_same_outputs(g: Graph, opt: Graph, seed: int = 0, rtol: float = 1e-4,
                        atol: float = 1e-5) -> None:
    """``opt`` keeps ``g``'s interface (inputs, output names and types) and its outputs."""
    assert opt.inputs == g.inputs and opt.outputs == g.outputs
    assert [opt.types[o] for o in opt.outputs] == [g.types[o] for o in g.outputs]
    feed = random_feed(g, seed)
    want = g.run_reference(feed)
    got = opt.run_reference(feed)
    for name, w, o in zip(g.outputs, want, got):
        assert w.dtype.kind != "f" or np.isfinite(w).all(), f"output {name}: inf/nan (a " \
            "vacuous comparison; change the graph or inputs)"
        np.testing.assert_allclose(o, w, rtol=rtol, atol=atol, err_msg=f"output {name}")


def check_pass(g: Graph, fn, seed: int = 0, rtol: float = 1e-4, atol: float = 1e-5, **opts):
    """Run pass ``fn`` on ``g`` (left unchanged) and check outputs; returns (graph, stats)."""
    before = str(g)
    stats = PassStats()
    opt = fn(g, stats, **opts)
    assert str(g) == before, "the pass changed its input graph"
    assert_same_outputs(g, opt, seed, rtol, atol)
    return opt, stats


def rand(rng: np.random.Generator, *shape, lo=-1.0, hi=1.0) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape).astype("float32")
