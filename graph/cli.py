"""``looptune graph MODEL``: an ONNX model before and after the pass pipeline, its fused groups.

```
looptune graph model.onnx                     # graph, optimized graph, fused groups
looptune graph model.onnx --passes            # + what each pass did (nodes removed/fused)
looptune graph model.onnx --shape x=1,3,224,224 --dot model.dot --png model.png
```

The DOT and PNG pictures show the optimized graph with each fused group as a cluster. A PNG is
drawn by Graphviz's ``dot`` when it is on the PATH, else with matplotlib (a layered drawing),
else the command says what to install. Mistakes (no such file, not an ONNX model, unsupported
operators, a symbolic input dimension, a bad --shape, an unwritable output) end with one line
on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import GraphError
from ..operators import CLIError


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``graph`` subcommand to ``looptune``'s subparsers."""
    p = subparsers.add_parser(
        "graph", help="an ONNX model before/after the graph passes, and its fused groups",
        description="Import an ONNX model, print it, run the pass pipeline "
                    "(lt.graph.optimize), print the result and the fused groups "
                    "(lt.graph.fuse) with their op patterns.")
    p.add_argument("model", metavar="MODEL", help="an ONNX model file (.onnx)")
    p.add_argument("--passes", action="store_true",
                   help="print what each pass did (node counts, nodes removed/fused)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D,D,...",
                   help="a static shape for an input with symbolic dimensions (repeatable)")
    p.add_argument("--dot", metavar="FILE", help="write the optimized graph as Graphviz DOT, "
                   "fused groups as clusters")
    p.add_argument("--png", metavar="FILE", help="draw the same picture as a PNG (Graphviz "
                   "dot, else matplotlib)")
    p.set_defaults(func=run)
    return p


def run(ns: argparse.Namespace) -> int:
    """Run ``looptune graph`` for parsed arguments ``ns``."""
    from .printer import graph_dot
    shapes = parse_shapes(ns.shape)
    for opt_name in ("dot", "png"):
        if getattr(ns, opt_name):
            check_writable(Path(getattr(ns, opt_name)), f"--{opt_name}")
    g = load(ns.model, shapes)
    from . import fuse, optimize
    from .passes import PassStats
    print(f"== {ns.model}: graph '{g.name}', {len(g.nodes)} nodes, {len(g.inputs)} input(s), "
          f"{len(g.consts)} constant(s)")
    print(g)
    stats = PassStats()
    opt = optimize(g, stats=stats)
    names = ", ".join(r.name for r in stats.records)
    print(f"\n== after the pipeline ({names}): {len(opt.nodes)} nodes (from {len(g.nodes)})")
    print(opt)
    if ns.passes:
        print(f"\n== passes ({len(stats.records)} runs; nodes before -> after, what each did)")
        print(stats)
    groups = fuse(opt)
    print(f"\n== fused groups: {len(groups)} kernels for {len(opt.nodes)} nodes")
    for grp in groups:
        print(grp)
    if ns.dot or ns.png:
        dot = graph_dot(opt, groups)
        if ns.dot:
            Path(ns.dot).write_text(dot + "\n")
            print(f"\nwrote {ns.dot}")
        if ns.png:
            how = write_png(dot, opt, groups, Path(ns.png))
            print(f"wrote {ns.png} ({how})")
    return 0


def parse_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    """``["x=1,3,224,224"]`` -> ``{"x": (1, 3, 224, 224)}``; a CLIError for anything else."""
    out: dict[str, tuple[int, ...]] = {}
    for item in items:
        m = re.fullmatch(r"([^=]+)=(\d+(?:,\d+)*)", item.strip())
        if not m or any(int(d) <= 0 for d in m.group(2).split(",")):
            raise CLIError(f"--shape: expected NAME=D,D,... with positive sizes (e.g. "
                           f"x=1,3,224,224); got {item!r}")
        if m.group(1) in out:
            raise CLIError(f"--shape: input '{m.group(1)}' is given twice")
        out[m.group(1)] = tuple(int(d) for d in m.group(2).split(","))
    return out


def check_writable(path: Path, what: str) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise CLIError(f"{what}: cannot write {path}: the folder {parent} does not exist")
    if path.is_dir():
        raise CLIError(f"{what}: cannot write {path}: it is a folder")


def load(model: str, shapes: dict):
    """The imported graph; the importer's GraphError as a one-line CLIError."""
    from .onnx_import import from_onnx
    try:
        return from_onnx(model, shapes=shapes)
    except GraphError as e:
        msg = " ".join(str(e).split())
        if "shapes=" in msg:
            msg += " (on the command line: --shape NAME=D,D,...)"
        raise CLIError(msg) from None


# ---- pictures ----------------------------------------------------------------------------------


def have_dot() -> bool:
    return shutil.which("dot") is not None


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_png(dot: str, graph, groups, path: Path) -> str:
    """Draw the picture with Graphviz when present, else matplotlib; say which."""
    if have_dot():
        r = subprocess.run(["dot", "-Tpng", "-o", str(path)], input=dot, text=True,
                           capture_output=True, timeout=120, check=False)
        if r.returncode != 0:
            raise CLIError(f"--png: dot failed: {' '.join(r.stderr.split())[:300]}")
        return "graphviz dot"
    if have_matplotlib():
        draw_matplotlib(graph, groups, path)
        return "matplotlib"
    raise CLIError("--png: needs Graphviz (the `dot` program) or matplotlib (pip install "
                   "looptune[plot]); neither is installed: write --dot FILE instead")


def _layers(graph) -> dict[int, int]:
    """Each node's depth: 1 + the deepest node it reads from (inputs/constants are 0)."""
    depth: dict[str, int] = {}
    out = {}
    for k, n in enumerate(graph.nodes):
        d = 1 + max((depth.get(i, 0) for i in n.inputs if i), default=0)
        out[k] = d
        for o in n.outputs:
            depth[o] = d
    return out


def draw_matplotlib(graph, groups, path: Path) -> None:
    """A layered drawing: one row per depth, boxes labelled by op type, coloured by group."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    layer = _layers(graph)
    rows: dict[int, list[int]] = {}
    for k, d in layer.items():
        rows.setdefault(d, []).append(k)
    pos = {k: (x - (len(ks) - 1) / 2, -d) for d, ks in rows.items() for x, k in enumerate(ks)}
    group_of = {id(n): gi for gi, grp in enumerate(groups) for n in grp.nodes}
    width = max((len(ks) for ks in rows.values()), default=1)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * width), max(3.0, 0.7 * len(rows) + 1)))
    colors = plt.get_cmap("tab20")
    producer = {o: k for k, n in enumerate(graph.nodes) for o in n.outputs if o}
    for k, n in enumerate(graph.nodes):
        for i in n.inputs:
            if i in producer:
                (x0, y0), (x1, y1) = pos[producer[i]], pos[k]
                ax.annotate("", (x1, y1 + 0.15), (x0, y0 - 0.15),
                            arrowprops={"arrowstyle": "->", "color": "gray", "lw": 0.8})
    for k, n in enumerate(graph.nodes):
        gi = group_of.get(id(n), 0)
        ax.text(*pos[k], n.op_type, ha="center", va="center", fontsize=7,
                bbox={"boxstyle": "round", "fc": colors(gi % 20), "ec": "black", "lw": 0.5})
    ax.set_title(f"{graph.name}: {len(graph.nodes)} nodes, {len(groups)} fused groups "
                 "(colour = group)", fontsize=9)
    ax.set_xlim(-width / 2 - 0.5, width / 2 + 0.5)
    ax.set_ylim(-len(rows) - 0.7, -0.3)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
