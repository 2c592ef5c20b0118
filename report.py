"""What the command line prints: benchmark tables, tuning summaries and log reports.

Every timing here is honest in the same way: the same inputs (a fixed seed) for looptune and
numpy, a warm-up call, enough calls per repeat to last ``MIN_REPEAT_MS``, the median of the
repeats, numpy measured in the same process right next to looptune (after the other's worker threads
have gone idle), and the looptune output checked against the numpy reference before it is
timed.
"""
from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from .operators import CLIError, Operator, best_record, instantiate, parse_args

MIN_REPEAT_MS = 50.0
SETTLE_S = 0.3


def make_arrays(tensors, seed: int = 0):
    """(inputs, outputs, call arguments in the order of ``tensors``) from a fixed seed."""
    from .lang.tensor import PlaceholderOp
    from .search.jobs import make_inputs
    ins = make_inputs(tensors, seed)
    inputs = [ins[k] for k in sorted(ins)]
    outputs = [np.empty(tuple(int(d) for d in t.shape), t.dtype) for t in tensors
               if not isinstance(t.op, PlaceholderOp)]
    args = []
    it_in, it_out = iter(inputs), iter(outputs)
    for t in tensors:
        args.append(next(it_in) if isinstance(t.op, PlaceholderOp) else next(it_out))
    return inputs, outputs, args


def _check(op: Operator, reference, f, inputs, outputs, args) -> None:
    f(*args)
    ref = reference(*inputs)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    for out, want in zip(outputs, refs):
        tol = 1e-3 if out.dtype.kind == "f" and out.dtype.itemsize <= 4 else 1e-6
        if not np.allclose(out, want, rtol=tol, atol=tol, equal_nan=True):
            err = np.nanmax(np.abs(out.astype(np.float64) - want))
            raise CLIError(f"{op.name}: the looptune result differs from the numpy reference "
                           f"(max abs error {err:.3g}); not timing a wrong kernel")


def time_op(op: Operator, args_: tuple, s, tensors, target: str,
            repeat: int) -> tuple[float, float, float]:
    """(looptune seconds, numpy seconds, flop) for one schedule, timed side by side."""
    import looptune as lt
    from .backends.module import time_callable
    from .search import count_flop
    f = lt.build(s, tensors, target=target, name=op.c_name)
    inputs, outputs, args = make_arrays(tensors)
    reference = op.reference_for(args_)
    _check(op, reference, f, inputs, outputs, args)
    # OpenBLAS's and OpenMP's worker threads spin for a while after a call; on a small
    # machine they would steal the cores from whichever is timed next, so let them settle
    time.sleep(SETTLE_S)
    t = f.time(*args, number=1, repeat=repeat, min_repeat_ms=MIN_REPEAT_MS).median
    time.sleep(SETTLE_S)
    tn = time_callable(lambda: reference(*inputs), 1, repeat, MIN_REPEAT_MS).median
    time.sleep(SETTLE_S)
    return t, tn, float(count_flop(tensors) or 0)


def bench_table(ops: list[Operator], args_text, log, target: str, repeat: int) -> str:
    rows = [("operator", "sizes", "schedule", "looptune ms", "numpy ms", "speedup", "GFLOP/s")]
    skipped: list[str] = []
    for op in ops:
        args = parse_args(args_text, op)
        variants = [("hand", None)] + ([("tuned", log)] if log else [])
        for label, lg in variants:
            try:
                s, tensors, how = instantiate(op, args, lg, target)
            except CLIError:
                if lg is None:
                    raise
                skipped.append(op.name)   # the log holds no record of this task
                continue
            t, tn, flop = time_op(op, args, s, tensors, target, repeat)
            gf = f"{flop / t / 1e9:.1f}" if flop else "-"
            sched = label if lg is None else \
                f"{how.split()[0].replace('-scheduled', '')} #{how.split('#')[1].split()[0]}"
            rows.append((op.name, _sizes(args), sched, f"{t * 1e3:.3f}", f"{tn * 1e3:.3f}",
                         f"{tn / t:.2f}x", gf))
    note = f"\n(no tuned record in {log} for: {', '.join(skipped)})" if skipped else ""
    return _table(rows) + note


