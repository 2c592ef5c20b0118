"""Target strings: ``"c"``, ``"c -cc=clang -threads=2"``, ``"opencl -device=cpu"``."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import BuildError

_KNOWN = {
    "c": {"cc", "threads", "sanitize", "fast-math", "O", "march", "bounds-check"},
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

    def vector_lanes(self, dtype: str = "float32") -> int:
        """How many ``dtype`` elements one SIMD register of this C target holds, as its
        compiler sees ``-march`` (native by default): 16 float32 lanes with AVX-512, 8 with
        AVX/AVX2, 4 with SSE or NEON. For schedules that size register tiles to the machine."""
        if self.kind != "c":
            raise BuildError(f"vector_lanes() answers for C targets, not '{self}'; an "
                             "OpenCL device reports its own preferred vector widths")
        try:
            itemsize = np.dtype(dtype).itemsize
        except TypeError:
            raise BuildError(f"vector_lanes(): unknown dtype {dtype!r}; use a numpy dtype "
                             "name such as 'float32'") from None
        from .compiler import simd_bytes
        return max(1, simd_bytes(self.options.get("cc", "gcc"),
                                 self.options.get("march", "native")) // itemsize)

