"""Where a stage is computed: its attach point.

``Attach.ROOT`` (the whole tensor before its consumers, the default), ``Attach.INLINE`` (its
body substituted into its consumers, no loops or buffer) or ``AttachAt(stage, loop)`` (the
region one iteration of ``stage``'s ``loop`` reads, computed inside that loop). Match on them:

    match st.attach:
        case Attach.ROOT: ...
        case Attach.INLINE: ...
        case AttachAt(host, loop): ...
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..lang.expr import IterVar

if TYPE_CHECKING:
    from .stage import Stage


class Attach(enum.Enum):
    ROOT = "root"
    INLINE = "inline"

    def __str__(self) -> str:
        return "computed at root" if self is Attach.ROOT else "inlined"


@dataclass(frozen=True, slots=True)
class AttachAt:
    """Computed inside ``stage``'s leaf loop ``loop`` (set by ``compute_at``)."""

    stage: Stage
    loop: IterVar

    def __str__(self) -> str:
        return f"computed at {self.stage.name}.{self.loop.name}"


AttachPoint = Attach | AttachAt


def enclosing_hosts(st: Stage):
    """Up the compute_at chain of ``st``, nearest first: (the stage attached, its host, the
    host's leaf loops that enclose the attach point, outermost first, or None where the attach
    loop is no longer a leaf: split or fused after compute_at)."""
    cur = st
    while isinstance(cur.attach, AttachAt):
        host, loop = cur.attach.stage, cur.attach.loop
        leaves = host.leaf_iter_vars
        yield cur, host, leaves[:leaves.index(loop) + 1] if loop in leaves else None
        cur = host
