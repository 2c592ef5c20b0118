"""Target strings: ``"c"``, ``"c -cc=clang -threads=2"``, ``"opencl -device=cpu"``."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import BuildError

_KNOWN = {
    "c": {"cc", "threads", "sanitize", "fast-math", "O", "march"},
    "opencl": {"device", "platform"},
}


@dataclass(frozen=True)
class Target:
    kind: str
    options: dict = field(default_factory=dict)

    def __str__(self) -> str:
        opts = " ".join(f"-{k}" if v is True else f"-{k}={v}" for k, v in
                        sorted(self.options.items()))
        return f"{self.kind} {opts}".strip()

    def __hash__(self):
        return hash(str(self))

    @staticmethod
    def parse(text) -> Target:
        """Parse a target string; unknown kinds or options raise BuildError naming them."""
        if isinstance(text, Target):
            return text
        if text is None:
            text = "c"
        parts = str(text).split()
        if not parts:
            parts = ["c"]
        kind = parts[0]
        if kind not in _KNOWN:
            raise BuildError(f"unknown target '{kind}' in {text!r}; use 'c' or 'opencl'")
        opts: dict = {}
        for p in parts[1:]:
            if not p.startswith("-"):
                raise BuildError(f"target {text!r}: option '{p}' must look like -name=value")
            key, _, val = p[1:].partition("=")
            if key not in _KNOWN[kind]:
                raise BuildError(f"target {text!r}: unknown option '-{key}' for '{kind}'; "
                                 f"known: {', '.join('-' + k for k in sorted(_KNOWN[kind]))}")
            opts[key] = val if val else True
        if "threads" in opts:
            try:
                if int(opts["threads"]) < 1:
                    raise ValueError
            except ValueError:
                raise BuildError(f"target {text!r}: -threads needs a positive integer") from None
        return Target(kind, opts)
