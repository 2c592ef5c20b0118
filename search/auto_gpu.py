"""The auto scheduler's OpenCL rules (package-private; see :mod:`.auto`): one work-item per
output element, the last two spatial loops split into work-groups x work-items, the reduction
loops in each work-item."""
from __future__ import annotations

from .auto_rules import Epilogue, extent, long_axes


def define_split(cfg, knob: str, loop, max_factor: int) -> None:
    """Split ``loop`` in two: by its divisors up to ``max_factor``, or, where it has few
    (a prime extent), by powers of two with a guarded tail."""
    ext = extent(loop)
    divisors = sum(1 for d in range(2, min(ext, max_factor) + 1) if ext % d == 0)
    if divisors >= 2:
        cfg.define_split(knob, loop, num_outputs=2, max_factor=max_factor)
    else:
        cfg.define_split(knob, loop, num_outputs=2, policy="power2", max_factor=max_factor,
                         allow_non_divisible=True)


def _gpu_axes(op) -> list[int]:
    """The spatial loops the work-group sketch splits (the last one at least)."""
    return long_axes(op) or [len(op.axis) - 1]


def gpu_knobs(cfg, op, name: str, cacheable: bool) -> None:
    if not op.axis:
        return
    tiled = _gpu_axes(op)
    if cacheable:
        cfg.define_knob(f"{name}.cache", [False, True])
    cfg.define_split(f"{name}.tx", op.axis[tiled[-1]], num_outputs=2, policy="power2",
                     max_factor=64, allow_non_divisible=True)
    if len(tiled) >= 2:
        cfg.define_split(f"{name}.ty", op.axis[tiled[-2]], num_outputs=2, policy="power2",
                         max_factor=16, allow_non_divisible=True)
    for k, r in enumerate(op.reduce_axis):
        define_split(cfg, f"{name}.red{k}", r, 16)
    if op.reduce_axis:
        cfg.define_knob(f"{name}.unroll", [False, True])


def gpu_bind(cfg, s, T, name: str, contraction: bool, epi: Epilogue | None = None) -> None:
    """One work-item per output element (of the epilogue, where the contraction has one):
    the last two spatial loops split into work-groups x work-items (blockIdx/threadIdx y and
    x), the other spatial loops fused into blockIdx.y; the reduction loops run in each
    work-item (split, the inner part optionally unrolled), accumulating in a private buffer
    (knob ``cache``) or in the output. The epilogue's loops are split by the knobs of the
    contraction's loops they map to."""
    op = s[T].op
    if not op.axis:
        return
    tiled = _gpu_axes(op)
    CC = None
    if epi is not None:
        CC, T = T, epi.out.tensor
        tiled = [epi.axis_of[c] for c in tiled]
    elif contraction and cfg[f"{name}.cache"].val:
        CC = s.cache_write(T, "local")
    axes = list(s[T].op.axis)
    bx, tx = cfg[f"{name}.tx"].apply(s, T, axes[tiled[-1]])
    rest = [a for k, a in enumerate(axes) if k != tiled[-1] and
            (len(tiled) < 2 or k != tiled[-2])]
    if len(tiled) >= 2:
        by, ty = cfg[f"{name}.ty"].apply(s, T, axes[tiled[-2]])
        s[T].reorder(*rest, by, bx, ty, tx)
        outer = rest + [by]
        s[T].bind(outer[0] if len(outer) == 1 else s[T].fuse(*outer), "blockIdx.y")
        s[T].bind(bx, "blockIdx.x")
        s[T].bind(ty, "threadIdx.y")
    else:
        s[T].reorder(*rest, bx, tx)
        outer = rest + [bx]
        s[T].bind(outer[0] if len(outer) == 1 else s[T].fuse(*outer), "blockIdx.x")
    s[T].bind(tx, "threadIdx.x")
    R = T
    if CC is not None:
        s[CC].compute_at(s[T], tx)
        R = CC
    red = list(s[R].op.reduce_axis)
    inner = []
    for k, r in enumerate(red):
        _, ri = cfg[f"{name}.red{k}"].apply(s, R, r)
        inner.append(ri)
    if red and cfg[f"{name}.unroll"].val and inner:
        s[R].unroll(inner[-1])
