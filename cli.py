"""The ``looptune`` command: tune, show, bench, export and report operators in example files.

An operator file (see ``examples/``) defines ``NAME``, ``DEFAULT_ARGS``, ``algorithm``,
``hand_schedule``, a ``template`` and a numpy ``reference``; a file holding several operators
lists them in ``OPERATORS`` (dicts with those keys). Mistakes a user can make end with one
line on stderr and exit status 2; no traceback.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .errors import LooptuneError
from .operators import CLIError, Operator, load_operators, parse_args, select
from .search.tuners import TUNERS, make_tuner


def _tuner(name: str, task, seed: int, ns: argparse.Namespace, transfer: list | None):
    optuna = {"sampler": ns.sampler, "storage": ns.storage, "study_name": ns.study} \
        if name == "optuna" else {}
    return make_tuner(name, task, seed, transfer_logs=transfer, **optuna)


def _tune_log(ns: argparse.Namespace, op: Operator) -> Path:
    logs = ns.log or []
    if len(logs) > 1:
        raise CLIError(f"tune writes one log; got --log {' --log '.join(logs)}: give one (to "
                       "start from what other logs learnt, use --transfer LOG...)")
    path = Path(logs[0] if logs else f"{op.name}.jsonl")
    _check_writable(path)
    return path


def _transfer(ns: argparse.Namespace, task) -> list | None:
    """The --transfer logs' usable records (another task's configs that its template
    rejects are skipped with a warning instead of taking the tune down)."""
    if not ns.transfer:
        return None
    if ns.tuner != "gbt":
        raise CLIError(f"--transfer warm-starts the cost model of the gbt tuner; the "
                       f"{ns.tuner} tuner has none: add --tuner gbt, or drop --transfer")
    for f in ns.transfer:
        if not Path(f).is_file():
            raise CLIError(f"--transfer: no such log: {f}")
    from .operators import transfer_records
    recs = transfer_records(ns.transfer, task)
    if not recs:
        raise CLIError(f"--transfer: {', '.join(ns.transfer)} hold no usable records of "
                       f"other tasks (this task's own records are skipped: --resume "
                       f"reuses those; another operator's need its file's template)")
    return recs


def cmd_tune(ns: argparse.Namespace) -> int:
    from . import search
    from .report import summarise_tuning
    op = select(load_operators(ns.file), ns.template)
    args = parse_args(ns.args, op)
    log_path = _tune_log(ns, op)
    if ns.auto:
        from .operators import auto_task
        task = auto_task(op, args, ns.target)
    else:
        task = search.create_task(op.name, args, target=ns.target)
    transfer = _transfer(ns, task)
    trials = ns.trials if ns.trials is not None else (200 if ns.seconds is None else None)
    budget = " and ".join(([f"{trials} trials"] if trials else [])
                          + ([f"{ns.seconds:g} s"] if ns.seconds else []))
    space = "an auto-generated space, " if ns.auto else ""
    print(f"tuning {op.name}{tuple(args)} ({space}task {task.name}) on '{task.target}': "
          f"{len(task.config_space)} configs, {budget} with the {ns.tuner} tuner -> "
          f"{log_path}", file=sys.stderr)
    tuner = _tuner(ns.tuner, task, ns.seed, ns, transfer)
    if transfer:
        print(f"transfer: the cost model starts from {tuner.n_transferred} records of other "
              f"tasks", file=sys.stderr)
    opt = search.MeasureOption(number=ns.number, repeat=ns.repeat, timeout=ns.timeout,
                               n_parallel=ns.parallel, min_repeat_ms=ns.min_repeat_ms,
                               warmup_ms=ns.warmup_ms, remeasure_top=ns.remeasure_top,
                               remeasure_rounds=ns.remeasure_rounds,
                               race_rounds=ns.race_rounds,
                               remeasure_fresh=not ns.remeasure_one_process,
                               noise_threshold=ns.noise_threshold or None,
                               busy_threshold=ns.busy_threshold or None,
                               busy_wait=ns.busy_wait)
    tuner.tune(trials, opt, callbacks=[search.log_to_file(log_path), search.progress_bar()],
               early_stopping=ns.early_stopping, resume=ns.resume, seconds=ns.seconds)
    if tuner.interrupted:
        print(f"looptune tune: interrupted after {tuner.trials} trials, all of them in "
              f"{log_path}; no summary (`looptune bench {ns.file} --log {log_path}` times the "
              f"best; --resume continues)", file=sys.stderr)
        return 130
    print(summarise_tuning(op, args, ns.target, str(log_path), any_host=ns.any_host))
    if tuner.busy_runs:
        print(f"looptune tune: {tuner.busy_runs} runs were timed while other processes kept "
              f"more than {ns.busy_threshold:g} cores busy (their records hold noise.busy): "
              f"configs using every core were handicapped; tune again on a quiet machine, or "
              f"with --busy-wait S", file=sys.stderr)
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    import looptune as lt

    from .operators import instantiate
    op = select(load_operators(ns.file), ns.template)
    args = parse_args(ns.args, op)
    s, tensors, how = instantiate(op, args, ns.log, ns.target, ns.any_host)
    hook = lt.Target.parse(ns.target).region_hook   # the loop nest the target would compile
    if ns.html:
        return _show_html(ns.html, lt.lower(s, tensors, name=op.c_name, unroll=False,
                                            region_hook=hook),
                          f"{op.name}{tuple(args)}: {how}")
    print(f"# {op.name}{tuple(args)}: {how}")
    if ns.steps:
        print("\n".join(str(x) for x in s.steps) or "(default schedule: no steps)")
    elif ns.source:
        print(lt.build(s, tensors, target=ns.target, name=op.c_name).source)
    else:
        print(lt.lower(s, tensors, name=op.c_name, region_hook=hook))
    return 0


def _show_html(out: str, func, title: str) -> int:
    """The loop nest as one static HTML page (unrolled loops shown as loops) to ``out``
    ('-': standard output)."""
    from .schedule.nest_html import html_page
    page = html_page(func, f"looptune show {title}")
    if out == "-":
        sys.stdout.write(page)
        return 0
    path = Path(out)
    _check_writable(path)
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as e:
        raise CLIError(f"cannot write {out}: {e.strerror}") from None
    print(f"loop nest of {title} written to {out}")
    return 0


def cmd_bench(ns: argparse.Namespace) -> int:
    if any(str(f).endswith(".onnx") for f in ns.files):     # a whole model: graph/model_cli.py
        from .graph.model_cli import cmd_bench_model
        return cmd_bench_model(ns)
    from .report import bench_table
    ops: list[Operator] = []
    for f in ns.files:
        found = load_operators(f)
        ops += [select(found, ns.template)] if ns.template else found
    print(bench_table(ops, ns.args, ns.log, ns.target, ns.repeat, ns.any_host))
    return 0


def cmd_export(ns: argparse.Namespace) -> int:
    from .export_cli import cmd_export as export  # --march: one target or several
    return export(ns)


def cmd_report(ns: argparse.Namespace) -> int:
    from .report import report
    print(report(ns.logs, ns.output, ns.top, ns.op, not ns.no_baselines, ns.rounds))
    return 0


def cmd_merge(ns: argparse.Namespace) -> int:
    from .merge import merge_logs
    print(merge_logs(ns.logs, ns.output))
    return 0


def cmd_cache(ns: argparse.Namespace) -> int:
    from .backends import compiler
    d = compiler.cache_dir()
    if ns.clear:
        freed = compiler.clear(d)
        print(f"removed {freed / 1e6:.1f} MB of builds from {d}")
    elif ns.max_size is not None:
        try:
            limit = compiler.parse_size(ns.max_size, "--max-size")
        except LooptuneError as e:
            raise CLIError(str(e)) from None
        freed = compiler.prune(limit, d, keep_recent_s=0.0)
        print(f"removed {freed / 1e6:.1f} MB of least recently used builds from {d}")
    swept = compiler.sweep(d)
    entries = compiler.cache_entries(d)
    size = sum(b for _, b in entries.values())
    limit = compiler.cache_limit()
    bound = f"{limit / 1e6:.0f} MB (LOOPTUNE_CACHE_MAX)" if limit else "none"
    print(f"build cache {d}: {len(entries)} entries, {size / 1e6:.1f} MB; bound {bound}"
          + (f"; removed {swept} things killed builds left" if swept else ""))
    return 0


def _check_writable(path: Path) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise CLIError(f"cannot write {path}: the folder {parent} does not exist")
    if path.exists() and path.is_dir():
        raise CLIError(f"cannot write {path}: it is a folder")


class _Parser(argparse.ArgumentParser):
    """Command-line mistakes end with one line on stderr (and exit status 2), like the
    others."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive(kind: type):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not v > 0 or (kind is float and v == float("inf")):
            raise argparse.ArgumentTypeError(f"must be a positive {kind.__name__}; got {text!r}")
        return v
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0; got {text!r}")
    return v


