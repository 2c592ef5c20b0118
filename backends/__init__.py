"""Backends: targets, C and OpenCL code generation, compilation, run-time modules, export."""
from .build import CModule, build
from .module import TimeResult
from .target import Target

__all__ = ["CModule", "build", "TimeResult", "Target"]
from .export import export_library  # noqa: E402