def _sizes(args) -> str:
    return "x".join(str(a) for a in args)


def _table(rows) -> str:
    widths = [max(len(str(r[c])) for r in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(w) if c < 3 else str(v).rjust(w)
                       for c, (v, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summarise_tuning(op: Operator, args: tuple, target: str, log: Path) -> str:
    """Best config, its GFLOP/s, and its speedup over the fallback config and numpy."""
    rec, task = best_record(op, args, str(log), target, with_task=True)
    s, tensors = task.instantiate(rec.index)
    t, tn, flop = time_op(op, args, s, tensors, target, 5)
    if task.name.startswith("auto_"):
        fs, ftensors = task.instantiate(0)     # the generated space's first config
    else:
        tlog = logging.getLogger("looptune.search.template")
        level = tlog.level
        tlog.setLevel(logging.ERROR)           # the fallback is wanted here: no warning
        try:
            fs, ftensors = op.template(*args)  # outside any log: the fallback config
        finally:
            tlog.setLevel(level)
    tf, _, _ = time_op(op, args, fs, ftensors, target, 5)
    knobs = ", ".join(f"{k}={v}" for k, v in rec.config.get("knobs", {}).items())
    gf = f"  ({flop / t / 1e9:.1f} GFLOP/s)" if flop else ""
    return "\n".join([
        f"best config #{rec.index}: {knobs}",
        f"  tuned     {t * 1e3:9.3f} ms{gf}",
        f"  fallback  {tf * 1e3:9.3f} ms   -> speedup of tuned: {tf / t:.2f}x",
        f"  numpy     {tn * 1e3:9.3f} ms   -> speedup of tuned: {tn / t:.2f}x",
    ])


def report(logs: list[str], output: str | None, top: int) -> str:
    """Per task of each log: trials, error kinds, best GFLOP/s, the top configs; a PNG of
    the best-so-far curves (one line per log and task) when ``output`` is given."""
    from .search import load_records
    curves = {}
    lines = []
    for lg in logs:
        if not Path(lg).is_file():
            raise CLIError(f"no such log: {lg}")
        by_task = defaultdict(list)
        for r in load_records(lg):
            by_task[r.task].append(r)
        if not by_task:
            raise CLIError(f"{lg} holds no complete tuning record")
        for key, recs in by_task.items():
            lines += _task_report(lg, key, recs, top)
            curves[f"{Path(lg).stem}: {key.name}{tuple(key.args)}"] = _best_so_far(recs)
    if output:
        _plot(curves, output)
        lines.append(f"curve written to {output}")
    return "\n".join(lines)


def _task_report(lg: str, key, recs, top: int) -> list[str]:
    ok = [r for r in recs if r.ok]
    kinds = Counter(r.error_kind for r in recs if not r.ok)
    out = [f"{lg}: {key}", f"  {len(recs)} trials, {len(ok)} correct"
           + ("".join(f", {n} {k}" for k, n in kinds.most_common()))]
    for r in sorted(ok, key=lambda r: r.cost)[:top]:
        knobs = ", ".join(f"{k}={v}" for k, v in r.config.get("knobs", {}).items())
        rate = f"{r.gflops:8.1f} GFLOP/s" if r.gflops else ""
        out.append(f"  #{r.index:<6} {r.cost * 1e3:9.3f} ms {rate}  {knobs}")
    return out


def _best_so_far(recs) -> list[float]:
    best, out = 0.0, []
    for r in recs:
        if r.ok:
            best = max(best, r.gflops or 1.0 / r.cost)
        out.append(best)
    return out


def _plot(curves: dict[str, list[float]], output: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CLIError("plotting needs matplotlib: pip install 'looptune[plot]'") from None
    out = Path(output)
    if not out.parent.is_dir():
        raise CLIError(f"cannot write {output}: the folder {out.parent} does not exist")
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, label=label)
    ax.set_xlabel("trial")
    ax.set_ylabel("best GFLOP/s so far")
    ax.set_title("looptune tuning curves")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(out)
    except OSError as e:
        raise CLIError(f"cannot write {output}: {e.strerror}") from None
    finally:
        plt.close(fig)
