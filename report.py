"""What the command line prints: benchmark tables, tuning summaries and log reports.

Every timing here is honest in the same way: the same inputs (a fixed seed) for looptune and
numpy, the looptune output checked against the numpy reference before it is timed, and the
sides timed in **interleaved rounds** (:func:`interleaved`): each round times every side once
(a block of calls lasting ``MIN_REPEAT_MS``), in an order rotated from round to round, after a
pause that lets the other library's idle threads go to sleep (``SETTLE_S``; OpenBLAS's spin
for about 0.1 s after each call) and then ``WARMUP_MS`` of untimed calls of the side about to
be timed. Neither side ever runs while the other's threads are busy, each is timed at the
steady speed of back-to-back calls (as the tuner's runner times candidates), and a slow drift
of the machine hits every side alike. Each side is printed as the median over the rounds and
its spread (half the range of the rounds, as a percentage of the median).

Why the warm-up: right after a pause, a multi-threaded kernel runs slower for a while (on a
2-core KVM guest, a 0.17 ms 2-thread kernel ran ~0.33 ms per call for the first 50-100 ms
after a 0.3 s sleep under the passive OpenMP policy, looptune's default then: the sleeping
threads' cores idle and wake), so a block timed right after the pause measured the wake-up,
not the kernel (``benchmarks/threadpools.py``'s ``woken`` line shows it).
"""
from __future__ import annotations

import logging
import math
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .operators import CLIError, Operator, best_record, instantiate, parse_args

MIN_REPEAT_MS = 50.0
SETTLE_S = 0.2
WARMUP_MS = 100.0


@dataclass
class Timing:
    """Seconds per call of one side, one value per interleaved round."""

    results: list[float]

    @property
    def median(self) -> float:
        """Seconds per call (never 0: a clock tick at least, so ratios stay defined)."""
        return max(statistics.median(self.results), 1e-9)

    @property
    def spread(self) -> float:
        """Half the range of the rounds, relative to the median."""
        return (max(self.results) - min(self.results)) / 2 / self.median

    def __str__(self) -> str:
        return f"{self.median * 1e3:.3f} ms ±{self.spread * 100:.1f}%"


def interleaved(calls: dict[str, Callable[[], object]], rounds: int) -> dict[str, Timing]:
    """Time each of ``calls`` in ``rounds`` interleaved rounds (see the module docstring)."""
    from .backends.module import time_callable, warm_up
    out: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for r in range(max(1, rounds)):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            time.sleep(SETTLE_S)
            _, per_call = warm_up(calls[name], WARMUP_MS, min_calls=2)
            number = max(1, min(1 << 20, math.ceil(MIN_REPEAT_MS / 1e3 / per_call)))
            out[name] += time_callable(calls[name], number, 1, warmup=0).results
    return {name: Timing(ts) for name, ts in out.items()}


def _omp_note() -> str:
    from .runtime_env import blas_settings, openmp_settings
    blas = blas_settings()
    if blas["loaded_before_looptune"] and blas["chosen_by"] == "looptune":
        return ("\n(note: numpy was imported before looptune, so its OpenBLAS kept its own "
                "idle-thread spin of ~0.1 s: a looptune kernel called right after numpy's BLAS "
                "shares the cores with it; import looptune first)")
    st = openmp_settings()
    if st["runtime_loaded_before_looptune"]:
        return ("\n(note: the OpenMP runtime was loaded before looptune was imported, with the "
                "wait policy it read then: idle OpenMP threads that spin slow numpy down)")
    if st.get("chosen_by") == "looptune" or _short_spin(st):
        return ""
    return (f"\n(note: the OpenMP runtime runs with OMP_WAIT_POLICY={st['OMP_WAIT_POLICY']}, "
            f"GOMP_SPINCOUNT={st['GOMP_SPINCOUNT']} (yours), not looptune's short spin: "
            "idle OpenMP threads that spin long slow the other library down)")


def _short_spin(st: dict) -> bool:
    """Whether the user's OpenMP settings let idle threads sleep within about looptune's spin
    (the passive policy, or a spin count no longer than looptune's)."""
    from .runtime_env import OPENMP_DEFAULTS
    policy = str(st.get("OMP_WAIT_POLICY") or "").lower()
    if policy in ("passive", "active"):
        return policy == "passive"
    try:
        return int(st.get("GOMP_SPINCOUNT") or "x") <= int(OPENMP_DEFAULTS["GOMP_SPINCOUNT"])
    except ValueError:
        return False


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


def _fast_call(f, args) -> Callable[[], object]:
    """``f(*args)`` as a user calls it in a hot loop: the arguments checked once
    (``CModule.bind``), as numpy's ``a @ b`` checks little; the checked call where a module
    cannot bind them (OpenCL, a size only the checked call can bind)."""
    bind = getattr(f, "bind", None)
    if bind is not None:
        try:
            return bind(*args)
        except TypeError:          # a symbolic size no argument holds on its own
            pass
    return lambda: f(*args)


