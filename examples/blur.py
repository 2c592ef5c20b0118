"""Two-stage 3x3 box blur (Halide's classic): blur_x over rows, then blur_y over columns.

Hand schedule: blur_y is cut into 2-D tiles of ``TILE_ROWS`` x ``TILE_COLS`` (4 x 32), the
tiles fused into one parallel loop, each tile's rows vectorized, and blur_x is computed per
tile into a 6 x 32 buffer (768 bytes, in L1) that the tile's 4 output rows read. The input
is read from memory about once and nothing is written but the output.

Why 4 rows: a tile reads rows + 2 input rows and writes rows output rows, each a short run
of 2 cache lines, so the rows of a tile are as many memory streams at once; our reading (not
measured with counters) is that the hardware prefetchers follow only so many. On a 2-core
AMD EPYC VM (Zen 3, family 25 model 1, AVX2, 32 KiB L1d, 512 KiB L2 per core), 4096^2, 2
threads, in one process, 5 interleaved rounds: 16 x 32 tiles (the hand schedule until
2026-12-02) 25.2 ms, 8 x 32 12.1, 6 x 32 12.7, **4 x 32 9.3**, 4 x 64 9.7, 4 x 256 14.0, 16
x 512 12.5; blur_x inlined into whole rows: 4 rows 9.4, 8 rows streamed 8.9 (the machine's y
= 2x floor: 8.2 ms). The same 16 x 32 tiles with W = 4000 ran as slowly (26.1 ms): not
cache-set aliasing of the 16 KiB row stride. On Intel Xeons (below) 16 rows measured best,
so 16 rows and whole-row tiles stay in the template (``rows_scale`` 4, ``tile_x`` = W) for
`looptune tune` to pick on such a machine.

Measured on a 2-core Intel Xeon VM (model 167, AVX-512, 512-bit vectors) with 16-row tiles,
against blur_x inlined into 8 x 64 tiles (each output point recomputing the three blur_x
values it reads, four exact divisions per point instead of 2.1): 4.82 -> 4.47 ms at 4096^2,
2 threads, in one process, 20 interleaved blocks of 5 calls; 16 x 64 4.53, 8 x 64 4.77,
24 x 64 4.79. Streaming stores do not pay with tiles this narrow (each row of a tile is 2
cache lines).

The inlined 8 x 64 tiles, measured on Emerald Rapids before the backend used 512-bit vectors:
2 threads, A/B interleaved in one process (median of 30-60 calls), 2-core Emerald
Rapids (AVX-512, 48 KiB L1d, 2 MiB L2 per core), against the former hand schedule (blur_x
computed per strip of 62-126 rows, held in L2, streamed output): 4096^2 5.25 vs 6.83 ms,
2048^2 1.37 vs 1.92, 1024^2 0.358 vs 0.563. Other tiles at 4096^2: 8 x 32 5.39, 16 x 64 5.48,
8 x 128 5.67, 4 x 256 6.13, 32 x 64 6.61, whole rows of 4 6.66; 4 x 64 streamed 12.6. Built
for AVX2 (``-march=haswell``, same machine) every variant ran 10.0-10.3 ms, the former hand
schedule too: there the arithmetic, not memory, bounds it. The template keeps the strip
schedule (knob ``blur_x_at`` = "strip": (rows + 2) rows of blur_x within half of L2 per
parallel strip, ``strip_rows``), blur_x inlined into the tiles or at root, and streaming
stores.
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


def strip_rows(H: int, W: int, dtype: str = "float32", target: str = "c") -> int:
    """Rows per strip: (rows + 2) rows of blur_x within half of L2, at least 8, and at most an
    equal share of the rows per thread."""
    t = lt.Target.parse(target)
    fit = t.cache_bytes(2) // 2 // (max(W, 1) * np.dtype(dtype).itemsize) - 2
    return max(1, min(max(fit, 8), -(-H // t.threads())))


def _strips(H, W, dtype, rows, stream=False):
    inp, by = algorithm(H, W, dtype)
    bx = by.op.inputs[0]
    s = lt.create_schedule(by)
    y, x = s[by].op.axis
    yo, _yi = s[by].split(y, factor=rows)
    s[by].parallel(yo)
    if stream:     # non-temporal stores: the output is written once and not read back here
        s[by].stream(x)
    else:
        s[by].vectorize(x)
    return s, inp, bx, by, yo


TILE_ROWS, TILE_COLS = 4, 32     # the hand schedule's tile of blur_y (see the module doc)


def _tiles(H, W, dtype, rows, cols, stream=False):
    """blur_y in ``rows`` x ``cols`` tiles, the tiles one parallel loop; returns the
    schedule, the tensors and blur_y's tile loop (where blur_x may be computed)."""
    inp, by = algorithm(H, W, dtype)
    bx = by.op.inputs[0]
    s = lt.create_schedule(by)
    y, x = s[by].op.axis
    yo, xo, _yi, xi = s[by].tile(y, x, rows, cols)
    if stream:
        s[by].stream(xi)
    else:
        s[by].vectorize(xi)
    tile = s[by].fuse(yo, xo)
    s[by].parallel(tile)
    return s, inp, bx, by, tile


