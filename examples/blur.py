"""Two-stage 3x3 box blur (Halide's classic): blur_x over rows, then blur_y over columns.

Hand schedule: blur_y is tiled 32 rows x 256 columns; blur_x is computed per tile
(compute_at), just the 34 x 256 rows it needs, so it stays in L1/L2 instead of round-tripping
through memory; both stages vectorize their inner columns; tiles of rows go to threads.
"""
from __future__ import annotations

import numpy as np

import looptune as lt

NAME = "blur"
DEFAULT_ARGS = (4096, 4096)


def algorithm(H: int, W: int, dtype: str = "float32"):
    """Input (H+2, W+2) -> output (H, W). Returns [I, blur_y]."""
    inp = lt.placeholder((H + 2, W + 2), dtype, name="I")
    bx = lt.compute((H + 2, W), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3.0,
                    name="blur_x")
    by = lt.compute((H, W), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0,
                    name="blur_y")
    return [inp, by]


def hand_schedule(H: int, W: int, dtype: str = "float32"):
    inp, by = algorithm(H, W, dtype)
    bx = by.op.inputs[0]
    s = lt.create_schedule(by)
    y, x = s[by].op.axis
    yo, xo, yi, xi = s[by].tile(y, x, 32, 256)
    s[by].vectorize(xi)
    s[by].parallel(yo)
    s[bx].compute_at(s[by], xo)
    s[bx].vectorize(s[bx].op.axis[1])
    return s, [inp, by]


@lt.template(NAME)
def template(cfg, H: int, W: int, dtype: str = "float32"):
    """Tile shape and where blur_x is computed (per tile, inlined into blur_y, or whole at
    root); the fallback config (first value of each knob) is the hand schedule."""
    cfg.define_knob("tile_y", [32, 8, 16, 64, 128])
    cfg.define_knob("tile_x", [256, 64, 128, 512])
    cfg.define_knob("blur_x_at", ["tile", "inline", "root"])
    inp, by = algorithm(H, W, dtype)
    bx = by.op.inputs[0]
    s = lt.create_schedule(by)
    y, x = s[by].op.axis
    yo, xo, _yi, xi = s[by].tile(y, x, cfg["tile_y"].val, cfg["tile_x"].val)
    s[by].vectorize(xi)
    s[by].parallel(yo)
    where = cfg["blur_x_at"].val
    if where == "inline":
        s[bx].compute_inline()
    else:
        if where == "tile":
            s[bx].compute_at(s[by], xo)
        else:
            s[bx].parallel(s[bx].op.axis[0])
        s[bx].vectorize(s[bx].op.axis[1])
    return s, [inp, by]


def reference(img: np.ndarray) -> np.ndarray:
    bx = (img[:, :-2] + img[:, 1:-1] + img[:, 2:]) / np.float32(3)
    return (bx[:-2] + bx[1:-1] + bx[2:]) / np.float32(3)


def main(args=DEFAULT_ARGS) -> None:
    s, tensors = hand_schedule(*args)
    print(lt.lower(s, tensors))
    f = lt.build(s, tensors, name="blur")
    H, W = args
    img = np.random.default_rng(0).random((H + 2, W + 2), dtype=np.float32)
    out = np.empty((H, W), np.float32)
    f(img, out)
    np.testing.assert_allclose(out, reference(img), rtol=1e-5, atol=1e-6)
    t = f.time(img, out, number=3, repeat=7)
    tn = lt.backends.module.time_callable(lambda: reference(img), 3, 7)
    print(f"looptune {t.median * 1e3:8.2f} ms")
    print(f"numpy    {tn.median * 1e3:8.2f} ms")
    print(f"speedup over numpy: {tn.median / t.median:.2f}x")


if __name__ == "__main__":
    main()
