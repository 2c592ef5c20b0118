"""Sliding-window geometry shared by Conv and the pools: ONNX's kernel_shape, strides, pads,
dilations, auto_pad and ceil_mode turned into output sizes and explicit pads."""
from __future__ import annotations

from dataclasses import dataclass

import looptune as lt

from ..registry import OpCall
from ._util import int_list

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclass(frozen=True)
class Window:
    """Per spatial axis: kernel size, stride, dilation, pads before and after (as ONNX gives or
    auto_pad derives them), the output size, and ``tail``: extra elements past the end pad
    that a ceil_mode window may reach (they count as padding for the maximum and are outside
    every average's divisor)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    end: tuple[int, ...]
    out: tuple[int, ...]
    tail: tuple[int, ...]


def auto_pad_of(ctx: OpCall) -> str:
    v = ctx.attrs.get("auto_pad", "NOTSET")
    v = v.decode() if isinstance(v, bytes) else str(v)
    if v not in AUTO_PADS:
        raise ctx.error(f"auto_pad={v!r} is not one of {', '.join(AUTO_PADS)}")
    return v


def _per_axis(ctx: OpCall, name: str, n: int, default: int, lo: int) -> list[int]:
    v = ctx.attrs.get(name)
    vals = [default] * n if v is None else int_list(ctx, name, v)
    if len(vals) != n:
        raise ctx.error(f"{name}={vals} must have {n} entries (one per spatial axis"
                        f"{', begin then end' if name == 'pads' else ''})")
    if any(x < lo for x in vals):
        raise ctx.error(f"{name}={vals} must be >= {lo}")
    return vals


def window(ctx: OpCall, spatial: tuple[int, ...], kernel: list[int],
           ceil_mode: bool = False) -> Window:
    """The window of a Conv or pool over input ``spatial`` sizes with ``kernel``."""
    nd = len(spatial)
    strides = _per_axis(ctx, "strides", nd, 1, 1)
    dil = _per_axis(ctx, "dilations", nd, 1, 1)
    pads = _per_axis(ctx, "pads", 2 * nd, 0, 0)
    mode = auto_pad_of(ctx)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    if mode != "NOTSET" and any(pads):
        raise ctx.error(f"pads={pads} and auto_pad={mode} are both given; give one of them")
    begin, end, out = list(pads[:nd]), list(pads[nd:]), []
    for d in range(nd):
        n, s = spatial[d], strides[d]
        if mode in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // s)
            total = max(0, (o - 1) * s + span[d] - n)
            small, big = total // 2, total - total // 2
            begin[d], end[d] = (small, big) if mode == "SAME_UPPER" else (big, small)
        else:
            full = n + begin[d] + end[d] - span[d]
            o = (-(-full // s) if ceil_mode else full // s) + 1 if full >= 0 else 0
            if ceil_mode and o > 0 and (o - 1) * s >= n + begin[d]:
                o -= 1           # the last window must start inside the input or its begin pad
        if o < 1:
            raise ctx.error(f"the window (kernel {kernel}, dilations {dil}) does not fit "
                            f"spatial axis {d} of size {n} with pads ({begin[d]}, {end[d]}); "
                            "pad the input or use a smaller kernel")
        out.append(o)
    tail = [max(0, (o - 1) * s + sp - (n + b + e))
            for o, s, sp, n, b, e in zip(out, strides, span, spatial, begin, end)]
    return Window(tuple(kernel), tuple(strides), tuple(dil), tuple(begin), tuple(end),
                  tuple(out), tuple(tail))


def window_count(w: Window, d: int, o, lo: int, hi: int):
    """How many taps of the window at output position ``o`` (an int or an index expression)
    along spatial axis ``d`` fall in [lo, hi) of the unpadded input's coordinates."""
    s, k, dil, b = w.strides[d], w.kernel[d], w.dilations[d], w.begin[d]
    start = o * s - b
    first = (lo - start + dil - 1) // dil
    last = (hi - 1 - start) // dil
    if isinstance(o, int):
        return max(0, min(k - 1, last) - max(0, first) + 1)
    n = lt.min(last, k - 1) - lt.max(first, 0) + 1
    return lt.max(n, 0)
