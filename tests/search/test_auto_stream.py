"""The auto scheduler's streaming-store knob (``<stage>.stream``, issue 19): defined for an
elementwise float output larger than the last-level cache, False first (the fallback is
unchanged), both choices exact, True streams the output's whole last axis."""
from __future__ import annotations

import looptune as lt
import numpy as np
import pytest
from looptune.backends.target import Target
from looptune.search import auto_task
from looptune.search.auto_rules import may_stream
from util import pick_config, run_check
from util import softmax as util_softmax


@pytest.fixture
def tiny_llc(monkeypatch):
    """A last-level cache of 1 KiB: the small test outputs count as larger than it."""
    real = Target.cache_bytes
    monkeypatch.setattr(Target, "cache_bytes",
                        lambda self, level: 1024 if level == 3 else real(self, level))


def _streamed(s, tensors) -> str:
    return str(lt.lower(s, tensors))


def test_softmax_space_has_the_stream_knob_and_both_choices_are_exact(tiny_llc):
    w = util_softmax(N=7, M=301)
    data = w.make_data(np.random.default_rng(0))
    want = w.reference(data)
    sp = auto_task(w.args).config_space
    assert sp.knobs["softmax.stream"].values == [False, True]
    s, tensors = auto_task(w.args).instantiate(sp.get(0))      # the fallback: no streaming
    assert "streamed" not in _streamed(s, tensors)
    for stream in (False, True):
        task = auto_task(w.args)
        s, tensors = task.instantiate(pick_config(sp, {"softmax.stream": stream,
                                                       "softmax.vec": "inner"}))
        nest = _streamed(s, tensors)
        assert ("for j in [0, 301) streamed:" in nest) is stream, nest
        run_check(s, tensors, data, want, **w.tol)


def test_elementwise_output_streams_its_rows_exactly(tiny_llc):
    X = lt.placeholder((9, 517), "float64", name="X")
    Y = lt.compute((9, 517), lambda i, j: X[i, j] * 3.0 - 1.0, name="Y")
    task = auto_task([X, Y])
    sp = task.config_space
    assert sp.knobs["Y.stream"].values == [False, True]
    x = np.random.default_rng(1).uniform(-1, 1, (9, 517))
    for stream in (False, True):
        s, tensors = task.instantiate(pick_config(sp, {"Y.stream": stream}))
        assert ("streamed" in _streamed(s, tensors)) is stream
        run_check(s, tensors, {"X": x}, {"Y": x * 3 - 1}, rtol=1e-15, atol=1e-15)  # fma


def test_no_stream_knob_where_it_cannot_pay_or_apply():
    w = util_softmax(N=7, M=37)            # 1 KB: far below any last-level cache
    assert "softmax.stream" not in auto_task(w.args).config_space.knobs
    X = lt.placeholder((4096, 4096), "int32", name="X")
    Y = lt.compute((4096, 4096), lambda i, j: X[i, j] + 1, name="Y")
    Z = lt.compute((4096, 4096), lambda i, j: X[i, j] * 2.0, name="Z")    # float32, 64 MiB
    llc = Target.parse("c").cache_bytes(3)
    assert not may_stream(Y.op, True, llc)             # int32
    assert not may_stream(Z.op, False, llc)            # not an output
    assert may_stream(Z.op, True, llc) is (4096 * 4096 * 4 > llc)
    assert not may_stream(Z.op, True, None)            # no cache size (OpenCL): no knob


def test_the_cache_size_that_gates_streaming_is_the_tasks_not_the_hosts():
    """The LLC size is part of the auto task (its name and its template's options): a task
    for a machine with a 1 KiB LLC has the knob on any host, and a log of one machine's task
    is not applied to a machine with another cache."""
    from looptune.search.auto import machine_sketch
    from looptune.search.auto_rules import Machine, machine_of
    from looptune.search.space import ConfigSpace
    X = lt.placeholder((9, 517), "float32", name="X")
    Y = lt.compute((9, 517), lambda i, j: X[i, j] * 3.0, name="Y")
    host = machine_of("c")
    tgt = Target.parse("c")
    assert host.llc_bytes == min(tgt.cache_bytes(3), 2 * tgt.cache_bytes(2) * host.threads)
    assert machine_of("c -threads=1").llc_bytes == min(tgt.cache_bytes(3),
                                                       2 * tgt.cache_bytes(2))
    for llc, knob in ((1024, True), (1 << 30, False)):
        sp = ConfigSpace()
        machine_sketch(sp, [X, Y], gpu=False, simd_bytes=host.simd_bytes,
                       threads=host.threads, llc_bytes=llc)
        assert ("Y.stream" in sp.knobs) is knob
    assert str(Machine(64, 2, 1024)) != str(Machine(64, 2, 2048))
    task = auto_task([X, Y])
    assert task.template.options["llc_bytes"] == host.llc_bytes
