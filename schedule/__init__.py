"""Schedules: how to compute — stages, primitives, bound inference and lowering."""
from .attach import Attach, AttachAt
from .lower import LoweredFunc, lower
from .schedule import Schedule, create_schedule, replay
from .stage import Stage
from .steps import Step

__all__ = ["Attach", "AttachAt", "LoweredFunc", "lower", "Schedule", "create_schedule", "replay",
           "Stage", "Step"]
