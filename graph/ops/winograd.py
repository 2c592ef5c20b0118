"""Winograd's minimal filtering for convolutions (Lavin & Gray 2016), as tensor expressions.

- :func:`winograd_matrices` ``(m, r)``: the Toom-Cook matrices (AT, G, BT) of F(m, r).
- :func:`select_table` and :func:`coefficient_sum`: a row of coefficients as a chain of
  selects on an index (which folds to one branch where the index is a constant: an unrolled
  loop; the auto scheduler's coefficient-table rule unrolls it) and a sum of a few terms.
- ``WinogradNCHWc(x, u[, bias]; pads, m)``: the graph operator the layout pass emits for a
  3x3 stride-1 convolution (``graph/passes/layout.py``): x in NCHW{bc}c, u the weights
  transformed once at compile time (:func:`winograd_weights`), out in NCHW{bk}c.

``examples/conv2d.py``'s ``conv2d_winograd`` is the NCHW form with a hand schedule.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

import looptune as lt

from ..registry import OpDef, OpPattern, register
from ._util import same_dtype, te_name, tt

MAX_ALPHA = 8      # input tiles (m + r - 1) of at most 8: the coefficients grow with the points
# (up to 21 and 1/90 at 8) and so does the rounding error
DEFAULT_M = 4      # output tiles: F(4x4, 3x3) multiplies 4x fewer times than the direct form
_POINTS = (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2))   # + infinity


def winograd_matrices(m: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(AT, G, BT) of Winograd's minimal filtering F(m, r) by Toom-Cook: for any d of length
    m + r - 1 and g of length r, ``AT @ ((G @ g) * (BT @ d))`` is the correlation
    y[i] = sum_k d[i + k] g[k], i < m. AT (m x a) and G (a x r) evaluate the polynomials at
    the points 0, 1, -1, 2, -2, 1/2, -1/2 (the first a - 1) and infinity; BT (a x a) is the
    transposed interpolation, its rows scaled to integers (the scales go into G), so the
    input transform only adds and multiplies by small integers. Exact rational arithmetic,
    converted to float64 at the end."""
    a = m + r - 1
    if m < 1 or r < 1 or a > MAX_ALPHA:
        raise ValueError(f"winograd_matrices(m={m}, r={r}): needs m, r >= 1 and m + r - 1 <= "
                         f"{MAX_ALPHA}")
    pts = _POINTS[:a - 1]

    def evaluation(cols: int) -> list[list[Fraction]]:
        rows = [[Fraction(p) ** k for k in range(cols)] for p in pts]
        return rows + [[Fraction(int(k == cols - 1)) for k in range(cols)]]
    bt = [list(col) for col in zip(*_inverse(evaluation(a)))]   # interpolation, transposed
    g = evaluation(r)
    for j in range(a):                                # BT's row j integral, G's row j / scale
        scale = Fraction(math.lcm(*(v.denominator for v in bt[j])),
                         math.gcd(*(v.numerator for v in bt[j])))
        bt[j] = [v * scale for v in bt[j]]
        g[j] = [v / scale for v in g[j]]
    at = [list(col) for col in zip(*evaluation(m))]

    def f64(rows):
        return np.array([[float(v) for v in row] for row in rows])
    return f64(at), f64(g), f64(bt)


def _inverse(rows: list[list[Fraction]]) -> list[list[Fraction]]:
    """The inverse of a square matrix of Fractions (Gauss-Jordan, exact)."""
    n = len(rows)
    aug = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(rows)]
    for col in range(n):
        piv = next(r for r in range(col, n) if aug[r][col] != 0)
        aug[col], aug[piv] = aug[piv], aug[col]
        aug[col] = [v / aug[col][col] for v in aug[col]]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                f = aug[r][col]
                aug[r] = [x - f * y for x, y in zip(aug[r], aug[col])]
    return [row[n:] for row in aug]


def coefficient_sum(terms):
    """sum(coef * x) over ``terms`` ((coef, expr) pairs) with a non-zero coefficient; +-1
    without a multiply (no 0 * x, which the compiler must keep for NaN)."""
    e = None
    for coef, x in terms:
        if coef == 0:
            continue
        if e is not None and coef < 0:
            e = e - (x if coef == -1 else x * float(-coef))
        else:
            t = x if coef == 1 else (-x if coef == -1 else x * float(coef))
            e = t if e is None else e + t
    return e if e is not None else 0.0


