"""looptune against its peers, measured so that the figure holds (shared/BENCHMARKS.md).

    python benchmarks/peers.py [--rounds 3] [--only sgemm,blur] [--threads 2]
                               [--halide hand,adams2019] [--log T.jsonl | --log DIR]
                               [--isa native|avx2] [--fast-math] [--quick] [--json out.json]

Workloads (issue 19): sgemm 1024^3 f32, conv2d 1x64x56x56 -> 64 3x3 pad 1, softmax and
layernorm over rows of 4096 x 1024, the two-stage 3x3 blur of 4096^2 (``--quick``: small sizes,
to check that everything runs end to end).

Systems: numpy (always; the examples' ``reference`` functions: OpenBLAS sgemm, im2col +
tensordot, ...), PyTorch eager (when ``import torch`` works), Halide (when ``import halide``
works; the pipelines of ``peers_halide.py``) in the columns chosen by ``--halide`` (default
both): ``hand``, its hand schedules, and ``adams2019``, the same algorithm scheduled by Halide's
Adams2019 auto scheduler (the plugin of the halide wheel, ``parallelism`` = ``--threads``),
looptune's hand schedules from ``examples/`` (every operator of the example file: ``conv2d``,
``conv2d_nchwc`` and ``conv2d_winograd``) and, with ``--log``, the best tuned or auto-scheduled config the logs
hold (merged; a directory stands for its ``*.jsonl`` files, e.g. the ``--out`` of
``benchmarks/auto_schedule.py``, whose ``<op>.jsonl`` hold the auto task of the example's
algorithm at its default size, the full size here). An operator without a record in the logs
is left out of "looptune tuned", a workload without any says "no record" (the reason printed
below the table). A system that cannot be imported is listed as skipped with the reason.
"auto vs Adams2019" = Adams2019's time / looptune tuned's (issue 16's goal: 1.5x).

Method: every measurement runs in a fresh process (thread pools of different libraries slow
each other down in one process), with every library's thread count set to ``--threads``
(looptune: the target ``c -threads=N``) and each library's thread pool as its users get it:
looptune's with looptune's defaults, the peers' with their own (``runtime_env.peer_environment``:
torch's bundled libgomp spins as libgomp does, not as looptune chose); each process warms up, times
blocks of calls of at least 20 ms, and reports the median per call, then checks its output against
the numpy reference (after timing, so that numpy's BLAS threads do not run beside the timed kernel).
Rounds run the measurements in a shuffled order; the table shows each one's median over the
rounds and "vs best peer" = (best peer's time) / (best looptune time): above 1.10 meets the
issue's goal. Absolute times move +-50% between minutes on shared VMs: compare ratios of one run.

``--fast-math`` also times every looptune operator built with the target option -fast-math
(variant "<operator> -fast-math"): looptune's float division by a constant is exact by default
(``lt_divf``, bit for bit numpy's), Halide's is not (its blur differs from numpy's in 72% of
the points, by up to 5 ulp, on a Zen 3 with the halide wheel 21): with -fast-math the division
is a multiply by the reciprocal, the same class of arithmetic. A cell names the variant when
it is the fastest, so a goal met only that way shows.

``--isa avx2`` holds every system to AVX2 (``isa.py``: each library's own switch, checked in
every worker; looptune through ``LOOPTUNE_MARCH=x86-64-v3``, so its schedules size their tiles
for 8 lanes and 16 registers), which stands in for an AVX2 machine on an AVX-512 one; the
floors are then measured at AVX2 too. Tuned logs must then come from a tune run under the same
``LOOPTUNE_MARCH`` (records of another -march are not applied).

Below the table, one line per workload says whether the goal is met and, if not, why: the
machine's floor for the work (``floor_spec``: sgemm and conv2d at the FMA peak of
``fma_peak.py``, for the direct convolution's multiplies (conv2d_winograd does 4x fewer, so
it can run under that floor); softmax, layernorm and blur at the time of y = 2x over their arrays, the
``scale`` of ``memory_floor.py``), measured in a fresh process after the rounds, against
1.1x the best peer: "out of reach here" when that would beat the floor, else how close
looptune and the peer come to it (``--no-floors`` skips this).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:     # isa.py, fma_peak.py, ... beside this file, when imported
    sys.path.insert(0, str(HERE))
import isa as isas  # noqa: E402  (the worker's parameter ``isa`` is the name of one)

EXAMPLES = HERE.parent / "examples"

# workload -> (example file, full-size args, --quick args); args in the example's order
WORKLOADS = {
    "sgemm": ("matmul.py", (1024, 1024, 1024), (256, 256, 256)),
    "conv2d": ("conv2d.py", (1, 64, 56, 56, 64, 3, 3, 1, 1), (1, 16, 28, 28, 16, 3, 3, 1, 1)),
    "softmax": ("softmax.py", (4096, 1024), (256, 1024)),
    "layernorm": ("layernorm.py", (4096, 1024), (256, 1024)),
    "blur": ("blur.py", (4096, 4096), (512, 512)),
}
HALIDE_VARIANTS = {"blur": ("inline", "tiled")}     # hand schedules; default ("",)
ADAMS = "adams2019"                                 # peers_halide's auto-scheduled variant
HALIDE_KINDS = ("hand", ADAMS)                      # --halide
HALIDE_COLUMNS = {"hand": "Halide hand", ADAMS: "Halide Adams2019"}   # kind -> table column
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "HL_NUM_THREADS")


@dataclass(frozen=True)
class Job:
    """One measurement: a workload on a system (variant: an operator, a Halide schedule)."""

    workload: str
    system: str           # numpy | torch | halide | looptune-hand | looptune-tuned
    variant: str = ""

    @property
    def label(self) -> str:
        return f"{self.system}:{self.variant}" if self.variant else self.system

    @property
    def column(self) -> str:
        """The table column that shows this job."""
        if self.system == "halide":
            return HALIDE_COLUMNS[ADAMS if self.variant == ADAMS else "hand"]
        return {"looptune-hand": "looptune hand", "looptune-tuned": "looptune tuned"}.get(
            self.system, self.system)


@dataclass
class Result:
    times: list[float] = field(default_factory=list)   # one median per round
    errors: list[str] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None


# ---- inputs, references and timing (in the worker) ------------------------------------------


def _operators(workload: str):
    from looptune.operators import load_operators
    return load_operators(str(EXAMPLES / WORKLOADS[workload][0]))


def _inputs(workload: str, args: tuple):
    """The workload's input arrays (seeded) and its output array, numpy only."""
    import numpy as np
    rng = np.random.default_rng(0)

    def f32(*shape, lo=0.0, hi=1.0):
        return rng.uniform(lo, hi, shape).astype(np.float32)
    if workload == "sgemm":
        N, M, K = args
        return [f32(N, K, lo=-1), f32(K, M, lo=-1)], np.empty((N, M), np.float32)
    if workload == "conv2d":
        N, C, H, W, K, KH, KW, _, _ = args
        return [f32(N, C, H, W), f32(K, C, KH, KW, lo=-0.5, hi=0.5)], \
            np.empty((N, K, *_conv_out(args)), np.float32)
    if workload == "softmax":
        return [f32(*args, lo=-8, hi=8)], np.empty(args, np.float32)
    if workload == "layernorm":
        N, D = args
        return [f32(N, D, lo=-3, hi=5), f32(D), f32(D)], np.empty((N, D), np.float32)
    H, W = args
    return [f32(H + 2, W + 2)], np.empty((H, W), np.float32)


