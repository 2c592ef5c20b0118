"""Stencils: Halide's two-stage 3x3 blur and an NCHW conv2d with padding and stride 2, under the
default schedule and hand schedules (compute_at at outer, middle and innermost loops, inline,
root, tiles that do not divide the image). Differential against numpy."""
from __future__ import annotations

import pytest
from util import blur, conv2d


# ---- blur ----------------------------------------------------------------------------------

def _blur_tiles(s, w, ty=8, tx=16):
    by = w["blur_y"]
    y, x = s[by].op.axis
    return s[by].tile(y, x, ty, tx)


def _blur_at(level: str, vec: bool = True):
    def sched(s, w):
        yo, xo, yi, xi = _blur_tiles(s, w)
        loops = {"yo": yo, "xo": xo, "yi": yi, "xi": xi}
        bx = w["blur_x"]
        s[bx].compute_at(s[w["blur_y"]], loops[level])
        if vec and level != "xi":
            s[w["blur_y"]].vectorize(xi)
    return sched


def _blur_halide_classic(s, w):
    """tile(x, y, xo, yo, xi, yi, 256, 32).vectorize(xi, 8).parallel(yo); compute_at x."""
    by, bx = w["blur_y"], w["blur_x"]
    yo, xo, yi, xi = _blur_tiles(s, w, 8, 32)
    xio, xii = s[by].split(xi, factor=8)
    s[by].vectorize(xii)
    s[by].parallel(yo)
    s[bx].compute_at(s[by], xo)
    y, x = s[bx].op.axis
    xo2, xi2 = s[bx].split(x, factor=8)
    s[bx].vectorize(xi2)


def _blur_at_rows(s, w):
    """compute_at blur_y's untransformed row loop (a sliding window of 3 rows each)."""
    by, bx = w["blur_y"], w["blur_x"]
    y, x = s[by].op.axis
    s[bx].compute_at(s[by], y)
    s[by].vectorize(x)


def _blur_at_innermost_untiled(s, w):
    by, bx = w["blur_y"], w["blur_x"]
    y, x = s[by].op.axis
    s[bx].compute_at(s[by], x)


def _blur_inline(s, w):
    by, bx = w["blur_y"], w["blur_x"]
    s[bx].compute_inline()
    y, x = s[by].op.axis
    xo, xi = s[by].split(x, factor=8)
    s[by].vectorize(xi)
    s[by].parallel(y)


def _blur_root_scheduled(s, w):
    by, bx = w["blur_y"], w["blur_x"]
    s[bx].compute_root()
    y, x = s[bx].op.axis
    f = s[bx].fuse(y, x)
    fo, fi = s[bx].split(f, factor=16)
    s[bx].parallel(fo)
    s[bx].vectorize(fi)
    yy, xx = s[by].op.axis
    yo, yi = s[by].split(yy, nparts=3)
    s[by].reorder(yo, xx, yi)
    s[by].unroll(yi)


def _blur_at_after_fuse(s, w):
    by, bx = w["blur_y"], w["blur_x"]
    yo, xo, yi, xi = _blur_tiles(s, w, 5, 7)
    t = s[by].fuse(yo, xo)
    s[by].parallel(t)
    s[bx].compute_at(s[by], t)
    s[by].unroll(yi)


BLUR = {
    "default": lambda s, w: None,
    "at_outer_yo": _blur_at("yo"),
    "at_middle_xo": _blur_at("xo"),
    "at_yi": _blur_at("yi"),
    "at_innermost_xi": _blur_at("xi"),
    "halide_classic": _blur_halide_classic,
    "at_rows": _blur_at_rows,
    "at_innermost_untiled": _blur_at_innermost_untiled,
    "inline": _blur_inline,
    "root_scheduled": _blur_root_scheduled,
    "at_fused_tile": _blur_at_after_fuse,
}


@pytest.mark.parametrize("name", BLUR)
@pytest.mark.slow
def test_blur(name):
    w = blur(37, 53)
    s = w.schedule()
    BLUR[name](s, w)
    w.check(s)


# ---- conv2d --------------------------------------------------------------------------------

def _conv_tiled(s, w):
    Y = w["conv"]
    n, f, y, x = s[Y].op.axis
    rc, ry, rx = s[Y].op.reduce_axis
    yo, xo, yi, xi = s[Y].tile(y, x, 3, 4)
    s[Y].reorder(n, f, yo, xo, rc, ry, yi, rx, xi)
    s[Y].vectorize(xi)
    s[Y].unroll(rx)
    s[Y].parallel(f)
    return yo, xo


def _conv_pad_inline(s, w):
    _conv_tiled(s, w)
    s[w["Xpad"]].compute_inline()


def _conv_pad_at(level):
    def sched(s, w):
        Y = w["conv"]
        yo, xo = _conv_tiled(s, w)
        loops = {"f": s[Y].op.axis[1], "yo": yo, "xo": xo}
        s[w["Xpad"]].compute_at(s[Y], loops[level])
    return sched


def _conv_pad_at_reduction(s, w):
    Y = w["conv"]
    n, f, y, x = s[Y].op.axis
    rc, ry, rx = s[Y].op.reduce_axis
    s[Y].reorder(n, f, y, rc, x, ry, rx)
    s[w["Xpad"]].compute_at(s[Y], rc)
    s[Y].unroll(rx)


def _conv_fused_parallel(s, w):
    Y = w["conv"]
    n, f, y, x = s[Y].op.axis
    nf = s[Y].fuse(n, f)
    s[Y].parallel(nf)
    rc, ry, rx = s[Y].op.reduce_axis
    xo, xi = s[Y].split(x, nparts=2)
    s[Y].reorder(nf, y, xo, rc, ry, rx, xi)
    s[Y].unroll(ry)
    s[Y].vectorize(xi)
    p = w["Xpad"]
    s[p].compute_root()
    pn, pc, ph, pw = s[p].op.axis
    s[p].parallel(s[p].fuse(pn, pc))
    s[p].vectorize(pw)


CONV = {
    "default": lambda s, w: None,
    "tiled_pad_root": _conv_tiled,
    "pad_inline": _conv_pad_inline,
    "pad_at_outer_f": _conv_pad_at("f"),
    "pad_at_yo": _conv_pad_at("yo"),
    "pad_at_xo": _conv_pad_at("xo"),
    "pad_at_reduction_rc": _conv_pad_at_reduction,
    "fused_parallel": _conv_fused_parallel,
}


@pytest.mark.parametrize("name", CONV)
@pytest.mark.slow
def test_conv2d_pad1_stride2(name):
    w = conv2d(N=2, C=3, H=17, W=19, F=5, R=3, stride=2, pad=1)
    s = w.schedule()
    CONV[name](s, w)
    w.check(s)


@pytest.mark.parametrize("name", ["default", "pad_at_xo", "pad_inline"])
def test_conv2d_pad2_stride1(name):
    w = conv2d(N=1, C=2, H=11, W=13, F=3, R=5, stride=1, pad=2)
    s = w.schedule()
    CONV[name](s, w)
    w.check(s)
