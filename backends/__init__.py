"""Backends: targets, C and OpenCL code generation, compilation, run-time modules, export."""
from . import opencl_barriers  # noqa: F401  (registers the opencl target's region hook)
from .build import CModule, build
from .module import TimeResult
from .target import Target

__all__ = ["CModule", "build", "TimeResult", "Target"]
from .export import export_library  # noqa: E402
