"""conv2d_winograd (examples/conv2d.py): the Toom-Cook matrices, exactness against the direct
convolution over shapes, tile sizes, kernels and pads, and clear errors where it does not
apply."""
from __future__ import annotations

import sys
from pathlib import Path

import looptune as lt
import numpy as np
import pytest
from looptune.operators import load_operators

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
cv = sys.modules[load_operators(str(EXAMPLES / "conv2d.py"))[0].hand_schedule.__module__]


@pytest.mark.parametrize("m, r", [(m, r) for m in range(1, 8) for r in range(1, 6)
                                  if m + r - 1 <= 8])
def test_matrices_compute_the_correlation(m, r):
    AT, G, BT = cv.winograd_matrices(m, r)
    a = m + r - 1
    assert AT.shape == (m, a) and G.shape == (a, r) and BT.shape == (a, a)
    assert np.array_equal(BT, np.round(BT))           # the input transform: small integers
    rng = np.random.default_rng(m * 10 + r)
    for _ in range(5):
        d, g = rng.standard_normal(a), rng.standard_normal(r)
        want = np.array([d[i:i + r] @ g for i in range(m)])
        np.testing.assert_allclose(AT @ ((G @ g) * (BT @ d)), want, rtol=1e-12, atol=1e-12)


def test_f2_3_is_lavin_and_grays_up_to_row_scales():
    AT, _, BT = cv.winograd_matrices(2, 3)
    np.testing.assert_array_equal(AT, [[1, 1, 1, 0], [0, 1, -1, 1]])
    assert np.abs(BT).sum() == 8                      # 8 additions per 1-d transform


def test_matrices_refuse_tiles_beyond_the_points():
    with pytest.raises(ValueError, match="m \\+ r - 1 <= 8"):
        cv.winograd_matrices(7, 3)


def _direct(data, weight, pad):
    return cv.reference(data.astype(np.float64), weight.astype(np.float64), 1, pad)


CASES = [  # N, C, H, W, K, KH, KW, pad, m
    (1, 5, 9, 11, 6, 3, 3, 1, 4), (2, 3, 8, 8, 4, 3, 3, 1, 4), (1, 7, 13, 6, 5, 3, 3, 0, 4),
    (1, 4, 10, 17, 3, 3, 3, 2, 4), (1, 3, 9, 9, 2, 3, 3, 1, 2), (1, 3, 11, 14, 4, 3, 3, 1, 6),
    (1, 6, 7, 9, 5, 1, 1, 0, 4), (1, 2, 12, 10, 3, 5, 5, 2, 4), (1, 3, 9, 12, 4, 3, 1, 1, 4),
    (2, 1, 5, 5, 1, 3, 3, 1, 4), (1, 16, 3, 3, 16, 3, 3, 1, 4), (1, 2, 3, 4, 2, 3, 3, 0, 2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_winograd_conv2d_is_exact(case):
    """Against the direct convolution in float64: float32 within 2e-5 of the output's
    scale (F(6x6, 3x3) too), for odd sizes that leave partial tiles, N > 1, pads 0-2, 1x1,
    5x5 and 3x1 kernels."""
    N, C, H, W, K, KH, KW, pad, m = case
    args = (N, C, H, W, K, KH, KW, 1, pad)
    tk, tp = cv.winograd_tile(*args)
    s, tensors = cv._schedule_winograd(args, "float32", m, tk, tp)
    f = lt.build(s, tensors)
    rng = np.random.default_rng(sum(case))
    data = rng.standard_normal((N, C, H, W)).astype(np.float32)
    weight = rng.standard_normal((K, C, KH, KW)).astype(np.float32)
    want = _direct(data, weight, pad)
    out = np.full(want.shape, np.nan, np.float32)
    f(data, weight, out)
    scale = np.abs(want).max()
    assert np.abs(out - want).max() <= 2e-5 * scale * max(1, np.sqrt(C * KH * KW) / 4)


def test_winograd_conv2d_float64_and_the_hand_schedule_at_the_layer_size():
    args = (1, 64, 56, 56, 64, 3, 3, 1, 1)
    rng = np.random.default_rng(0)
    data = rng.standard_normal(args[:4])
    weight = rng.standard_normal((64, 64, 3, 3))
    s, tensors = cv.hand_schedule_winograd(*args[:-2], dtype="float64")
    out = np.empty((1, 64, 56, 56))
    lt.build(s, tensors)(data, weight, out)
    np.testing.assert_allclose(out, _direct(data, weight, 1), rtol=1e-9, atol=1e-9)
    s, tensors = cv.hand_schedule_winograd(*args)
    out32 = np.empty((1, 64, 56, 56), np.float32)
    lt.build(s, tensors)(data.astype(np.float32), weight.astype(np.float32), out32)
    want = _direct(data.astype(np.float32), weight.astype(np.float32), 1)
    assert np.abs(out32 - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("kw, match", [
    (dict(stride=2), "stride=2: Winograd convolution needs stride 1"),
    (dict(m=6, KH=5, KW=5), "m=6 with a 5x5 kernel makes input tiles of 10"),
    (dict(pad=0, H=2), "leaves no output"),
])
def test_where_winograd_does_not_apply_the_error_says_what_to_use(kw, match):
    args = dict(N=1, C=2, H=8, W=8, K=2, KH=3, KW=3, stride=1, pad=1, m=4)
    args.update(kw)
    m = args.pop("m")
    with pytest.raises(ValueError, match=match):
        cv.algorithm_winograd(**args, m=m)


@pytest.mark.parametrize("march, want", [("x86-64-v4", (8, 32)), ("x86-64-v3", (6, 16)),
                                         ("x86-64", (6, 8))])
def test_the_register_tile_is_sized_from_the_target(march, want):
    t = f"c -march={march}"
    assert cv.winograd_tile(1, 64, 56, 56, 64, 3, 3, 1, 1, target=t) == want
    assert cv.winograd_tile(1, 64, 56, 56, 3, 3, 3, 1, 1, target=t)[0] == 3   # K = 3 rows


def test_a_5x5_kernel_gets_the_largest_tile_that_fits():
    _, tensors = cv.hand_schedule_winograd(1, 2, 12, 12, 2, 5, 5, 1, 2)
    assert tensors[2].op.inputs[0].shape[0] == 4      # O1: m = 4 rows (input tiles of 8)