def timed_side_by_side(op: Operator, args_: tuple, schedules: dict, target: str,
                       rounds: int) -> tuple[dict[str, Timing], float]:
    """Build each of ``schedules`` ({label: (schedule, tensors)}), check it against numpy,
    then time them and numpy (label ``"numpy"``) in interleaved rounds; (timings, flop).

    Every side runs on the same arrays (while their tensors' shapes and dtypes agree), so
    that where the arrays lie in memory is alike for all: softmax's rows run 1.1 ms when its
    input and output share their offset in a 4 KiB page (4K aliasing between the stores of
    one row and the loads of the next) and 0.83 when they do not, and sides with arrays of
    their own drew those placements by chance."""
    import looptune as lt
    from .lang.tensor import PlaceholderOp
    from .search import count_flop
    calls: dict[str, Callable[[], object]] = {}
    reference = op.reference_for(args_)
    inputs: list = []
    flop = 0.0
    shared: tuple[list, tuple] | None = None
    for label, (s, tensors) in schedules.items():
        f = lt.build(s, tensors, target=target, name=op.c_name)
        kinds = [(tuple(int(d) for d in t.shape), str(t.dtype), isinstance(t.op, PlaceholderOp))
                 for t in tensors]
        if shared is None or shared[0] != kinds:
            shared = (kinds, make_arrays(tensors))
        inputs, outputs, args = shared[1]
        _check(op, reference, f, inputs, outputs, args)
        calls[label] = _fast_call(f, args)
        flop = float(count_flop(tensors) or 0)
    calls["numpy"] = lambda: reference(*inputs)
    return interleaved(calls, rounds), flop


def bench_table(ops: list[Operator], args_text, logs, target: str, repeat: int,
                any_host: bool = False) -> str:
    """looptune (hand schedule, and the logs' best config) against numpy: ``repeat``
    interleaved rounds per row, medians and spreads."""
    rows = [("operator", "sizes", "schedule", "looptune ms", "±", "numpy ms", "±", "speedup",
             "GFLOP/s")]
    skipped: list[str] = []
    for op in ops:
        args = parse_args(args_text, op)
        variants = [("hand", None)] + ([("tuned", logs)] if logs else [])
        for label, lg in variants:
            try:
                s, tensors, how = instantiate(op, args, lg, target, any_host)
            except CLIError:
                if lg is None:
                    raise
                skipped.append(op.name)   # the logs hold no record of this task
                continue
            tm, flop = timed_side_by_side(op, args, {"looptune": (s, tensors)}, target, repeat)
            t, tn = tm["looptune"], tm["numpy"]
            gf = f"{flop / t.median / 1e9:.1f}" if flop else "-"
            sched = label if lg is None else \
                f"{how.split()[0].replace('-scheduled', '')} #{how.split('#')[1].split()[0]}"
            rows.append((op.name, _sizes(args), sched, f"{t.median * 1e3:.3f}",
                         f"{t.spread * 100:.1f}%", f"{tn.median * 1e3:.3f}",
                         f"{tn.spread * 100:.1f}%", f"{tn.median / t.median:.2f}x", gf))
    note = f"\n(no tuned record in {', '.join(map(str, logs))} for: {', '.join(skipped)})" \
        if skipped else ""
    head = (f"(medians of {repeat} interleaved rounds of looptune and numpy; ± is half the "
            "range of the rounds)")
    return _table(rows) + "\n" + head + note + _omp_note()


def _sizes(args) -> str:
    return "x".join(str(a) for a in args)


