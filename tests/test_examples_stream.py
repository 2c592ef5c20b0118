"""The examples' ``stream`` knob (softmax, layernorm, blur): both choices exact against numpy
at small odd sizes, True really streams the output; blur's hand schedule streams exactly when
its output is larger than the last-level cache."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import looptune as lt
from looptune.operators import load_operators
from looptune.report import make_arrays

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SMALL = {"softmax": (7, 301), "layernorm": (7, 301), "blur": (11, 301)}
OPS = {op.name: op for name in SMALL for op in load_operators(str(EXAMPLES / f"{name}.py"))}


def _pick(space, values: dict):
    names = list(space.knobs)
    vec = [0] * len(names)
    for n, v in values.items():
        vec[names.index(n)] = space.knobs[n].values.index(v)
    return space.get(space.index_of(vec))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_stream_knob_both_choices_exact(name):
    op, args = OPS[name], SMALL[name]
    task = lt.search.create_task(name, args)
    assert set(task.config_space.knobs["stream"].values) == {False, True}
    for stream in (False, True):
        s, tensors = task.instantiate(_pick(task.config_space, {"stream": stream}))
        assert (" streamed:" in str(lt.lower(s, tensors))) is stream
        inputs, outs, call_args = make_arrays(tensors, 3)
        for o in outs:
            o.fill(np.nan)
        lt.build(s, tensors)(*call_args)
        np.testing.assert_allclose(outs[0], op.reference_for(args)(*inputs), rtol=2e-4,
                                   atol=2e-4)


def test_blur_hand_schedule_streams_outputs_larger_than_the_caches_near_the_threads():
    """The threshold: the last-level cache, or twice the threads' L2s where that is less (a
    VM reporting a socket's L3); outputs just below it are not streamed, just above are."""
    from looptune.examples import blur
    t = lt.Target.parse("c -threads=2")
    limit = blur.stream_bytes("c -threads=2")
    assert limit == min(t.cache_bytes(3), 4 * t.cache_bytes(2))
    assert blur.stream_bytes("c -threads=1") == min(t.cache_bytes(3), 2 * t.cache_bytes(2))
    side = int((limit // 4) ** 0.5)
    for H, W, want in ((11, 37, False), (side - 8, side - 8, False), (side + 8, side + 8, True)):
        assert blur.streams_output(H, W, target="c -threads=2") is want
        s, tensors = blur.hand_schedule(H, W, target="c -threads=2")
        assert (" streamed:" in str(lt.lower(s, tensors))) is want


def test_blur_strips_hold_half_of_l2():
    from looptune.examples import blur
    l2 = lt.Target.parse("c").cache_bytes(2)
    rows = blur.strip_rows(1 << 20, 4096, target="c -threads=1")
    assert rows == max(8, l2 // 2 // (4096 * 4) - 2)
    assert blur.strip_rows(64, 4096, target="c -threads=2") <= 32     # every thread a strip
