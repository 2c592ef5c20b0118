"""Memory-hierarchy primitives (cache_read, cache_write, rfactor): schedule-level rewrites."""
from __future__ import annotations

SCHEDULE_PRIMITIVES: frozenset[str] = frozenset()


def replay_step(s, step) -> None:
    raise NotImplementedError(step.primitive)