def _table(rows) -> str:
    widths = [max(len(str(r[c])) for r in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(w) if c < 3 else str(v).rjust(w)
                       for c, (v, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summarise_tuning(op: Operator, args: tuple, target: str, log, rounds: int = 5,
                     any_host: bool = False) -> str:
    """The best config by the median rule, then it, the fallback config and numpy timed in
    ``rounds`` interleaved rounds: medians, spreads and the speedups of the medians."""
    best = best_record(op, args, log, target, any_host)
    if best.task.name.startswith("auto_"):
        fallback = best.task.instantiate(0)       # the generated space's first config
    else:
        tlog = logging.getLogger("looptune.search.template")
        level = tlog.level
        tlog.setLevel(logging.ERROR)               # the fallback is wanted here: no warning
        try:
            fallback = op.template(*args)          # outside any log: the fallback config
        finally:
            tlog.setLevel(level)
    tm, flop = timed_side_by_side(op, args, {"tuned": (best.schedule, best.tensors),
                                             "fallback": fallback}, target, rounds)
    t, tf, tn = tm["tuned"], tm["fallback"], tm["numpy"]
    rec = best.record
    knobs = ", ".join(f"{k}={v}" for k, v in rec.config.get("knobs", {}).items())
    gf = f"  ({flop / t.median / 1e9:.1f} GFLOP/s)" if flop else ""
    return "\n".join([
        f"best config #{rec.index} ({best.how}): {knobs}",
        f"  timed again in {rounds} interleaved rounds (median ± half the range):",
        f"  tuned     {t.median * 1e3:9.3f} ms ±{t.spread * 100:4.1f}%{gf}",
        f"  fallback  {tf.median * 1e3:9.3f} ms ±{tf.spread * 100:4.1f}%   -> speedup of tuned: "
        f"{tf.median / t.median:.2f}x",
        f"  numpy     {tn.median * 1e3:9.3f} ms ±{tn.spread * 100:4.1f}%   -> speedup of tuned: "
        f"{tn.median / t.median:.2f}x",
    ]) + _omp_note()


def report(logs: list[str], output: str | None, top: int, op_files: list[str] | None = None,
           baselines: bool = True, rounds: int = 5) -> str:
    """Per task of each log (``-`` reads standard input): trials, error kinds, re-measures,
    the top configs by the median rule. With ``output``, a PNG of every trial, the best so
    far and (unless ``baselines`` is False) the hand schedule and numpy timed now in
    ``rounds`` interleaved rounds (``report_plot.py``); several logs overlay."""
    lines: list[str] = []
    loaded: list[tuple[str, object, list]] = []
    for lg in logs:
        label, by_task = _load_log(lg)
        for key, recs in by_task.items():
            lines += _task_report(label, key, recs, top)
            loaded.append((label, key, recs))
    if output:
        lines += _draw(loaded, output, op_files or [], baselines, rounds)
    return "\n".join(lines)


def _load_log(lg: str) -> tuple[str, dict]:
    from .search import load_records
    if lg == "-":
        records, lg = load_records(sys.stdin), "<stdin>"
    elif not Path(lg).is_file():
        raise CLIError(f"no such log: {lg}")
    else:
        records = load_records(lg)
    by_task = defaultdict(list)
    for r in records:
        by_task[r.task].append(r)
    if not by_task:
        raise CLIError(f"{lg} holds no complete tuning record")
    return lg, by_task


def _draw(loaded: list, output: str, op_files: list[str], baselines: bool,
          rounds: int) -> list[str]:
    """The PNG of ``loaded`` ((log, task, records) triples); the baselines' text lines."""
    from . import report_plot as rp
    every = [r for _, _, recs in loaded for r in recs]
    metric = rp.metric_of(every)
    many = len({key for _, key, _ in loaded}) > 1
    series = [rp.series_of(Path(lg).stem + (f": {key.name}{tuple(key.args)}" if many else ""),
                           key, recs, metric) for lg, key, recs in loaded]
    flops: dict = {}
    for _, key, recs in loaded:
        flops[key] = flops.get(key) or next((r.flop for r in recs if r.flop), None)
    drawn, lines = [], []
    for key in flops if baselines else ():
        got, why = rp.measure_baselines(key, [r for _, k, rs in loaded if k == key for r in rs],
                                        op_files, rounds)
        drawn += got
        lines += [f"{key.name}{tuple(key.args)}: {b.what} {b.seconds * 1e3:.3f} ms "
                  f"±{b.spread * 100:.1f}% ({b.source})" for b in got]
        lines += [f"(no baselines for {key.name}{tuple(key.args)}: {why})"] if why else []
    fig = rp.figure(series, drawn, flops, metric, rp.title_of(list(flops), every))
    rp.save(fig, output)
    return lines + [f"curve written to {output}"]


def _task_report(lg: str, key, recs, top: int) -> list[str]:
    from .search.log import rank_configs
    trials = [r for r in recs if r.kind == "measure"]
    ok = [r for r in trials if r.ok]
    kinds = Counter(r.error_kind for r in trials if not r.ok)
    again = [r for r in recs if r.kind == "remeasure"]
    noisy = sum(1 for r in recs if (r.noise or {}).get("retries"))
    out = [f"{lg}: {key}", f"  {len(trials)} trials, {len(ok)} correct"
           + "".join(f", {n} {k}" for k, n in kinds.most_common())
           + (f"; {len(again)} re-measure runs" if again else "")
           + (f"; {noisy} measured again after noise" if noisy else "")]
    for r in rank_configs(recs)[:top]:
        knobs = ", ".join(f"{k}={v}" for k, v in r.config.get("knobs", {}).items())
        rate = f"{r.gflops:8.1f} GFLOP/s" if r.gflops else ""
        runs = f"median of {len(r.costs)}" if r.kind == "remeasure" else "once"
        out.append(f"  #{r.index:<6} {r.cost * 1e3:9.3f} ms {rate}  ({runs})  {knobs}")
    return out
