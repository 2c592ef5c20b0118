"""``looptune report LOG... -o curve.png``: the picture of one or more tuning runs.

Every trial of each log is a point (its GFLOP/s, or its milliseconds when the task's FLOPs are
unknown); a failed trial (build error, crash, timeout, wrong result...) is an ``x`` on the
axis; the best-so-far is a step line; a star marks the config the log's best is (the median
rule of ``rank_configs``, re-measures first: a lucky single trial may sit above it); the hand
schedule and numpy are horizontal baselines.
Each log (each log and task, when a log holds several tasks) has one colour. Both axes start
at zero, so a reader sees how far the search went from nothing, not only a zoomed tail. The
title names the tasks, the target and the host (the CPU model the records were measured on).

Baselines come from timing the operator's hand schedule and its numpy reference *now*, in
interleaved rounds (``report.timed_side_by_side``), with the operator file given by ``--op``
or found among the bundled examples by the task's template name; the legend says so, with
the number of rounds. They are only drawn when this machine is the one the log was measured
on (same CPU model and ``-march``): another machine's timings on one axis would mislead.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .operators import CLIError

EXAMPLES = Path(__file__).resolve().parent / "examples"


@dataclass
class Series:
    """One log's trials of one task, in the order they were measured."""

    label: str
    task: object                         # TaskKey
    xs: list[int] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    chosen: tuple[float, str] | None = None     # the best by the median rule: value, label


@dataclass
class Baseline:
    """A horizontal line: ``what`` ("hand schedule" / "numpy") of ``task`` at ``seconds``."""

    task: object
    what: str
    seconds: float
    spread: float
    source: str                          # said in the legend: where the value comes from


def metric_of(records) -> str:
    """``"gflops"`` when every correct record knows its FLOPs, else ``"ms"``."""
    ok = [r for r in records if r.ok]
    return "gflops" if ok and all(r.flop for r in ok) else "ms"


def value(seconds: float, flop: float | None, metric: str) -> float:
    """A cost in the plotted unit."""
    return flop / seconds / 1e9 if metric == "gflops" else seconds * 1e3


def series_of(label: str, task, records, metric: str) -> Series:
    """The trials (records of kind ``measure``) of one log and task."""
    s = Series(label, task)
    for n, r in enumerate((r for r in records if r.kind == "measure"), 1):
        if r.ok:
            s.xs.append(n)
            s.ys.append(value(r.cost, r.flop, metric))
        else:
            s.failed.append(n)
            s.errors[r.error_kind] += 1
    from .search.log import how_ranked, rank_configs
    ranked = rank_configs(records)
    if ranked:
        b = ranked[0]
        how = how_ranked(b, records)
        s.chosen = (value(b.cost, b.flop, metric), f"#{b.index}, {how}")
    return s


def best_so_far(s: Series, metric: str) -> tuple[list[int], list[float]]:
    """The running best of ``s`` (max GFLOP/s or min ms) at each successful trial."""
    xs, ys, best = [], [], None
    pick = max if metric == "gflops" else min
    for x, y in zip(s.xs, s.ys):
        best = y if best is None else pick(best, y)
        xs.append(x)
        ys.append(best)
    return xs, ys


def title_of(tasks, records) -> str:
    """Tasks, target(s) and host(s): what the picture is of and where it was measured."""
    from .search.hosts import describe_host
    names = sorted({f"{t.name}{tuple(t.args)}" for t in tasks})
    shown = ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")
    targets = ", ".join(sorted({f"'{t.target}'" for t in tasks}))
    hosts = sorted({describe_host(r.host) for r in records if r.host})
    where = hosts[0] if len(hosts) == 1 else f"{len(hosts)} hosts" if hosts else "host unknown"
    return f"{shown} on {targets}\n{where}"


# ---- baselines ------------------------------------------------------------------------------

def find_operator(name: str, op_files: list[str]):
    """The operator whose template is ``name``: in ``op_files``, else in the bundled
    examples (only files that mention the name are loaded); None when there is none."""
    from .operators import load_operators
    files = list(op_files) or sorted(str(p) for p in EXAMPLES.glob("*.py")
                                     if f'"{name}"' in p.read_text(errors="replace"))
    for f in files:
        for op in load_operators(f):
            if op.name == name:
                return op
    return None


