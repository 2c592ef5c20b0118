"""Graph passes: each a pure Graph -> Graph function, listed in one pipeline."""
from __future__ import annotations
