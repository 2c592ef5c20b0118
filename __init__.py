"""looptune: a Halide/TVM-style scheduling language with search."""
from __future__ import annotations

from . import runtime_env  # noqa: F401  (first: the thread pools' settings, before numpy loads)
from .errors import BuildError, GraphError, LangError, LooptuneError, RunError, ScheduleError
from .lang import Tensor, compute, const, placeholder, reduce_axis, var
from .lang.ops import (all, any, cast, ceil, cos, equal, erf, exp, fabs, floor, if_then_else,
                       log, log1p, log2, max, min, not_equal, pow, prod, round, rsqrt, sigmoid,
                       sin, sqrt, sum, tanh, trunc)

__version__ = "0.1.0"
from .schedule import Schedule, Stage, create_schedule, lower
from .backends import Target, TimeResult, build
from . import search
from .schedule import replay
from .search import template


def __getattr__(name: str):
    """``lt.graph`` and ``lt.export_library`` load the graph compiler on first use: the
    measurement workers (a builder or runner process per tune, a runner per re-measure
    round) import looptune and never use it; loading it took ~0.1 s of each one's start."""
    import importlib
    if name == "graph":
        return importlib.import_module(".graph", __name__)   # also sets the attribute
    if name == "export_library":
        return importlib.import_module(".graph.export", __name__).export_library
    raise AttributeError(f"module 'looptune' has no attribute {name!r}")