def _nonnegative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number >= 0; got {text!r}")
    return v


def _op_args(sp, many: bool = False) -> None:
    if many:
        sp.add_argument("files", nargs="+", metavar="FILE", help="operator files")
    else:
        sp.add_argument("file", metavar="FILE", help="an operator file, e.g. examples/matmul.py")
    sp.add_argument("--template", help="operator NAME when a file holds several")
    sp.add_argument("--target", default="c", help="target string (default: c)")


def _log_args(sp, what: str) -> None:
    sp.add_argument("--log", action="append", metavar="LOG",
                    help=f"{what}; repeat --log to merge several logs (the best config is "
                         "ranked over all their records by the median rule)")
    sp.add_argument("--any-host", action="store_true",
                    help="rank records measured on other hosts (CPU model, -march) with this "
                         "host's, without a warning (default: prefer this host's records)")


def _tune_parser(sub) -> None:
    t = sub.add_parser("tune", help="tune an operator's template, logging every candidate")
    _op_args(t)
    t.add_argument("--args", help="comma-separated template arguments (default: the file's)")
    t.add_argument("--tuner", choices=list(TUNERS), default="ga", help="search strategy (default: ga)")
    t.add_argument("--auto", action="store_true",
                   help="tune a space generated from the operator's algorithm (no template)")
    t.add_argument("--trials", type=_positive(int), default=None,
                   help="candidates to measure (default: 200, or no limit with --seconds)")
    t.add_argument("--seconds", type=_positive(float), default=None,
                   help="wall-clock budget of the search in seconds (beside --trials)")
    t.add_argument("--log", action="append", metavar="LOG",
                   help="tuning log to append to (JSON Lines; default NAME.jsonl)")
    t.add_argument("--any-host", action="store_true",
                   help="let the summary use the log's records of other hosts silently")
    t.add_argument("--resume", action="store_true", help="skip configs the log already has")
    t.add_argument("--seed", type=int, default=0, help="random seed of the tuner (default: 0)")
    t.add_argument("--early-stopping", type=_positive(int), default=None, metavar="N",
                   help="stop after N trials without improvement")
    t.add_argument("--parallel", type=_positive(int), default=2,
                   help="candidates built at once (default: 2)")
    t.add_argument("--timeout", type=_positive(float), default=10.0,
                   help="seconds per build and per run (default: 10)")
    t.add_argument("--number", type=_positive(int), default=3,
                   help="calls per timed repeat (default: 3)")
    t.add_argument("--repeat", type=_positive(int), default=3,
                   help="timed repeats per candidate; its cost is their median (default: 3)")
    t.add_argument("--min-repeat-ms", type=float, default=0.0,
                   help="raise --number until a repeat lasts this long (default: 0)")
    t.add_argument("--warmup-ms", type=_nonnegative, default=50.0, metavar="MS",
                   help="untimed calls of each candidate before it is timed, for about MS "
                        "ms (default: 50; a parallel kernel's threads wake up meanwhile)")
    t.add_argument("--remeasure-top", type=_count, default=3, metavar="K",
                   help="at the end, measure the K best configs again (default: 3; 0: no)")
    t.add_argument("--remeasure-rounds", type=_positive(int), default=3, metavar="R",
                   help="interleaved rounds of that re-measure (default: 3)")
    t.add_argument("--race-rounds", type=_count, default=2, metavar="R",
                   help="a candidate whose one timing beats the incumbent's is raced against "
                        "it in R interleaved rounds before it can become the incumbent "
                        "(default: 2; 0: no races, the luckiest timing leads)")
    t.add_argument("--remeasure-one-process", action="store_true",
                   help="run every re-measure round in the tuning's runner process (default: "
                        "each round in a new one, with new arrays: a memory-bound kernel's "
                        "time depends on where its arrays lie)")
    t.add_argument("--noise-threshold", type=float, default=0.1, metavar="F",
                   help="measure a candidate again when a reference kernel timed around it "
                        "drifted more than F (default: 0.1 = 10%%; 0: no noise guard)")
    t.add_argument("--busy-threshold", type=_nonnegative, default=0.5, metavar="C",
                   help="warn when other processes keep more than C cores busy while "
                        "candidates are timed (default: 0.5; 0: no contention guard)")
    t.add_argument("--busy-wait", type=_nonnegative, default=0.0, metavar="S",
                   help="while they do, wait up to S seconds before timing each candidate "
                        "(default: 0: only warn)")
    t.add_argument("--transfer", nargs="+", metavar="LOG", default=None,
                   help="warm-start the gbt tuner's cost model from these logs of other "
                        "tasks (e.g. other sizes of the operator)")
    t.add_argument("--sampler", default="tpe", help="Optuna sampler (with --tuner optuna)")
    t.add_argument("--storage", default=None, help="Optuna storage URL shared by workers")
    t.add_argument("--study", default=None, help="Optuna study name shared by workers")
    t.set_defaults(func=cmd_tune)