def _conv_out(args: tuple) -> tuple[int, int]:
    """conv2d's output height and width at ``args`` (N, C, H, W, K, KH, KW, stride, pad)."""
    _, _, H, W, _, KH, KW, stride, pad = args
    return (H + 2 * pad - KH) // stride + 1, (W + 2 * pad - KW) // stride + 1


def _time(run, min_block_s: float, repeat: int, clock=time.perf_counter) -> float:
    """Median seconds per call: ``repeat`` blocks of calls, each at least ``min_block_s``."""
    for _ in range(2):
        run()
    t0 = clock()
    run()
    one = max(clock() - t0, 1e-7)
    number = max(1, int(min_block_s / one))
    per_call = []
    for _ in range(repeat):
        t0 = clock()
        for _ in range(number):
            run()
        per_call.append((clock() - t0) / number)
    return statistics.median(per_call)


def _torch_call(workload: str, args: tuple, inputs, output):
    """The torch eager call; it returns its result (a new tensor, as a torch user gets it,
    or ``output`` itself where torch offers ``out=``)."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    t = [torch.from_numpy(a) for a in inputs]
    if workload == "sgemm":
        out = torch.from_numpy(output)
        return lambda: torch.mm(t[0], t[1], out=out)
    if workload == "conv2d":
        return lambda: F.conv2d(t[0], t[1], stride=args[7], padding=args[8])
    if workload == "softmax":
        return lambda: torch.softmax(t[0], dim=1)
    if workload == "layernorm":
        (op,) = _operators("layernorm")
        eps = sys.modules[op.reference.__module__].EPS      # the example's epsilon
        return lambda: F.layer_norm(t[0], (args[1],), t[1], t[2], eps)

    def blur():
        x = t[0]
        bx = (x[:, :-2] + x[:, 1:-1] + x[:, 2:]) / 3
        return (bx[:-2] + bx[1:-1] + bx[2:]) / 3
    return blur


FAST_MATH = "-fast-math"   # --fast-math: the looptune variants "<operator> -fast-math"


def _looptune_call(job: Job, args: tuple, inputs, output, threads: int, logs: list[str]):
    """A looptune job's call; its variant names the operator, then any target options."""
    import looptune as lt
    from looptune.operators import instantiate
    name, _, options = job.variant.partition(" ")
    (op,) = [o for o in _operators(job.workload) if o.name == name]
    if job.system == "looptune-tuned":
        s, tensors, how = instantiate(op, args, logs, "c")
    else:
        (s, tensors), how = op.hand_schedule(*args), "hand schedule"
    f = lt.build(s, tensors, target=f"c -threads={threads} {options}".strip(), name=op.c_name)
    arrays = [*inputs, output]
    return (lambda: f(*arrays)), how


