"""Stencil producers in the auto sketch (sketch version 12): a stage that its one reader reads
through a window of rows (blur_x for blur_y) gets knob ``<stage>.slide`` (False first: the
fallback is unchanged); chosen, with the reader's rows split, it is computed per row and
stored per parallel strip (store_at), each row computed once per strip, and every such
config is exact."""
from __future__ import annotations

import itertools

import looptune as lt
import numpy as np
import pytest
from looptune.search import auto_task
from looptune.search.auto_rules import slides_along_rows
from util import pick_config


def _blur(H, W):
    inp = lt.placeholder((H + 2, W + 2), name="I")
    bx = lt.compute((H + 2, W), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3.0,
                    name="blur_x")
    by = lt.compute((H, W), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0,
                    name="blur_y")
    return inp, bx, by


def _reference(img):
    bx = (img[:, :-2] + img[:, 1:-1] + img[:, 2:]) / np.float32(3)
    return (bx[:-2] + bx[1:-1] + bx[2:]) / np.float32(3)


def test_the_rule_finds_row_windows_only():
    _, bx, by = _blur(9, 11)
    s = lt.create_schedule(by)
    assert slides_along_rows(s, s[bx]) is s[by]
    # read along columns only (a 1 x 3 window in the vector axis): nothing to slide
    X = lt.placeholder((9, 13), name="X")
    P = lt.compute((9, 13), lambda y, x: X[y, x] * 2.0, name="P")
    Q = lt.compute((9, 11), lambda y, x: P[y, x] + P[y, x + 2], name="Q")
    s2 = lt.create_schedule(Q)
    assert slides_along_rows(s2, s2[P]) is None
    # the row variable in two dimensions (a diagonal): refused
    D = lt.compute((8, 9), lambda y, x: P[y, y] + P[y + 1, x], name="D")
    s3 = lt.create_schedule(D)
    assert slides_along_rows(s3, s3[P]) is None


def test_knob_fallback_and_slid_configs_are_exact():
    H, W = 37, 53
    inp, _, by = _blur(H, W)
    task = auto_task([inp, by], target="c -threads=2")
    space = task.config_space
    assert "blur_x.slide" in space.knobs
    assert space.knobs["blur_x.slide"].values == [False, True]
    s0, _ = task.instantiate(space.get(0))
    assert not any(x.primitive == "store_at" for x in s0.steps)      # the fallback as before
    img = np.random.default_rng(0).random((H + 2, W + 2), dtype=np.float32)
    want = _reference(img)
    rows_values = [v for v in space.knobs["blur_y.rows"].values if v > 1]
    assert rows_values
    built = 0
    for rows, stream in itertools.product(rows_values[:3], [False, True]):
        values = {"blur_x.slide": True, "blur_x.inline": False, "blur_y.rows": rows}
        if "blur_y.stream" in space.knobs:
            values["blur_y.stream"] = stream
        s, args = task.instantiate(pick_config(space, values))
        steps = [str(x) for x in s.steps]
        assert any("store_at" in x for x in steps), steps
        out = np.full((H, W), np.nan, np.float32)
        lt.build(s, args, target="c -threads=2")(img, out)
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
        built += 1
    assert built >= 1


@pytest.mark.parametrize("rows", [1])
def test_without_a_row_loop_the_producer_stays_at_root(rows):
    inp, _, by = _blur(12, 40)
    task = auto_task([inp, by], target="c -threads=2")
    s, args = task.instantiate(pick_config(task.config_space, {
        "blur_x.slide": True, "blur_x.inline": False, "blur_y.rows": rows}))
    assert not any(x.primitive == "store_at" for x in s.steps)
    img = np.random.default_rng(1).random((14, 42), dtype=np.float32)
    out = np.empty((12, 40), np.float32)
    lt.build(s, args, target="c -threads=2")(img, out)
    np.testing.assert_allclose(out, _reference(img), rtol=1e-6, atol=1e-6)
