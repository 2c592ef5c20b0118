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
from looptune.search.space import FallbackConfig

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


def test_blur_hand_schedule_computes_blur_x_per_parallel_4_by_32_tile_unstreamed():
    """The hand schedule (and the template's fallback): blur_y in 4 x 32 tiles fused into one
    parallel loop, vectorized, not streamed; blur_x computed per tile (6 x 32), vectorized,
    at every size."""
    from looptune.examples import blur
    for H, W in ((11, 37), (4096, 4096)):
        s, tensors = blur.hand_schedule(H, W)
        text = str(lt.lower(s, tensors))
        assert " streamed:" not in text
        assert "allocate blur_x[float32 * " in text
        assert [str(x) for x in s.steps] == [
            "s[blur_y].split(s[blur_y].loop('y'), factor=4)",
            "s[blur_y].split(s[blur_y].loop('x'), factor=32)",
            "s[blur_y].reorder(s[blur_y].loop('y.outer'), s[blur_y].loop('x.outer'), "
            "s[blur_y].loop('y.inner'), s[blur_y].loop('x.inner'))",
            "s[blur_y].vectorize(s[blur_y].loop('x.inner'))",
            "s[blur_y].fuse(s[blur_y].loop('y.outer'), s[blur_y].loop('x.outer'))",
            "s[blur_y].parallel(s[blur_y].loop('y.outer.x.outer.fused'))",
            "s[blur_x].compute_at(s[blur_y], s[blur_y].loop('y.outer.x.outer.fused'))",
            "s[blur_x].vectorize(s[blur_x].loop('x'))"]
        fallback, _ = blur.template.func(FallbackConfig(), H, W)
        assert [str(x) for x in fallback.steps] == [str(x) for x in s.steps]
    s, tensors = blur.hand_schedule(4096, 4096)
    assert "allocate blur_x[float32 * 6, 32]" in str(lt.lower(s, tensors))


def test_blur_template_keeps_16_row_and_whole_row_tiles():
    """The 16-row tiles (fastest measured on Intel Xeons) and tiles of whole rows stay knob
    values beside the 4-row default, so a tune can pick them; both exact."""
    from looptune.examples import blur
    H, W = 37, 301
    task = lt.search.create_task("blur", (H, W))
    knobs = task.config_space.knobs
    assert 16 in [blur.TILE_ROWS * v for v in knobs["rows_scale"].values]
    assert W in knobs["tile_x"].values
    op = OPS["blur"]
    for rows_scale, tile_x in ((4, 32), (1, W), (4, W)):
        s, tensors = task.instantiate(_pick(task.config_space, {
            "blur_x_at": "tile", "rows_scale": rows_scale, "tile_x": tile_x}))
        rows = blur.TILE_ROWS * rows_scale
        assert f"allocate blur_x[float32 * {rows + 2}, {tile_x}]" in str(lt.lower(s, tensors))
        inputs, outs, call_args = make_arrays(tensors, 3)
        outs[0].fill(np.nan)
        lt.build(s, tensors)(*call_args)
        np.testing.assert_allclose(outs[0], op.reference_for((H, W))(*inputs), rtol=2e-4,
                                   atol=2e-4)


def test_blur_strips_hold_half_of_l2():
    from looptune.examples import blur
    l2 = lt.Target.parse("c").cache_bytes(2)
    rows = blur.strip_rows(1 << 20, 4096, target="c -threads=1")
    assert rows == max(8, l2 // 2 // (4096 * 4) - 2)
    assert blur.strip_rows(64, 4096, target="c -threads=2") <= 32     # every thread a strip
