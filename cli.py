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


def _tuner(name: str, task, seed: int, ns: argparse.Namespace):
    optuna = {"sampler": ns.sampler, "storage": ns.storage, "study_name": ns.study} \
        if name == "optuna" else {}
    return make_tuner(name, task, seed, transfer_logs=ns.transfer, **optuna)


def cmd_tune(ns: argparse.Namespace) -> int:
    from . import search
    from .report import summarise_tuning
    op = select(load_operators(ns.file), ns.template)
    args = parse_args(ns.args, op)
    log_path = Path(ns.log or f"{op.name}.jsonl")
    _check_writable(log_path)
    if ns.transfer and ns.tuner != "gbt":
        raise CLIError(f"--transfer warm-starts the cost model of the gbt tuner; the "
                       f"{ns.tuner} tuner has none: add --tuner gbt, or drop --transfer")
    for f in ns.transfer or ():
        if not Path(f).is_file():
            raise CLIError(f"--transfer: no such log: {f}")
    if ns.auto:
        from .operators import auto_task
        task = auto_task(op, args, ns.target)
    else:
        task = search.create_task(op.name, args, target=ns.target)
    space = "an auto-generated space, " if ns.auto else ""
    print(f"tuning {op.name}{tuple(args)} ({space}task {task.name}) on '{task.target}': "
          f"{len(task.config_space)} configs, {ns.trials} trials with the {ns.tuner} tuner -> "
          f"{log_path}", file=sys.stderr)
    tuner = _tuner(ns.tuner, task, ns.seed, ns)
    if ns.transfer:
        if not tuner.n_transferred:
            raise CLIError(f"--transfer: {', '.join(ns.transfer)} hold no usable records of "
                           f"other tasks (this task's own records are skipped: --resume "
                           f"reuses those; another operator's need its file's template)")
        print(f"transfer: the cost model starts from {tuner.n_transferred} records of other "
              f"tasks", file=sys.stderr)
    opt = search.MeasureOption(number=ns.number, repeat=ns.repeat, timeout=ns.timeout,
                               n_parallel=ns.parallel, min_repeat_ms=ns.min_repeat_ms)
    tuner.tune(ns.trials, opt, callbacks=[search.log_to_file(log_path), search.progress_bar()],
               early_stopping=ns.early_stopping, resume=ns.resume)
    print(summarise_tuning(op, args, ns.target, log_path))
    return 0


def cmd_show(ns: argparse.Namespace) -> int:
    import looptune as lt

    from .operators import instantiate
    op = select(load_operators(ns.file), ns.template)
    args = parse_args(ns.args, op)
    s, tensors, how = instantiate(op, args, ns.log, ns.target)
    print(f"# {op.name}{tuple(args)}: {how}")
    if ns.steps:
        print("\n".join(str(x) for x in s.steps) or "(default schedule: no steps)")
    elif ns.source:
        print(lt.build(s, tensors, target=ns.target, name=op.c_name).source)
    else:
        print(lt.lower(s, tensors, name=op.c_name))
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
    print(bench_table(ops, ns.args, ns.log, ns.target, ns.repeat))
    return 0


def cmd_export(ns: argparse.Namespace) -> int:
    import looptune as lt

    from .operators import instantiate
    mods = []
    for f in ns.files:
        for op in load_operators(f):
            args = parse_args(ns.args, op)
            s, tensors, how = instantiate(op, args, ns.log, ns.target)
            print(f"{op.c_name}: {how}", file=sys.stderr)
            mods.append(lt.build(s, tensors, target=ns.target, name=op.c_name))
    paths = lt.export_library(mods, ns.output)
    for p in paths.values():
        print(p)
    return 0


def cmd_report(ns: argparse.Namespace) -> int:
    from .report import report
    print(report(ns.logs, ns.output, ns.top))
    return 0