def select_table(i, n: int, value):
    """``value(i)`` for an index expression ``i`` in [0, n): a chain of selects on
    ``i == 0``, ``i == 1``, ..., which folds to one branch where ``i`` is a constant."""
    e = None
    for a in reversed(range(n)):
        v = value(a)
        e = v if e is None else lt.if_then_else(lt.equal(i, a), v, e)
    return e


def winograd_weights(w: np.ndarray, m: int) -> np.ndarray:
    """Blocked weights (K/bk, C/bc, KH, KW, bc, bk) transformed for F(m x m, KH x KW):
    u[a, b, ko, co, ci, ki] = (G w[ko, co, :, :, ci, ki] G^T)[a, b], in float64 (cast by
    the caller)."""
    kh, kw = w.shape[2:4]
    _, gh, _ = winograd_matrices(m, kh)
    _, gw, _ = winograd_matrices(m, kw)
    return np.einsum("ai,bj,kcijxy->abkcxy", gh, gw, w.astype(np.float64))


# ---- WinogradNCHWc -------------------------------------------------------------------------


def _attrs(ctx) -> tuple[list[int], int]:
    pads, m = list(ctx.attrs["pads"] or (0, 0, 0, 0)), ctx.attrs["m"]
    if len(pads) != 4 or min(pads) < 0 or not isinstance(m, int) or m < 1:
        raise ctx.error(f"pads {pads} and m={m}: 4 pads >= 0 and an output tile m >= 1")
    return pads, m


def _kernel(ctx, u_shape, m: int) -> tuple[int, int]:
    kh, kw = u_shape[0] - m + 1, u_shape[1] - m + 1
    if kh < 1 or kw < 1 or max(u_shape[:2]) > MAX_ALPHA:
        raise ctx.error(f"transformed weights of tiles {u_shape[0]}x{u_shape[1]} do not fit "
                        f"m={m} (tiles of m + kernel - 1 <= {MAX_ALPHA})")
    return kh, kw


def _infer(ctx):
    d = same_dtype(ctx, ("float32", "float64"))
    x, u = ctx.in_types[0].shape, ctx.in_types[1].shape
    pads, m = _attrs(ctx)
    if len(x) != 5 or len(u) != 6 or u[3] != x[1] or u[4] != x[4]:
        raise ctx.error(f"input {list(x)} and transformed weights {list(u)} are not "
                        "NCHW{bc}c data and (a, a, K/bk, C/bc, bc, bk) weights of its blocks")
    if ctx.has_input(2) and ctx.in_types[2].shape != (u[2], u[5]):
        raise ctx.error(f"bias shape {list(ctx.in_types[2].shape)} should be {[u[2], u[5]]}")
    kh, kw = _kernel(ctx, u, m)
    oh = x[2] + pads[0] + pads[2] - kh + 1
    ow = x[3] + pads[1] + pads[3] - kw + 1
    if oh < 1 or ow < 1:
        raise ctx.error(f"the {kh}x{kw} kernel does not fit the {x[2]}x{x[3]} input")
    return [tt((x[0], u[2], oh, ow, u[5]), d)]