SLIDE_ROWS = 32     # rows per strip of the sliding-window schedule (knob rows_scale scales it)


def slide_schedule(H: int, W: int, dtype: str = "float32", rows: int = SLIDE_ROWS,
                   cols: int | None = None, stream: bool = True):
    """Sliding window (store_at): blur_y in parallel strips of ``rows`` rows (of ``cols``
    columns when fewer than W), blur_x computed per output row and stored per strip, so
    each row of blur_x is computed once per strip (two exact divisions per point instead
    of 1 + 3 when inlined) into a 4-row buffer indexed modulo 4."""
    if cols is not None and cols < W:
        s, inp, bx, by, strip = _tiles(H, W, dtype, rows, cols, stream)
    else:
        s, inp, bx, by, strip = _strips(H, W, dtype, rows, stream)
    s[bx].compute_at(s[by], s[by].loop("y.inner"))    # blur_y's row within the strip
    s[bx].store_at(s[by], strip)
    s[bx].vectorize(s[bx].op.axis[1])
    return s, [inp, by]


def hand_schedule(H: int, W: int, dtype: str = "float32", target: str = "c"):
    s, inp, bx, by, tile = _tiles(H, W, dtype, TILE_ROWS, TILE_COLS)
    s[bx].compute_at(s[by], tile)          # (rows + 2) x cols of blur_x per tile, in L1
    s[bx].vectorize(s[bx].op.axis[1])
    return s, [inp, by]


@lt.template(NAME)
def template(cfg, H: int, W: int, dtype: str = "float32"):
    """Where blur_x is computed (per tile of blur_y, inlined into the tiles, per strip of
    rows, whole at root, or per row stored per strip: ``slide_schedule``), the rows per
    tile or strip (a factor of ``TILE_ROWS``, of the half-L2-sized strip, or of
    ``SLIDE_ROWS``), the tile width and streaming stores for the output; the fallback config
    (first value of each knob) is the hand schedule."""
    cfg.define_knob("blur_x_at", ["tile", "inline", "strip", "root", "slide"])
    cfg.define_knob("rows_scale", [1, 0.5, 2, 4, 0.25])
    cfg.define_knob("tile_x", list(dict.fromkeys([TILE_COLS, 64, 256, 512, W])))
    cfg.define_knob("stream", [False, True])
    where, stream = cfg["blur_x_at"].val, cfg["stream"].val
    if where in ("inline", "tile"):
        base = TILE_ROWS
        rows = max(1, int(base * cfg["rows_scale"].val))
        s, inp, bx, by, tile = _tiles(H, W, dtype, rows, cfg["tile_x"].val, stream)
        if where == "inline":
            s[bx].compute_inline()
        else:
            s[bx].compute_at(s[by], tile)
            s[bx].vectorize(s[bx].op.axis[1])
        return s, [inp, by]
    if where == "slide":
        rows = max(1, int(SLIDE_ROWS * cfg["rows_scale"].val))
        return slide_schedule(H, W, dtype, rows, cfg["tile_x"].val, stream)
    rows = max(1, int(strip_rows(H, W, dtype) * cfg["rows_scale"].val))
    s, inp, bx, by, yo = _strips(H, W, dtype, rows, stream)
    if where == "strip":
        s[bx].compute_at(s[by], yo)
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