def worker(job: Job, args: tuple, threads: int, logs: list[str], quick: bool,
           cpu_clock: bool = False, isa: str = "native") -> dict:
    """Build, time and check one job in this (fresh) process, at instruction set ``isa``
    (RuntimeError when the system does not run at it)."""
    held = isas.verify(job.system, isa)
    inputs, output = _inputs(job.workload, args)
    (op, *_) = _operators(job.workload)
    reference = op.reference_for(args)
    note = ""
    if job.system == "numpy":
        run = lambda: reference(*inputs)
    elif job.system == "torch":
        run = _torch_call(job.workload, args, inputs, output)
    elif job.system == "halide":
        import peers_halide
        kw = {"variant": job.variant} if job.variant else {}
        run = peers_halide.BUILDERS[job.workload](args, inputs, output, **kw)
        note = getattr(run, "note", "")
    else:
        run, note = _looptune_call(job, args, inputs, output, threads, logs)
    clock = time.process_time if cpu_clock else time.perf_counter
    seconds = _time(run, 0.005 if quick else 0.02, 3 if quick else 7, clock)
    if job.system != "numpy":
        res = run()
        got = output if res is None else res.numpy() if job.system == "torch" else res
        _check(job, got, reference(*inputs))
    return {"seconds": seconds, "note": "; ".join(n for n in (note, held) if n)}


def _check(job: Job, got, want) -> None:
    import numpy as np
    if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
        err = float(np.nanmax(np.abs(got.astype(np.float64) - want)))
        raise RuntimeError(f"{job.label} on {job.workload}: the output differs from numpy's "
                           f"(max abs error {err:.3g}); its time is not reported")


# ---- the driver ------------------------------------------------------------------------------


def probe(module: str) -> str | None:
    """None when ``import module`` works in a fresh process, else the reason it does not."""
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                          text=True, check=False)
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    return f"`import {module}` failed: {last}"


