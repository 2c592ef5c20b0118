"""The graph optimization pipeline: the passes, in order, in one place.

```python
print(lt.graph.default_pipeline())            # the passes in order, and why that order
stats = lt.graph.PassStats()
opt = lt.graph.optimize(g, stats=stats)       # or passes=["simplify", "dce"], verbose=True
print(stats)                                  # node counts and what each pass rewrote
```
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import GraphError
from ..ir import Graph
from .base import PassStats
from .cse import cse
from .dce import dce
from .fold_batchnorm import fold_batchnorm
from .fold_constants import fold_constants
from .layout import layout_nchwc
from .simplify import simplify

#: Every pass by name (what ``optimize(passes=[...])`` and ``looptune graph`` accept).
PASSES: dict[str, Callable[..., Graph]] = {
    "fold_constants": fold_constants, "cse": cse, "dce": dce, "simplify": simplify,
    "fold_batchnorm": fold_batchnorm, "layout_nchwc": layout_nchwc,
}


@dataclass(frozen=True)
class PassStep:
    """One step of a pipeline: a pass, the options it runs with, and why it sits there."""

    fn: Callable[..., Graph]
    options: dict[str, Any] = field(default_factory=dict)
    why: str = ""

    @property
    def name(self) -> str:
        return self.fn.__name__

    def __call__(self, graph: Graph, stats: PassStats | None = None) -> Graph:
        return self.fn(graph, stats, **self.options)

    def __str__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{self.name}({opts})" if opts else self.name


@dataclass(frozen=True)
class Pipeline:
    """Passes run in order; ``print`` lists them with the reason for their place."""

    steps: tuple[PassStep, ...]

    def __iter__(self):
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def __call__(self, graph: Graph, stats: PassStats | None = None) -> Graph:
        return optimize(graph, self, stats)

    def __str__(self) -> str:
        if not self.steps:
            return "(no passes)"
        width = max(len(str(s)) for s in self.steps)
        return "\n".join(f"{k:2}. {str(s):<{width}}  # {s.why}" if s.why else f"{k:2}. {s}"
                         for k, s in enumerate(self.steps, 1))


def default_pipeline(target="c", winograd: bool = True) -> Pipeline:
    """The passes ``optimize`` runs by default, in order (``target`` picks the layout
    block: the float32 vector lanes of a C target; other targets keep NCHW; ``winograd``:
    the layout pass may run 3x3 stride-1 convolutions by Winograd)."""
    return Pipeline((
        PassStep(fold_constants, why="Constant nodes and weight-only subgraphs become "
                 "constants first: every later rule matches on constants"),
        PassStep(cse, why="one node per computation, so the use counts the rules check "
                 "(a Transpose read once) are exact"),
        PassStep(simplify, why="the algebraic rules to a fixpoint: removals, transposes, "
                 "GEMM, ReduceMean, Mul/Add chains"),
        PassStep(fold_batchnorm, why="after simplify: Identity/Dropout/Pad(0) no longer sit "
                 "between a Conv and its BN"),
        PassStep(simplify, why="again: a lone BN became Mul+Add by constants, which merge "
                 "with neighbouring ones"),
        PassStep(cse, why="the rewrites can make equal nodes (two sunk Transposes of one "
                 "value)"),
        PassStep(dce, why="drop what no output reads"),
        PassStep(layout_nchwc, {"target": str(target), "winograd": bool(winograd)},
                 why="last: it sees the final Convs (BN folded, bias merged) and their "
                 "elementwise epilogues"),
    ))


def _steps(passes, target, winograd: bool = True) -> Pipeline:
    if passes is None:
        return default_pipeline(target, winograd)
    if isinstance(passes, Pipeline):
        return passes
    if isinstance(passes, (str, Callable)) or not isinstance(passes, Sequence):
        passes = [passes]
    steps = []
    for p in passes:
        if isinstance(p, PassStep):
            steps.append(p)
        elif isinstance(p, str):
            if p not in PASSES:
                raise GraphError(f"optimize(passes=[..., {p!r}, ...]): no pass named {p!r}; "
                                 f"the passes are {', '.join(PASSES)}")
            opts = {"target": str(target), "winograd": bool(winograd)} \
                if p == "layout_nchwc" else {}
            steps.append(PassStep(PASSES[p], opts))
        elif callable(p):
            steps.append(PassStep(p))
        else:
            raise GraphError(f"optimize(passes=[..., {p!r}, ...]): a pass is a name "
                             f"({', '.join(PASSES)}) or a function Graph -> Graph")
    return Pipeline(tuple(steps))


def optimize(graph: Graph, passes=None, stats: PassStats | None = None, *, target="c",
             verbose: bool = False, winograd: bool = True) -> Graph:
    """Run the default pipeline (:func:`default_pipeline`) or ``passes`` (names, pass
    functions, or a :class:`Pipeline`) on ``graph`` and return the optimized graph; ``graph``
    is left as it is. ``stats`` (a :class:`PassStats`) collects each pass's node counts and
    rewrites; ``verbose=True`` prints the pipeline and then each pass's line as it runs.
    ``winograd=False``: the layout pass keeps every convolution direct (ConvNCHWc), for
    results within float32 rounding of the direct sum (Winograd's are within about 1e-5 of
    the output's largest value)."""
    if not isinstance(graph, Graph):
        raise GraphError(f"optimize(): expected a looptune.graph.Graph; got "
                         f"{type(graph).__name__} (import ONNX models with from_onnx)")
    pipeline = _steps(passes, target, winograd)
    if verbose and stats is None:
        stats = PassStats()
    if verbose:
        print(f"pipeline for graph '{graph.name}':\n{pipeline}", file=sys.stdout)
    for step in pipeline:
        if stats is not None:
            stats.begin(step.name, graph)
        graph = step(graph, stats)
        if stats is not None:
            stats.end(graph)
            if verbose:
                print(stats.records[-1])
    return graph
