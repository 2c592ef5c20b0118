"""Where a compiled model's time goes: ``model.profile(*inputs)`` (see
:meth:`looptune.graph.model.Model.profile`).

```python
prof = model.profile(xin, repeat=20)
print(prof)                       # steps, slowest first: seconds, share, kernel, schedule
prof.steps[0].seconds             # per step, in execution order
prof.call_seconds, prof.overhead_seconds
```
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepTime:
    """One step's median seconds; ``kernel`` is its :class:`~looptune.graph.compile.Kernel`
    (None: the group ran its numpy reference)."""

    index: int
    group: str
    kernel: object | None
    seconds: float

    @property
    def how(self) -> str:
        """``kernel [schedule, target]``, or ``numpy reference``."""
        k = self.kernel
        return f"{k.name} [{k.schedule}, {k.target}]" if k is not None else "numpy reference"

    def as_dict(self) -> dict:
        k = self.kernel
        return {"step": self.index, "group": self.group, "seconds": self.seconds,
                "kernel": k.name if k is not None else None,
                "schedule": k.schedule if k is not None else "host",
                "target": k.target if k is not None else "numpy"}


@dataclass(frozen=True)
class ModelProfile:
    """Per-step times of one model on one set of inputs, and of whole calls (medians of
    ``repeat`` runs)."""

    model: str
    target: str
    steps: list[StepTime]
    call_seconds: float
    repeat: int

    @property
    def step_seconds(self) -> float:
        """The sum of the steps' medians."""
        return sum(s.seconds for s in self.steps)

    @property
    def overhead_seconds(self) -> float:
        """A whole call beyond its steps: input checks, output arrays, Python dispatch
        (clamped at 0: the medians come from different runs)."""
        return max(0.0, self.call_seconds - self.step_seconds)

    def by_schedule(self) -> dict[str, float]:
        """Seconds per schedule rule (log, fallback, default, plain, host)."""
        out: dict[str, float] = {}
        for s in self.steps:
            key = s.as_dict()["schedule"]
            out[key] = out.get(key, 0.0) + s.seconds
        return out

    def as_dict(self) -> dict:
        return {"model": self.model, "target": self.target, "repeat": self.repeat,
                "call_seconds": self.call_seconds, "step_seconds": self.step_seconds,
                "overhead_seconds": self.overhead_seconds,
                "steps": [s.as_dict() for s in self.steps]}

    def table(self, top: int | None = None) -> str:
        """The steps, slowest first (``top``: that many), then the totals."""
        total = max(self.call_seconds, self.step_seconds, 1e-12)
        rows = sorted(self.steps, key=lambda s: -s.seconds)[:top]
        lines = [f"profile of model {self.model} (target {self.target}, medians of "
                 f"{self.repeat}): call {_ms(self.call_seconds)}, steps "
                 f"{_ms(self.step_seconds)}, overhead {_ms(self.overhead_seconds)}",
                 f"  {'step':>4}  {'ms':>9}  {'share':>6}  kernel [schedule, target] / group"]
        for s in rows:
            lines.append(f"  {s.index:>4}  {s.seconds * 1e3:>9.4f}  {s.seconds / total:>6.1%}  "
                         f"{s.how}  ({s.group})")
        if top is not None and len(self.steps) > top:
            rest = sum(s.seconds for s in sorted(self.steps, key=lambda s: -s.seconds)[top:])
            lines.append(f"  {'':>4}  {rest * 1e3:>9.4f}  {rest / total:>6.1%}  "
                         f"{len(self.steps) - top} more steps")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4f} ms"
