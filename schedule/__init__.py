"""Schedules: how to compute — stages, primitives, bound inference and lowering."""
from .lower import LoweredFunc, lower
from .schedule import Schedule, create_schedule, replay
from .stage import Stage
from .steps import Step

__all__ = ["LoweredFunc", "lower", "Schedule", "create_schedule", "replay", "Stage", "Step"]
