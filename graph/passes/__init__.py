"""Graph passes: each a pure Graph -> Graph function, listed in one pipeline
(:func:`default_pipeline`); :func:`optimize` runs it."""
from __future__ import annotations

from .base import PassRecord, PassStats
from .cse import cse
from .dce import dce
from .fold_batchnorm import fold_batchnorm
from .fold_constants import FOLD_LIMIT_BYTES, fold_constants
from .layout import layout_nchwc
from .pipeline import PASSES, PassStep, Pipeline, default_pipeline, optimize
from .simplify import simplify

__all__ = ["FOLD_LIMIT_BYTES", "PASSES", "PassRecord", "PassStats", "PassStep", "Pipeline",
           "cse", "dce", "default_pipeline", "fold_batchnorm", "fold_constants", "layout_nchwc",
           "optimize", "simplify"]