def make_jobs(workloads: list[str], logs: list[str], skipped: dict[str, str],
              halide: tuple[str, ...] = HALIDE_KINDS,
              tuned: dict[str, list[str]] | None = None, fast_math: bool = False) -> list[Job]:
    """The measurements: every system that is not skipped, the Halide kinds of ``halide``,
    and with ``logs`` the operators ``tuned`` names per workload (default: all of them);
    ``fast_math``: each looptune job also built with -fast-math."""
    jobs = []
    for w in workloads:
        jobs.append(Job(w, "numpy"))
        if "torch" not in skipped:
            jobs.append(Job(w, "torch"))
        if "halide" not in skipped:
            if "hand" in halide:
                jobs += [Job(w, "halide", v) for v in HALIDE_VARIANTS.get(w, ("",))]
            if ADAMS in halide:
                jobs.append(Job(w, "halide", ADAMS))
        names = [op.name for op in _operators(w)]
        variants = [""] + [f" {FAST_MATH}"] * fast_math
        jobs += [Job(w, "looptune-hand", n + v) for n in names for v in variants]
        if logs:
            jobs += [Job(w, "looptune-tuned", n + v) for n in (names if tuned is None
                                                               else tuned.get(w, []))
                     for v in variants]
    return jobs


def tuned_operators(workload: str, args: tuple, logs: list[str]) -> tuple[list[str], str]:
    """(the operators of ``workload`` whose best config ``logs`` hold at ``args``, why the
    others are left out): what ``--log`` can time, checked before any measurement."""
    from looptune.operators import best_record
    names, why = [], []
    for op in _operators(workload):
        try:
            best_record(op, args, logs, "c")
        except Exception as e:  # noqa: BLE001 - CLIError or a template that fails: say why
            why.append(f"{op.name}: {' '.join(str(e).split())[:400]}")
        else:
            names.append(op.name)
    return names, "; ".join(why)


def run_job(job: Job, opts) -> dict:
    """One measurement in a fresh process: {"seconds", "note"} or {"error"}."""
    from looptune.runtime_env import peer_environment
    env = dict(os.environ, **{v: str(opts.threads) for v in THREAD_VARS})
    if not job.system.startswith("looptune"):   # the peers run with their own pool settings
        env = peer_environment(env)
    env.update(isas.environment(opts.isa))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
           json.dumps([job.workload, job.system, job.variant]), "--threads", str(opts.threads),
           "--isa", opts.isa]
    cmd += ["--quick"] if opts.quick else []
    cmd += ["--clock", opts.clock]
    for lg in opts.log:
        cmd += ["--log", lg]
    return _run_worker(cmd, env, opts.timeout)


def _run_worker(cmd: list[str], env: dict, timeout: float) -> dict:
    """Run a worker process; the JSON object of its last ``{`` line, or ``{"error": ...}``."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return {"error": tail[:300]}
    return json.loads(lines[-1])


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        out = ""
    info = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    name = info.get("Model name", "unknown CPU").strip()
    flags = info.get("Flags", "").split()
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE/other"
    return f"{name}, {info.get('CPU(s)', '?').strip()} CPUs, {simd}"


def measure(jobs: list[Job], opts) -> dict[Job, Result]:
    results = {j: Result() for j in jobs}
    rng = random.Random(opts.seed)
    for rnd in range(opts.rounds):
        order = list(jobs)
        rng.shuffle(order)
        for job in order:
            out = run_job(job, opts)
            res = results[job]
            if "error" in out:
                res.errors.append(out["error"])
                print(f"  round {rnd + 1}: {job.workload} {job.label}: {out['error']}",
                      file=sys.stderr)
            else:
                res.times.append(out["seconds"])
                if opts.verbose:
                    note = f" ({out['note']})" if out.get("note") else ""
                    print(f"  round {rnd + 1}: {job.workload} {job.label}: "
                          f"{out['seconds'] * 1e3:.3f} ms{note}", file=sys.stderr)
    return results


def _best(results: dict[Job, Result], workload: str, columns: tuple[str, ...]):
    """(median seconds, job) of the fastest job of ``columns`` on ``workload``, or None."""
    cands = [(r.median, j) for j, r in results.items()
             if j.workload == workload and j.column in columns and r.median is not None]
    return min(cands, key=lambda c: c[0]) if cands else None


def _module(column: str) -> str:
    return "halide" if column.startswith("Halide") else column


def _cell(results, workload: str, column: str, skipped: dict[str, str],
          no_record: dict[str, str]) -> str:
    best = _best(results, workload, (column,))
    if best is None:
        if _module(column) in skipped:
            return "skipped"
        errs = [r for j, r in results.items() if j.workload == workload and j.column == column]
        if any(r.errors for r in errs):
            return "error"
        return "no record" if column == "looptune tuned" and workload in no_record else "-"
    t, job = best
    many = sum(1 for j in results if j.workload == workload and j.column == column) > 1
    return f"{t * 1e3:.3f}" + _spread(results[job].times) + \
        (f" ({job.variant})" if many and job.variant else "")


def _spread(times: list[float]) -> str:
    """`` ±N%``: half the range of the rounds' times over their median (none for one)."""
    if len(times) < 2:
        return ""
    return f" ±{(max(times) - min(times)) / 2 / statistics.median(times):.0%}"