def _check_writable(path: Path) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise CLIError(f"cannot write {path}: the folder {parent} does not exist")
    if path.exists() and path.is_dir():
        raise CLIError(f"cannot write {path}: it is a folder")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="looptune", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def op_args(sp, many=False):
        if many:
            sp.add_argument("files", nargs="+", metavar="FILE", help="operator files")
        else:
            sp.add_argument("file", metavar="FILE", help="an operator file, e.g. "
                            "examples/matmul.py")
        sp.add_argument("--template", help="operator NAME when a file holds several")
        sp.add_argument("--target", default="c", help="target string (default: c)")

    t = sub.add_parser("tune", help="tune an operator's template, logging every candidate")
    op_args(t)
    t.add_argument("--args", help="comma-separated template arguments (default: the file's)")
    t.add_argument("--tuner", choices=TUNERS, default="ga")
    t.add_argument("--auto", action="store_true",
                   help="tune a space generated from the operator's algorithm (no template)")
    t.add_argument("--trials", type=int, default=200)
    t.add_argument("--log", help="tuning log (JSON Lines; default NAME.jsonl)")
    t.add_argument("--resume", action="store_true", help="skip configs the log already has")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--early-stopping", type=int, default=None)
    t.add_argument("--parallel", type=int, default=2, help="candidates built at once")
    t.add_argument("--timeout", type=float, default=10.0, help="seconds per build and per run")
    t.add_argument("--number", type=int, default=3)
    t.add_argument("--repeat", type=int, default=3)
    t.add_argument("--min-repeat-ms", type=float, default=0.0)
    t.add_argument("--transfer", nargs="+", metavar="LOG", default=None,
                   help="warm-start the gbt tuner's cost model from these logs of other "
                        "tasks (e.g. other sizes of the operator)")
    t.add_argument("--sampler", default="tpe", help="Optuna sampler (with --tuner optuna)")
    t.add_argument("--storage", default=None, help="Optuna storage URL shared by workers")
    t.add_argument("--study", default=None, help="Optuna study name shared by workers")
    t.set_defaults(func=cmd_tune)

    s = sub.add_parser("show", help="print the loop nest, C source or steps of a schedule")
    op_args(s)
    s.add_argument("--args")
    s.add_argument("--log", help="use the best config of this log (else the hand schedule)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--lowered", action="store_true", help="the loop nest (default)")
    g.add_argument("--source", action="store_true", help="the generated code")
    g.add_argument("--steps", action="store_true", help="the schedule's recorded steps")
    s.set_defaults(func=cmd_show)

    b = sub.add_parser("bench", help="time operators against their numpy reference")
    op_args(b, many=True)
    b.add_argument("--args", help="arguments for every operator (default: each file's)")
    b.add_argument("--log", help="also time the best tuned config of this log")
    b.add_argument("--repeat", type=int, default=7)
    b.set_defaults(func=cmd_bench)

    e = sub.add_parser("export", help="export operators as a C library (.so .a .h .c)")
    e.add_argument("files", nargs="+", metavar="FILE")
    e.add_argument("--args", help="arguments for every operator (default: each file's)")
    e.add_argument("--log", help="use each operator's best tuned config from this log")
    e.add_argument("--target", default="c", help="c (default) or an opencl target: the "
                   "library then runs the kernels through the OpenCL loader")
    e.add_argument("-o", "--output", required=True, help="library path without extension")
    e.set_defaults(func=cmd_export)

    r = sub.add_parser("report", help="tuning curves, error kinds and the best configs")
    r.add_argument("logs", nargs="+", metavar="LOG")
    r.add_argument("-o", "--output", help="write the best-so-far curve to this PNG")
    r.add_argument("--top", type=int, default=5)
    r.set_defaults(func=cmd_report)

    from .graph.cli import add_parser as add_graph_parser
    add_graph_parser(sub)
    from .graph.model_cli import add_parsers as add_model_parsers
    add_model_parsers(sub, b)                 # looptune compile; bench's ONNX model options
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="looptune: %(message)s")
    ns = build_parser().parse_args(argv)
    try:
        return ns.func(ns)
    except CLIError as e:
        print(f"looptune {ns.command}: error: {e}", file=sys.stderr)
        return 2
    except LooptuneError as e:
        print(f"looptune {ns.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"looptune {ns.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `looptune show ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
