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


def test_blur_hand_schedule_streams_outputs_larger_than_the_last_level_cache():
    from looptune.examples import blur
    llc = lt.Target.parse("c").cache_bytes(3)
    side = int((llc // 4) ** 0.5) + 64                   # an output just over the L3
    for H, W, want in ((11, 37, False), (side, side, True)):
        assert blur.streams_output(H, W) is want
        s, tensors = blur.hand_schedule(H, W)
        assert (" streamed:" in str(lt.lower(s, tensors))) is want