def _ratio(results, workload: str, peers: tuple[str, ...], mine: tuple[str, ...],
           goal: float, named: bool) -> str:
    peer, me = _best(results, workload, peers), _best(results, workload, mine)
    if not (peer and me):
        return "-"
    ratio = peer[0] / me[0]
    return f"{ratio:.2f}x" + (f" vs {peer[1].column}" if named else "") + \
        (f" (goal {goal:.2f}x met)" if ratio >= goal else "") + \
        _per_round(results[peer[1]].times, results[me[1]].times, goal)


def _per_round(peer: list[float], mine: list[float], goal: float) -> str:
    """The ratio round by round (each round measured every job once, in shuffled order, so
    a round's two times are neighbours in time): its range, and in how many rounds the goal
    was met; none for one round."""
    if len(peer) < 2 or len(peer) != len(mine):
        return ""
    r = [p / m for p, m in zip(peer, mine)]
    return f"; rounds {min(r):.2f}-{max(r):.2f}x, goal in {sum(x >= goal for x in r)}/{len(r)}"


def columns(halide: tuple[str, ...], with_tuned: bool) -> tuple[list[str], list[str]]:
    """(the peers' columns, looptune's) of the table."""
    peers = ["numpy", *(HALIDE_COLUMNS[k] for k in HALIDE_KINDS if k in halide), "torch"]
    return peers, ["looptune hand"] + ["looptune tuned"] * with_tuned


def table(results: dict[Job, Result], workloads: list[str], skipped: dict[str, str],
          with_tuned: bool, halide: tuple[str, ...] = HALIDE_KINDS,
          no_record: dict[str, str] | None = None) -> str:
    peers, mine = columns(halide, with_tuned)
    versus_adams = with_tuned and ADAMS in halide
    cols = ["workload", *(f"{c} ms" for c in peers + mine), "looptune vs best peer"]
    cols += ["auto vs Adams2019"] if versus_adams else []
    rows = [cols, ["---"] * len(cols)]
    for w in workloads:
        row = [f"{w} {'x'.join(map(str, opts_args(w)))}"]
        row += [_cell(results, w, c, skipped, no_record or {}) for c in peers + mine]
        row.append(_ratio(results, w, tuple(peers), tuple(mine), 1.10, True))
        if versus_adams:
            row.append(_ratio(results, w, (HALIDE_COLUMNS[ADAMS],), ("looptune tuned",), 1.5,
                              False))
        rows.append(row)
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def skip_notes(skipped: dict[str, str], halide: tuple[str, ...],
               no_record: dict[str, str]) -> list[str]:
    """The lines below the table that say what was not measured, and why."""
    out = []
    for m, reason in skipped.items():
        what = m if m != "halide" else \
            f"halide ({', '.join(HALIDE_COLUMNS[k] for k in halide) or 'no column chosen'})"
        out.append(f"{what}: skipped: {reason}")
    out += [f"{w}: looptune tuned leaves out {why}" for w, why in no_record.items()]
    return out


_ARGS: dict[str, tuple] = {}


def opts_args(workload: str) -> tuple:
    return _ARGS[workload]


# ---- the machine's floors: why a workload falls short of the goal --------------------------

GOAL = 1.10       # issue 19: looptune at least 1.1x faster than the best peer


def floor_spec(workload: str, args: tuple) -> tuple[str, float | tuple[int, int]]:
    """What bounds ``workload`` at ``args`` from below: ``("fma", flop)`` for the contractions
    (no kernel beats the machine's FMA peak), ``("stream", (rows, cols))`` for the row-wise
    and stencil ones (no kernel that reads its input and writes its output beats y = 2x over
    a float32 array of that shape, the arrays they move)."""
    if workload == "sgemm":
        M, N, K = args
        return "fma", 2.0 * M * N * K
    if workload == "conv2d":
        N, C, _, _, K, KH, KW, _, _ = args
        OH, OW = _conv_out(args)
        return "fma", 2.0 * N * K * OH * OW * C * KH * KW
    return "stream", tuple(args[:2])


