"""The operator library: importing this package registers every operator (one module a
family)."""
from __future__ import annotations

from . import elementwise, nn, pool  # noqa: F401