def _reference(ctx, xs):
    """Winograd in float64 numpy, tile by tile (an oracle independent of the compute)."""
    x, u = xs[0].astype(np.float64), xs[1].astype(np.float64)
    (pt, pl, pb, pr), m = _attrs(ctx)
    kh, kw = _kernel(ctx, u.shape, m)
    ath, _, bth = winograd_matrices(m, kh)
    atw, _, btw = winograd_matrices(m, kw)
    n, _, h, w, _ = x.shape
    oh, ow = h + pt + pb - kh + 1, w + pl + pr - kw + 1
    nh, nw = -(-oh // m), -(-ow // m)
    xp = np.zeros((n, x.shape[1], nh * m + kh - 1, nw * m + kw - 1, x.shape[4]))
    xp[:, :, pt:pt + h, pl:pl + w] = x
    out = np.zeros((n, u.shape[2], nh * m, nw * m, u.shape[5]))
    for ty in range(nh):
        for tx in range(nw):
            d = xp[:, :, ty * m:ty * m + m + kh - 1, tx * m:tx * m + m + kw - 1]
            v = np.einsum("ai,bj,ncijx->abncx", bth, btw, d)
            mm = np.einsum("abncx,abkcxy->abnky", v, u)
            out[:, :, ty * m:ty * m + m, tx * m:tx * m + m] = np.einsum(
                "ia,jb,abnky->nkijy", ath, atw, mm)
    out = out[:, :, :oh, :ow]
    if len(xs) > 2 and xs[2] is not None:
        out = out + xs[2].astype(np.float64)[None, :, None, None, :]
    return [out.astype(xs[0].dtype)]


def _compute(ctx, ts):
    X, U = ts[0], ts[1]
    B = ts[2] if len(ts) > 2 else None
    (pt, pl, pb, pr), m = _attrs(ctx)
    ah, aw, kb, cb, bc, bk = U.shape
    kh, kw = ah - m + 1, aw - m + 1
    ath, _, bth = winograd_matrices(m, kh)
    atw, _, btw = winograd_matrices(m, kw)
    n_, _, h, w, _ = X.shape
    shape = ctx.out_types[0].shape
    oh, ow = shape[2], shape[3]
    nh, nw = -(-oh // m), -(-ow // m)
    P = n_ * nh * nw
    hp, wp = nh * m + kh - 1, nw * m + kw - 1

    def padded(n, c, y, x, i):
        inside = lt.all(y >= pt, y < h + pt, x >= pl, x < w + pl)
        return lt.if_then_else(inside, X[n, c, y - pt, x - pl, i], lt.const(0, X.dtype))
    dp = lt.compute((n_, cb, hp, wp, bc), padded, name=te_name(ctx, "pad"))
    t1 = lt.compute((ah, n_, cb, nh, wp, bc), lambda a, n, c, yt, x, i: select_table(
        a, ah, lambda a_: coefficient_sum(
            [(bth[a_, r], dp[n, c, yt * m + r, x, i]) for r in range(ah)])),
        name=te_name(ctx, "wino_rows"))

    def v_body(a, b, p, c, i):
        n, t = p // (nh * nw), p % (nh * nw)
        return select_table(b, aw, lambda b_: coefficient_sum(
            [(btw[b_, s], t1[a, n, c, t // nw, (t % nw) * m + s, i]) for s in range(aw)]))
    V = lt.compute((ah, aw, P, cb, bc), v_body, name=te_name(ctx, "wino_in"))
    rc, ri = lt.reduce_axis(cb, name="rc"), lt.reduce_axis(bc, name="ri")
    M = lt.compute((ah, aw, P, kb, bk), lambda a, b, p, k, j: lt.sum(
        V[a, b, p, rc, ri] * U[a, b, k, rc, ri, j], axis=[rc, ri]),
        name=te_name(ctx, "wino_prod"))
    o1 = lt.compute((m, aw, P, kb, bk), lambda i, b, p, k, j: select_table(
        i, m, lambda i_: coefficient_sum([(ath[i_, a], M[a, b, p, k, j]) for a in range(ah)])),
        name=te_name(ctx, "wino_rows_out"))

    def out_body(n, k, y, x, j):
        p = n * nh * nw + (y // m) * nw + x // m
        v = select_table(x % m, m, lambda x_: coefficient_sum(
            [(atw[x_, b], o1[y % m, b, p, k, j]) for b in range(aw)]))
        return v + B[k, j] if B is not None else v
    return [lt.compute(shape, out_body, name=te_name(ctx))]


register(OpDef("WinogradNCHWc", OpPattern.OUT_ELEMWISE_FUSABLE, _infer, _reference, _compute,
               attrs={"pads": None, "m": DEFAULT_M}, inputs=(2, 3),
               doc="2-D stride-1 convolution on NCHW{b}c data by Winograd F(m x m, r x r), "
                   "weights transformed once (winograd_weights)"))