def floors_worker(workloads: list[str], threads: int, rounds: int = 3) -> dict:
    """In a fresh process: the FMA peak on ``threads`` threads (benchmarks/fma_peak.py) and,
    for each streaming workload, the time of y = 2x over its shape (benchmarks/memory_floor.py's
    ``scale`` and ``streamed_scale``, median of ``rounds`` blocks of at least 20 ms each; the
    floor is the faster, ``stream_nt`` says whether that was the streamed one: a kernel may
    stream its output too)."""
    import tempfile

    import fma_peak
    import memory_floor
    import numpy as np
    out: dict = {"stream_s": {}, "stream_nt": {}}
    specs = {w: floor_spec(w, _ARGS[w]) for w in workloads}
    if any(kind == "fma" for kind, _ in specs.values()):
        from looptune.backends.target import default_march
        with tempfile.TemporaryDirectory(prefix="fma-peak-") as d:
            exe = fma_peak.build(d, default_march())
            out["lanes"], out["fma_gflops"] = fma_peak.peak(exe, threads, rounds)
    for w, (kind, shape) in specs.items():
        if kind == "stream":
            scale, _ = memory_floor.kernels(*shape, threads)
            streamed = memory_floor.streamed_scale(*shape, threads)
            a = np.random.default_rng(0).random(shape, dtype=np.float32)
            b = np.empty_like(a)
            plain = _time(lambda f=scale, x=a, y=b: f(x, y), 0.02, rounds)
            nt = _time(lambda f=streamed, x=a, y=b: f(x, y), 0.02, rounds)
            out["stream_s"][w], out["stream_nt"][w] = min(plain, nt), nt < plain
    return out