def _show_parser(sub) -> None:
    s = sub.add_parser("show", help="print the loop nest, C source or steps of a schedule")
    _op_args(s)
    s.add_argument("--args", help="comma-separated template arguments (default: the file's)")
    _log_args(s, "use the best config of this log (else the hand schedule)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--lowered", action="store_true", help="the loop nest (default)")
    g.add_argument("--source", action="store_true", help="the generated code")
    g.add_argument("--steps", action="store_true", help="the schedule's recorded steps")
    g.add_argument("--html", metavar="OUT.html",
                   help="write the loop nest as one static HTML page (loop kinds coloured, "
                        "buffer sizes; '-': standard output)")
    s.set_defaults(func=cmd_show)


def _export_parser(sub) -> None:
    e = sub.add_parser("export", help="export operators as a C library (.so .a .h .c)")
    e.add_argument("files", nargs="+", metavar="FILE", help="operator files")
    e.add_argument("--args", help="arguments for every operator (default: each file's)")
    _log_args(e, "use each operator's best tuned config from this log")
    e.add_argument("--target", default="c", help="c (default) or an opencl target: the "
                   "library then runs the kernels through the OpenCL loader")
    e.add_argument("-o", "--output", required=True, help="library path without extension")
    from .export_cli import add_march_argument
    add_march_argument(e)
    e.set_defaults(func=cmd_export)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    p = _Parser(prog="looptune", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=f"looptune {__version__}",
                   help="print looptune's version and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _tune_parser(sub)
    _show_parser(sub)

    b = sub.add_parser("bench", help="time operators against their numpy reference")
    _op_args(b, many=True)
    b.add_argument("--args", help="arguments for every operator (default: each file's)")
    _log_args(b, "also time the best tuned config of this log")
    b.add_argument("--repeat", type=_positive(int), default=7,
                   help="interleaved rounds of looptune and numpy (default: 7)")
    b.set_defaults(func=cmd_bench)
    _export_parser(sub)

    r = sub.add_parser("report", help="tuning curves, error kinds and the best configs")
    r.add_argument("logs", nargs="+", metavar="LOG", help="tuning logs ('-': standard input)")
    r.add_argument("-o", "--output", help="draw every trial, the best so far and the "
                   "baselines to this PNG (several logs overlay)")
    r.add_argument("--top", type=_positive(int), default=5,
                   help="best configs listed per task (default: 5)")
    r.add_argument("--op", action="append", metavar="FILE",
                   help="operator file whose hand schedule and numpy reference are timed as "
                        "the baselines (default: the bundled example defining the template)")
    r.add_argument("--no-baselines", action="store_true",
                   help="draw no hand-schedule and numpy lines (nothing is timed)")
    r.add_argument("--rounds", type=_positive(int), default=5,
                   help="interleaved rounds timing the baselines (default: 5)")
    r.set_defaults(func=cmd_report)

    m = sub.add_parser("merge", help="merge several workers' tuning logs into one")
    m.add_argument("logs", nargs="+", metavar="LOG", help="tuning logs to merge")
    m.add_argument("-o", "--output", required=True, metavar="ALL.jsonl",
                   help="the merged log (every record once, in time order)")
    m.set_defaults(func=cmd_merge)

    c = sub.add_parser("cache", help="the build cache: its size; empty or prune it")
    c.add_argument("--clear", action="store_true", help="remove every cached build")
    c.add_argument("--max-size", metavar="SIZE",
                   help="remove the least recently used builds down to SIZE (4G, 500M)")
    c.set_defaults(func=cmd_cache)

    from .graph.cli import add_parser as add_graph_parser
    add_graph_parser(sub)
    from .graph.model_cli import add_parsers as add_model_parsers
    add_model_parsers(sub, b)                 # looptune compile; bench's ONNX model options
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="looptune: %(message)s")
    try:
        ns = build_parser().parse_args(argv)
    except SystemExit as e:           # --help, --version, or a mistake argparse reported
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        return ns.func(ns)
    except CLIError as e:
        print(f"looptune {ns.command}: error: {e}", file=sys.stderr)
        return 2
    except LooptuneError as e:       # a user mistake looptune diagnosed: one line, exit 2
        print(f"looptune {ns.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"looptune {ns.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `looptune show ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
