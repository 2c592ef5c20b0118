"""Schedules: how to compute — stages, primitives, bound inference and lowering."""
from . import memory  # noqa: F401 - defines the cache_read/cache_write/rfactor steps
from .attach import Attach, AttachAt
from .lower import LoweredFunc, lower
from .schedule import Schedule, create_schedule, replay
from .stage import Stage
from .steps import Step

__all__ = ["Attach", "AttachAt", "LoweredFunc", "Schedule", "Stage", "Step", "create_schedule",
           "lower", "replay"]