def machine_floors(opts) -> dict:
    """``floors_worker`` in a fresh process (looptune's own thread-pool settings), or
    ``{"error": ...}``."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--floors-worker",
           ",".join(opts.workloads), "--threads", str(opts.threads)]
    cmd += ["--quick"] if opts.quick else []
    env = dict(os.environ, **{v: str(opts.threads) for v in THREAD_VARS})
    env.update(isas.environment(opts.isa))
    return _run_worker(cmd, env, opts.timeout)


def verdicts(results: dict[Job, Result], workloads: list[str], peers: tuple[str, ...],
             mine: tuple[str, ...], floors: dict) -> list[str]:
    """One line per workload: the goal met, or why not -- out of reach on this machine (1.1x
    the best peer would beat the machine's floor for the work) or within reach (how close
    looptune and the peer come to the floor). A system measured faster than the floor shows
    the floor is not tight (the FMA loop ran at a lower clock, y = 2x missed a streaming
    trick): the goal is then only "beyond the measured floor", not out of reach."""
    out = []
    for w in workloads:
        peer, me = _best(results, w, peers), _best(results, w, mine)
        if not (peer and me):
            continue
        (tp, pjob), (tm, _) = peer, me
        ratio = tp / tm
        head = f"{w}: {ratio:.2f}x {pjob.column}"
        if ratio >= GOAL:
            out.append(f"{head}: goal met")
            continue
        floor, what = _floor(w, floors)
        if floor is None:
            out.append(f"{head}: goal not met ({what})")
            continue
        fastest, fjob = _best(results, w, peers + mine)
        need = tp / GOAL
        if need >= floor:
            out.append(f"{head}: goal not met, within reach: 1.1x {pjob.column} needs "
                       f"{floor / need:.0%} of the floor's speed ({floor * 1e3:.3f} ms: {what}); "
                       f"looptune runs at {floor / tm:.0%}, {pjob.column} at {floor / tp:.0%}")
        elif fastest >= floor:
            out.append(f"{head}: goal out of reach here: 1.1x {pjob.column} is "
                       f"{need * 1e3:.3f} ms, under the floor of {floor * 1e3:.3f} ms ({what});"
                       f" {pjob.column} runs at {floor / tp:.0%} of the floor's speed, "
                       f"looptune at {floor / tm:.0%}")
        else:
            out.append(f"{head}: goal beyond the measured floor: 1.1x {pjob.column} is "
                       f"{need * 1e3:.3f} ms, {floor / need:.0%} of the speed of the floor "
                       f"({floor * 1e3:.3f} ms: {what}), which {fjob.column} beat "
                       f"({fastest * 1e3:.3f} ms), so the floor is not tight; looptune runs at "
                       f"{floor / tm:.0%} of it, {pjob.column} at {floor / tp:.0%}")
    return out


def _floor(workload: str, floors: dict) -> tuple[float | None, str]:
    """(seconds, what it is) of ``workload``'s floor, or (None, why there is none)."""
    if "error" in floors:
        return None, f"the machine's floors were not measured: {floors['error']}"
    kind, size = floor_spec(workload, _ARGS[workload])
    if kind == "fma":
        gf = floors.get("fma_gflops")
        if not gf:
            return None, "the FMA peak was not measured"
        return size / (gf * 1e9), (f"{size / 1e9:.3g} GFLOP at the FMA peak measured by "
                                   f"benchmarks/fma_peak.py, {gf:.0f} GFLOP/s")
    t = floors.get("stream_s", {}).get(workload)
    if not t:
        return None, "the memory floor was not measured"
    mib = size[0] * size[1] * 4 / 2**20
    how = ", streaming stores" if floors.get("stream_nt", {}).get(workload) else ""
    return t, (f"y = 2x over {size[0]}x{size[1]} float32: {mib:g} MiB read and {mib:g} "
               f"written{how}")


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3, help="shuffled rounds (default 3)")
    p.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(WORKLOADS)}")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="threads of every system (default: all CPUs)")
    p.add_argument("--log", action="append", default=[], help="tuning log(s) or folders of "
                   "them (their *.jsonl, e.g. benchmarks/auto_schedule.py's --out): also time "
                   "the best tuned / auto-scheduled config of each example")
    p.add_argument("--halide", default=",".join(HALIDE_KINDS),
                   help="Halide columns, comma-separated: hand (hand schedules), adams2019 "
                   "(Halide's Adams2019 auto scheduler), or none (default: hand,adams2019)")
    p.add_argument("--quick", action="store_true", help="small sizes: a check that all runs")
    p.add_argument("--json", help="also write every measurement to this JSON file")
    p.add_argument("--timeout", type=float, default=900, help="seconds per measurement")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: elapsed time (the figure to report); cpu: the process's CPU "
                   "time, steadier on a machine shared with other work, for A/B decisions "
                   "with --threads 1 (with more threads it sums their work)")
    p.add_argument("--isa", choices=isas.ISAS, default="native",
                   help="native (default): each system at the machine's best; avx2: every "
                   "system held to AVX2 (benchmarks/isa.py), an AVX2 machine stood in for")
    p.add_argument("--seed", type=int, default=0, help="seed of the shuffled order")
    p.add_argument("-v", "--verbose", action="store_true", help="print every measurement")
    p.add_argument("--fast-math", action="store_true",
                   help="also time each looptune operator built with -fast-math: a float "
                   "division by a constant is then a plain multiply by the reciprocal (within "
                   "1.5 ulp) instead of looptune's exact lt_divf, the arithmetic Halide's "
                   "pipelines use (its blur is up to 5 ulp off numpy's); a cell names that "
                   "variant when it is the fastest")
    p.add_argument("--no-floors", dest="floors", action="store_false",
                   help="do not measure the machine's floors (FMA peak, y = 2x) that say why a "
                   "workload falls short of the goal")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--floors-worker", help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    if opts.rounds < 1 or opts.threads < 1:
        p.error(f"--rounds and --threads must be at least 1; got --rounds {opts.rounds} "
                f"--threads {opts.threads}")
    only = [w for w in opts.only.split(",") if w]
    bad = [w for w in only if w not in WORKLOADS]
    if bad:
        p.error(f"--only: unknown workload(s) {', '.join(bad)}; choose from "
                f"{', '.join(WORKLOADS)}")
    opts.workloads = only or list(WORKLOADS)
    opts.halide = _halide_kinds(p, opts.halide)
    opts.log = _log_files(p, opts.log)
    for w, (_, full, quick) in WORKLOADS.items():
        _ARGS[w] = quick if opts.quick else full
    return opts


