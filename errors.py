"""The looptune error family: every user mistake raises one of these."""
from __future__ import annotations


class LooptuneError(Exception):
    """Base of every error looptune raises for a user mistake."""


class LangError(LooptuneError):
    """A tensor expression is malformed (wrong indices, dtypes, reductions...)."""


class ScheduleError(LooptuneError):
    """A schedule primitive was misused; the message names stage, primitive and loop."""


class BuildError(LooptuneError):
    """Code generation or compilation failed; carries the compiler output and source path."""

    def __init__(self, message: str, source_path: str | None = None, output: str = ""):
        super().__init__(message)
        self.source_path = source_path
        self.output = output


class GraphError(LooptuneError):
    """An operator graph is malformed or unsupported; the message names the node, its op type
    and what is wrong."""


class RunError(LooptuneError, RuntimeError):
    """A compiled function reported a failure when called (an intermediate buffer that cannot
    be allocated, an index out of bounds under ``-bounds-check``); the message names the
    function, what failed and its error code."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code