def measure_baselines(task, records, op_files: list[str], rounds: int
                      ) -> tuple[list[Baseline], str | None]:
    """The hand schedule and numpy of ``task`` timed now, or ([], why not)."""
    from .report import timed_side_by_side
    from .search.hosts import describe_host, host_info, same_host
    if task.name.startswith("auto_"):
        return [], "an auto-scheduled task has no hand schedule"
    here = host_info(task.target)
    theirs = [r.host for r in records if r.host and not same_host(r.host, here)]
    if theirs:
        return [], (f"the log was measured on {describe_host(theirs[0])}, this machine is "
                    f"{describe_host(here)}: timings taken here would not compare")
    op = find_operator(task.name, op_files)
    if op is None:
        where = ", ".join(op_files) if op_files else f"the examples in {EXAMPLES}"
        return [], f"no operator file defines template '{task.name}' ({where}); pass --op FILE"
    args = tuple(task.args)
    tm, _ = timed_side_by_side(op, args, {"hand": op.hand_schedule(*args)}, task.target, rounds)
    src = f"timed now, median of {rounds} interleaved rounds"
    return [Baseline(task, "hand schedule", tm["hand"].median, tm["hand"].spread, src),
            Baseline(task, "numpy", tm["numpy"].median, tm["numpy"].spread, src)], None


# ---- drawing --------------------------------------------------------------------------------

def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CLIError("plotting needs matplotlib: pip install 'looptune[plot]'") from None
    return plt


def figure(series: list[Series], baselines: list[Baseline], flops: dict, metric: str,
           title: str):
    """The matplotlib Figure (not saved): points, failures, best-so-far lines, baselines."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 5.2), dpi=110)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour_of: dict = {}
    unit = "GFLOP/s" if metric == "gflops" else "ms per call"
    for k, s in enumerate(series):
        c = colours[k % len(colours)]
        colour_of.setdefault(s.task, c)
        ax.scatter(s.xs, s.ys, s=14, color=c, alpha=0.55, label=f"{s.label}: trials",
                   zorder=2)
        bx, by = best_so_far(s, metric)
        if bx:
            ax.plot(bx, by, drawstyle="steps-post", color=c, linewidth=2, zorder=3,
                    label=f"{s.label}: best so far ({by[-1]:.4g} {unit})")
        if s.chosen is not None:
            v, how = s.chosen
            ax.scatter([max(s.xs + s.failed)], [v], marker="*", s=160, color=c, zorder=5,
                       edgecolors="black", linewidths=0.6,
                       label=f"{s.label}: chosen best ({how}): {v:.4g} {unit}")
        if s.failed:
            kinds = ", ".join(f"{n} {e}" for e, n in s.errors.most_common())
            # at the worst end of the axis: 0 GFLOP/s, or the top of a milliseconds axis
            y, tr = (0.0, ax.transData) if metric == "gflops" else \
                (0.97, ax.get_xaxis_transform())
            ax.scatter(s.failed, [y] * len(s.failed), marker="x", s=30, color=c, zorder=4,
                       transform=tr, clip_on=False, label=f"{s.label}: failed ({kinds})")
    one_task = len({s.task for s in series}) == 1
    for b in baselines:
        c = "black" if one_task else colour_of.get(b.task, "black")
        v = value(b.seconds, flops.get(b.task), metric)
        who = b.what if one_task else f"{b.task.name}{tuple(b.task.args)} {b.what}"
        ax.axhline(v, color=c, linestyle="--" if b.what == "hand schedule" else ":",
                   linewidth=1.4, zorder=1,
                   label=f"{who}: {v:.4g} {unit} ±{b.spread * 100:.0f}% ({b.source})")
    ax.set_xlim(0, max([1] + [x for s in series for x in s.xs + s.failed]) * 1.03)
    ax.set_ylim(0, max(ax.get_ylim()[1], 1e-9))
    ax.set_xlabel("trial")
    ax.set_ylabel(unit + (" (higher is better)" if metric == "gflops" else
                          " (lower is better)"))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    n = len(ax.get_legend_handles_labels()[1])
    fig.set_size_inches(10, 5.2 + 0.16 * ((n + 1) // 2))
    if n:
        ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2,
                  frameon=False)
    fig.tight_layout()
    return fig


def save(fig, output: str) -> None:
    """Write ``fig`` as a PNG at ``output``; CLIError when that cannot be done."""
    plt = _pyplot()
    out = Path(output)
    try:
        if not (out.parent if str(out.parent) else Path(".")).is_dir():
            raise CLIError(f"cannot write {output}: the folder {out.parent} does not exist")
        fmt = out.suffix[1:].lower()        # the name as given: never an added ".png"
        fig.savefig(out, format=fmt if fmt in fig.canvas.get_supported_filetypes() else "png")
    except OSError as e:
        raise CLIError(f"cannot write {output}: {e.strerror}") from None
    finally:
        plt.close(fig)