def _halide_kinds(p: argparse.ArgumentParser, text: str) -> tuple[str, ...]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    if kinds == ["none"]:
        return ()
    bad = [k for k in kinds if k not in HALIDE_KINDS]
    if bad or not kinds:
        p.error(f"--halide: unknown Halide column(s) {', '.join(bad) or repr(text)}; give a "
                f"comma-separated subset of {', '.join(HALIDE_KINDS)}, or none")
    return tuple(k for k in HALIDE_KINDS if k in kinds)


def _log_files(p: argparse.ArgumentParser, logs: list[str]) -> list[str]:
    """``--log`` values as files: a folder stands for its ``*.jsonl``."""
    out = []
    for lg in logs:
        path = Path(lg)
        if path.is_dir():
            found = sorted(str(f) for f in path.glob("*.jsonl"))
            if not found:
                p.error(f"--log {lg}: the folder holds no *.jsonl log")
            out += found
        elif path.is_file():
            out.append(lg)
        else:
            p.error(f"--log {lg}: no such log file or folder")
    return out


def main(argv=None) -> int:
    opts = parse(argv)
    if opts.floors_worker:
        print(json.dumps(floors_worker(opts.floors_worker.split(","), opts.threads)))
        return 0
    if opts.worker:
        w, system, variant = json.loads(opts.worker)
        print(json.dumps(worker(Job(w, system, variant), _ARGS[w], opts.threads, opts.log,
                                opts.quick, opts.clock == "cpu", opts.isa)))
        return 0
    modules = ("torch", "halide") if opts.halide else ("torch",)
    skipped = {m: r for m in modules if (r := probe(m))}
    tuned, no_record = None, {}
    if opts.log:
        tuned = {w: tuned_operators(w, _ARGS[w], opts.log) for w in opts.workloads}
        no_record = {w: why for w, (_, why) in tuned.items() if why}
        tuned = {w: names for w, (names, _) in tuned.items()}
    jobs = make_jobs(opts.workloads, opts.log, skipped, opts.halide, tuned, opts.fast_math)
    held = "" if opts.isa == "native" else f"; every system held to {opts.isa} (isa.py)"
    print(f"CPU: {cpu_model()}{held}; threads per system: {opts.threads}; {opts.rounds} "
          f"shuffled round(s) of {len(jobs)} measurements, each in a fresh process; "
          f"{opts.clock} clock", flush=True)
    from looptune.search.coreload import StealMeter, steal_note
    steal = StealMeter()
    results = measure(jobs, opts)
    stolen = steal.share()
    print(table(results, opts.workloads, skipped, bool(opts.log), opts.halide, no_record))
    print("\n(ms: median over rounds of each process's median per call, ± half the rounds' "
          "range; a looptune or Halide cell names the fastest variant when there are several; "
          "the ratio's rounds: the peer's time over looptune's in each round)")
    for line in skip_notes(skipped, opts.halide, no_record):
        print(line)
    print(steal_note(stolen))
    floors = machine_floors(opts) if opts.floors else None
    if floors is not None:
        peers, mine = columns(opts.halide, bool(opts.log))
        print(f"\nThe goal ({GOAL:.2f}x the best peer) and the machine's floor for each "
              "workload:")
        for line in verdicts(results, opts.workloads, tuple(peers), tuple(mine), floors):
            print("- " + line)
    for j, r in results.items():
        if r.errors:
            print(f"{j.workload} {j.label}: failed in {len(r.errors)} round(s): {r.errors[-1]}")
    if opts.json:
        Path(opts.json).write_text(json.dumps({
            "cpu": cpu_model(), "isa": opts.isa, "threads": opts.threads,
            "rounds": opts.rounds, "steal": stolen,
            "skipped": skipped, "halide": list(opts.halide), "no_record": no_record,
            "floors": floors,
            "results": [{"workload": j.workload, "system": j.system, "variant": j.variant,
                         "args": _ARGS[j.workload], "times": r.times, "errors": r.errors}
                        for j, r in results.items()]}, indent=1))
    return 0 if any(r.times for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
