"""Measuring candidates: options, results with error kinds, and the Measurer.

For a batch of configs the :class:`Measurer` builds every candidate in parallel (a pool of
``n_parallel`` builder processes, each build bounded by ``timeout``), then runs the ones that
built, one at a time, in a runner process: it checks the outputs against the task's reference
and times ``repeat`` repeats of ``number`` calls. A crash, a hang past ``timeout`` or an
exception is recorded as the candidate's :class:`ErrorKind`; the dead or stuck process is
replaced and the search goes on. Building never overlaps running, so timings are not disturbed
by compilers.

Noise guard: the runner also times a small fixed reference kernel right before and right
after each candidate. When the reference drifted more than ``noise_threshold`` from its recent
median (another process took the cores, the clock changed), the candidate is measured again
(up to ``noise_retries`` times) and the run with the smallest drift is kept; each result's
``noise`` holds that drift, and the log keeps it. :meth:`Measurer.remeasure` times configs
again in interleaved rounds (the top configs at the end of a tune); with ``remeasure_fresh``
each round runs in a new runner process, with newly allocated arrays.

Interleaving: a re-measure round times its configs in turns, one block of ``number`` calls
each, ``repeat`` times over, rather than one config's repeats after another's. On a 2-core Zen 4
VM a memory-bound kernel (softmax over 4096 x 1024 floats: 32 MiB of arrays, the size of the
shared L3) ran at 10-19 GFLOP/s in phases of 0.1-3 s as the host's other tenants used the L3,
so in a long round each config's sample was a draw of the phase it met. 37 configs of that
softmax's auto space, 3 fresh-process rounds, the whole re-measure done twice: one config after
the other, the two agreed to 0.84 in rank correlation and differed by 16% per config on average
(mean |log ratio|); in turns, 0.91-0.94 and 4-6% (two such pairs of runs).

Placement: a memory-bound kernel's time depends on where its arrays lie (huge pages or not,
physical memory, what the process allocated before) and on what else shares the last-level
cache. On a 2-core Zen 4 VM, in the runner process of one layernorm tune, a config that computes
the row sums in a pass of their own timed 0.70-0.80 ms over three rounds against 0.80-1.1 ms
for the fused row schedule, while in fresh processes the fused one won by 15%. So the runner
allocates a task's arrays once and times every candidate on the same ones (a fair comparison
within a process), and the final re-measure samples a new process, hence new placements,
every round.

Contention guard: a load that was there from the start and stays does not make the reference
drift, yet it handicaps every config that runs on all cores (with one core of two taken, a
parallel config is timed at half speed, a serial one at full speed: the tuner learns to prefer
fewer threads). So the runner also counts the CPU time other processes used while it timed
(search/coreload.py). When they kept more than ``busy_threshold`` cores busy over the last
second of timing, the Measurer warns once, counts the runs measured so (``busy_runs``; each
result's ``noise["busy"]`` holds the figure, and the log keeps it), and with ``busy_wait``
waits up to that many seconds for the machine to calm down before timing the next candidate.
"""
from __future__ import annotations

import enum
import logging
import os
import shutil
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import LooptuneError
from .coreload import ForeignProbe, LoadMeter
from .hostlock import timing_lock
from .jobs import builder_init, builder_job, runner_init, runner_job
from .space import ConfigEntity
from .task import Task
from .workers import Outcome, WorkerPool, worker_role

log = logging.getLogger("looptune.search.measure")


def counted(results: Sequence) -> list:
    """Which of one config's correct measurements its cost is the median of: its re-measures
    when it has any (``kind == "remeasure"``), else all of them. The search's one timing of a
    config is left out once the config is re-measured: a config is re-measured *because* that
    timing looked fast (it beat the incumbent, or ranked in the top few), so it is biased
    fast, the winner's curse. Kept in the median, it decided races the re-measures had lost:
    on softmax's auto space a challenger timed 23.3 GFLOP/s alone lost both rounds of its
    race (20.1 and 21.9 against the incumbent's 20.3 and 22.6) and still became the
    incumbent, 21.9 to 21.6 over all records. ``results``: Records or MeasureResults."""
    again = [r for r in results if r.kind == "remeasure"]
    return again or list(results)


class ErrorKind(str, enum.Enum):
    """How a candidate's measurement ended."""

    NONE = "none"                      # measured: costs hold the repeats
    INVALID_CONFIG = "invalid_config"  # the config makes an invalid schedule (ScheduleError)
    BUILD_ERROR = "build_error"        # the template or the compiler failed
    BUILD_TIMEOUT = "build_timeout"    # building took longer than the timeout
    RUNTIME_ERROR = "runtime_error"    # running raised an exception
    CRASH = "crash"                    # a worker process died (segfault, abort, ...)
    TIMEOUT = "timeout"                # running took longer than the timeout
    WRONG_RESULT = "wrong_result"      # the outputs differ from the reference

    def __str__(self) -> str:
        return self.value


@dataclass
class MeasureOption:
    """How to measure candidates.

    ``number`` calls per repeat (raised until a repeat lasts ``min_repeat_ms``), ``repeat``
    repeats (the cost is their median); ``timeout`` seconds bound each build and each run;
    ``n_parallel`` builder processes (default: the CPU count), also the tuners' batch size;
    ``check_correctness`` compares outputs with the task's default schedule on inputs from
    ``seed`` (within ``rtol``/``atol``, by dtype when None); ``flush_cache`` evicts the caches
    before each repeat (``min_repeat_ms`` is then ignored); ``warmup_ms`` of untimed calls
    come first (shared by the placements each candidate is timed at, each warmed just before
    its repeats; at least one call each): right after the runner waited for a build, a
    multi-threaded kernel runs slower for a while as its sleeping threads' cores wake up
    (50-100 ms on a 2-core KVM guest), which penalised parallel configs of small kernels
    (0.1-0.3 ms) against serial ones. A candidate whose first (checked) call takes longer
    than ``cutoff_min_ms`` and ``slow_cutoff`` times the best cost measured so far is not
    timed further: that call is its cost (it cannot be the best), which keeps hopeless
    candidates from eating the tuning time; ``slow_cutoff=None`` times every candidate in
    full.

    At the end of a tune the ``remeasure_top`` best configs are measured again in
    ``remeasure_rounds`` interleaved rounds (0: no re-measure); the best is then chosen by the
    median over each config's re-measures (``counted``). ``noise_threshold`` (a fraction;
    None: off) and ``noise_retries`` control the noise guard; ``busy_threshold`` (cores other
    processes may keep busy; None: off) and ``busy_wait`` (seconds to wait for them to stop before a run;
    0: only warn) the contention guard; ``remeasure_fresh`` runs each re-measure round in a new
    runner process (see the module docstring); ``remeasure_interleaved`` times a round's
    configs in turns, block by block (False: one config after the other, each with its own
    warm-up and noise check). ``race_rounds`` (0: off): during a tune, a config whose one
    measurement beats the incumbent's is raced against it in that many interleaved rounds
    before it can become the incumbent (``Tuner`` explains the rule).
    """

    number: int = 4
    repeat: int = 3
    min_repeat_ms: float = 0.0
    warmup_ms: float = 50.0
    timeout: float = 10.0
    n_parallel: int | None = None
    check_correctness: bool = True
    flush_cache: bool = False
    rtol: float | None = None
    atol: float | None = None
    seed: int = 0
    slow_cutoff: float | None = 10.0
    cutoff_min_ms: float = 50.0
    remeasure_top: int = 3
    remeasure_rounds: int = 3
    remeasure_fresh: bool = True
    remeasure_interleaved: bool = True
    race_rounds: int = 2
    noise_threshold: float | None = 0.1
    noise_retries: int = 2
    busy_threshold: float | None = 0.5
    busy_wait: float = 0.0

    def __post_init__(self):
        if self.n_parallel is None:
            self.n_parallel = os.cpu_count() or 1
        for name in ("number", "repeat", "n_parallel"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise LooptuneError(f"MeasureOption: {name} must be a positive int; got {v!r}")
        if not self.timeout or self.timeout <= 0:
            raise LooptuneError(f"MeasureOption: timeout must be positive seconds; got "
                                f"{self.timeout!r}")
        for name in ("remeasure_fresh", "remeasure_interleaved"):
            if not isinstance(getattr(self, name), bool):
                raise LooptuneError(f"MeasureOption: {name} must be True or False; got "
                                    f"{getattr(self, name)!r}")
        if self.min_repeat_ms < 0:
            raise LooptuneError("MeasureOption: min_repeat_ms must be >= 0")
        w = self.warmup_ms
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not w >= 0:
            raise LooptuneError(f"MeasureOption: warmup_ms must be milliseconds >= 0 (0: one "
                                f"untimed call); got {w!r}")
        if self.slow_cutoff is not None and not self.slow_cutoff > 1:
            raise LooptuneError(f"MeasureOption: slow_cutoff must be > 1 (or None); got "
                                f"{self.slow_cutoff!r}")
        for name, low in (("remeasure_top", 0), ("remeasure_rounds", 1), ("race_rounds", 0),
                          ("noise_retries", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise LooptuneError(f"MeasureOption: {name} must be an int >= {low}; got {v!r}")
        t = self.noise_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not 0 < t < 10):
            raise LooptuneError(f"MeasureOption: noise_threshold must be a fraction in (0, 10) "
                                f"such as 0.1 (10%), or None to turn the noise guard off; got "
                                f"{t!r}")
        b = self.busy_threshold
        if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float))
                              or not b > 0):
            raise LooptuneError(f"MeasureOption: busy_threshold must be a positive number of "
                                f"cores such as 0.5, or None to turn the contention guard off; "
                                f"got {b!r}")
        w = self.busy_wait
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not w >= 0:
            raise LooptuneError(f"MeasureOption: busy_wait must be seconds >= 0 (0: do not "
                                f"wait); got {w!r}")


@dataclass
class MeasureResult:
    """One measured candidate: its config, every repeat's seconds, and how it ended."""

    config: ConfigEntity
    costs: list[float] = field(default_factory=list)
    error_kind: ErrorKind = ErrorKind.NONE
    error_msg: str = ""
    build_time: float = 0.0
    run_time: float = 0.0
    timestamp: float = field(default_factory=time.time)
    steps: str | None = None
    flop: float | None = None
    kind: str = "measure"                  # "remeasure": a run confirming a top config
    noise: dict | None = None              # the reference's drift, other processes' load

    @property
    def ok(self) -> bool:
        """Measured correctly (no error, at least one cost)."""
        return self.error_kind is ErrorKind.NONE and bool(self.costs)

    @property
    def cost(self) -> float:
        """Median seconds per call; ``inf`` for a failed candidate."""
        return statistics.median(self.costs) if self.ok else float("inf")

    @property
    def gflops(self) -> float | None:
        """GFLOP/s at the median cost (None when failed or the FLOPs are unknown)."""
        if not self.ok or not self.flop or self.cost <= 0:
            return None
        return self.flop / self.cost / 1e9

    def __str__(self) -> str:
        if self.ok:
            rate = f", {self.gflops:.2f} GFLOP/s" if self.gflops else ""
            return f"{self.config}: {self.cost * 1e3:.4f} ms{rate}"
        return f"{self.config}: {self.error_kind.value}: {self.error_msg.splitlines()[0][:200]}" \
            if self.error_msg else f"{self.config}: {self.error_kind.value}"


def _short(msg: str, limit: int = 4000) -> str:
    return msg if len(msg) <= limit else msg[:limit] + "\n... (truncated)"


class Measurer:
    """Builds and runs candidates of one task in worker processes (a context manager)."""

    def __init__(self, task: Task, option: MeasureOption):
        self.task, self.option = task, option
        self._spec: dict | None = None
        self._builders: WorkerPool | None = None
        self._runner: WorkerPool | None = None
        self._ref_dir: str | None = None
        self.best_cost: float | None = None     # for slow_cutoff; the tuner may seed it
        self.reference_times: deque[float] = deque(maxlen=NOISE_WINDOW)
        self.load = LoadMeter()         # other processes' cores while timing (coreload.py)
        self.runs = 0                   # runs timed, and of those, while the machine was busy
        self.busy_runs = 0
        self.busy_peak = 0.0

    def __enter__(self) -> Measurer:
        if worker_role() != "main":
            raise LooptuneError("tuning was started inside a measurement worker: the module "
                                "or script defining the template starts tuning when imported; "
                                "put that code under `if __name__ == \"__main__\":`")
        self._spec = spec = self.task.spec()
        opt = self.option
        init_timeout = max(120.0, 10 * opt.timeout)
        self._ref_dir = tempfile.mkdtemp(prefix="looptune-ref-")
        try:
            # the builders start with the first measure(): a Measurer that only re-measures
            # (graph.tune's final re-measure of a task whose workers were stopped) builds
            # nothing, and starting them cost two processes' imports for nothing
            self._runner = WorkerPool(1, "runner", runner_init, (spec, opt, self._ref_dir),
                                      runner_job, init_timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _builder_pool(self) -> WorkerPool:
        if self._builders is None:
            self._builders = WorkerPool(self.option.n_parallel, "builder", builder_init,
                                        self._spec, builder_job,
                                        max(120.0, 10 * self.option.timeout))
        return self._builders

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes and remove the reference files."""
        for pool in (self._builders, self._runner):
            if pool is not None:
                pool.close()
        self._builders = self._runner = None
        if self._ref_dir:
            shutil.rmtree(self._ref_dir, ignore_errors=True)
            self._ref_dir = None

    def measure(self, configs: Sequence[ConfigEntity]) -> Iterator[MeasureResult]:
        """Measure ``configs``; yields each result (in order) as soon as it is known."""
        if self._runner is None:
            raise LooptuneError("Measurer.measure: use the Measurer as a context manager")
        built = self._builder_pool().map([c.index for c in configs], self.option.timeout)
        for cfg, b in zip(configs, built):
            res = self._from_build(cfg, b)
            if res.error_kind is ErrorKind.NONE:
                self._run_guarded(res, self.best_cost)
            yield res

    def remeasure(self, configs: Sequence[ConfigEntity], rounds: int,
                  stop: Callable[[], bool] | None = None) -> Iterator[MeasureResult]:
        """Measure ``configs`` again (they built before: the runner finds them in the build
        cache) in ``rounds`` interleaved rounds: each round runs every config once, in an
        order rotated from round to round, so that a slow drift of the machine hits them
        alike; with the option ``remeasure_fresh``, each round in a new runner process (new
        array placements). Yields results of kind ``"remeasure"``; ``stop()`` ends it between
        rounds."""
        if self._runner is None:
            raise LooptuneError("Measurer.remeasure: use the Measurer as a context manager")
        configs = list(configs)
        for r in range(rounds if configs else 0):
            if stop is not None and stop():
                return
            if self.option.remeasure_fresh and self._runner.used:
                self._runner.renew()      # a runner that has timed nothing yet is new already
            k = r % len(configs)
            order = configs[k:] + configs[:k]
            timed = self._round_guarded(order) \
                if self.option.remeasure_interleaved and len(order) > 1 else None
            if timed is not None:
                yield from timed
                continue
            for cfg in order:       # one run per config (also when a round job failed)
                res = MeasureResult(cfg, flop=self.task.flop, kind="remeasure")
                self._run_guarded(res, None)
                yield res

    def _round_guarded(self, order: list[ConfigEntity]) -> list[MeasureResult] | None:
        """One interleaved re-measure round of ``order`` in the runner (``jobs.round_job``),
        under the noise guard (``_guarded``). None when the round job crashed, hung or raised:
        the caller then runs the configs one by one, which names the one at fault."""
        opt = self.option
        guard = bool(opt.noise_threshold)

        def run_once():
            with timing_lock():
                (r,) = self._runner.map([("round", [c.index for c in order], guard)],
                                        opt.timeout * len(order))
            if r.status != "ok":
                log.info("interleaved re-measure round of %s failed (%s); timing its configs "
                         "one by one", self.task.key, r.status)
                return None
            if r.payload.get("busy"):
                self.load.add(*r.payload["busy"])
            return (r.payload["results"], r.elapsed), r.payload.get("ref")
        self._wait_quiet()
        got = self._guarded(run_once, "an interleaved re-measure round", "the round",
                            {"interleaved": len(order)})
        if got is None:
            return None
        (results, elapsed), noise = got
        out = []
        for cfg in order:
            r = results[cfg.index]
            out.append(MeasureResult(cfg, flop=self.task.flop, kind="remeasure", noise=noise,
                                     run_time=elapsed / len(order),
                                     error_kind=ErrorKind(r["kind"]),
                                     error_msg=_short(r.get("msg", "")),
                                     costs=[float(c) for c in r.get("costs", [])]))
        return out

    def _from_build(self, cfg: ConfigEntity, b: Outcome) -> MeasureResult:
        res = MeasureResult(cfg, build_time=b.elapsed, flop=self.task.flop)
        if b.status == "ok":
            res.error_kind = ErrorKind(b.payload["kind"])
            res.error_msg = _short(b.payload.get("msg", ""))
            res.steps = b.payload.get("steps")
        elif b.status == "timeout":
            res.error_kind = ErrorKind.BUILD_TIMEOUT
            res.error_msg = f"building took longer than {self.option.timeout} s: {b.payload}"
        elif b.status == "crash":
            res.error_kind = ErrorKind.CRASH
            res.error_msg = f"while building: {b.payload}"
        else:
            res.error_kind, res.error_msg = ErrorKind.BUILD_ERROR, _short(str(b.payload))
        return res

    def _run_guarded(self, res: MeasureResult, best: float | None) -> None:
        """Run ``res``'s config under the noise guard (``_guarded``)."""
        def run_once():
            trial = MeasureResult(res.config, build_time=res.build_time, steps=res.steps,
                                  flop=res.flop, kind=res.kind)
            return trial, self._run(trial, best)
        self._wait_quiet()
        trial, noise = self._guarded(run_once, f"config {res.config.index}", "it")
        trial.noise = noise
        for name in ("costs", "error_kind", "error_msg", "run_time", "timestamp", "noise"):
            setattr(res, name, getattr(trial, name))
        if res.ok and res.kind == "measure" and (self.best_cost is None
                                                 or res.cost < self.best_cost):
            self.best_cost = res.cost

    def _guarded(self, run_once: Callable, what: str, it: str, extra: dict | None = None):
        """``run_once()`` -> ``(value, reference times)``, again while the noise reference
        drifted past ``noise_threshold`` (up to ``noise_retries`` times); returns ``(value,
        noise)`` of the run that drifted least (``noise``: the drift, the reference's times,
        other processes' busy cores, ``extra``), or None at once when ``run_once`` does."""
        opt = self.option
        kept: tuple[float, Any, dict | None] | None = None
        for attempt in range(1 + (opt.noise_retries if opt.noise_threshold else 0)):
            got = run_once()
            if got is None:
                return None
            value, ref = got
            busy = self._busy()
            noise = None if busy is None else {"busy": round(busy, 2)}
            drift = self._drift(ref)
            if drift is None:
                return value, noise
            noise = {"drift": round(drift, 4), "retries": attempt, **(extra or {}),
                     "reference_ms": [round(t * 1e3, 4) for t in ref], **(noise or {})}
            if kept is None or drift < kept[0]:
                kept = (drift, value, noise)
            if drift <= opt.noise_threshold:
                break
            log.info("noise guard: the reference kernel drifted %.0f%% while %s ran; "
                     "measuring %s again", drift * 100, what, it)
        return kept[1], kept[2]

    def _busy(self) -> float | None:
        """The cores other processes kept busy over the last second or more of timing (None
        before a second was timed, or without a way to tell); warns the first time it is
        over ``busy_threshold`` and counts the runs."""
        busy, limit = self.load.cores(), self.option.busy_threshold
        self.runs += 1
        if busy is None or limit is None or busy <= limit:
            return busy
        self.busy_runs += 1
        self.busy_peak = max(self.busy_peak, busy)
        if self.busy_runs == 1:
            log.warning(
                "other processes kept %.1f of the %d cores busy while %s was being timed: a "
                "config that runs on every core is now timed slower than it runs on a quiet "
                "machine, so tuning favours configs with fewer threads. Tune on a quiet "
                "machine, or let the measurer wait for one (MeasureOption(busy_wait=S), "
                "`looptune tune --busy-wait S`)", busy, os.cpu_count() or 1, self.task.key)
        return busy

    def _wait_quiet(self) -> None:
        """With ``busy_wait``: while other processes keep the cores busy, wait (up to that
        many seconds, sampling the load a quarter second at a time) before the next run. Only
        this process waits meanwhile: the builders are idle while candidates are timed."""
        opt = self.option
        busy = self.load.cores()
        if not opt.busy_wait or opt.busy_threshold is None or busy is None \
                or busy <= opt.busy_threshold:
            return
        log.info("contention guard: other processes keep %.1f cores busy; waiting up to %g s "
                 "for them before timing", busy, opt.busy_wait)
        meter, deadline = LoadMeter(), time.monotonic() + opt.busy_wait
        while time.monotonic() < deadline:
            probe = ForeignProbe()
            time.sleep(min(0.25, max(0.01, deadline - time.monotonic())))
            sample = probe.stop()
            if sample is None:
                return
            meter.add(*sample)
            now = meter.cores()
            if now is not None and now <= opt.busy_threshold:
                self.load = meter
                return
        log.warning("contention guard: other processes still keep %.1f cores busy after "
                    "waiting %g s; timing anyway", meter.average() or 0.0, opt.busy_wait)

    def _drift(self, ref: list[float] | None) -> float | None:
        """The reference's largest relative deviation from its recent median (None without a
        reference); the new times join the window afterwards."""
        if not ref or not self.option.noise_threshold:
            return None
        base = statistics.median(self.reference_times) if len(self.reference_times) >= \
            NOISE_MIN_HISTORY else None
        self.reference_times.extend(ref)
        if base is None:
            return 0.0
        return max(abs(t / base - 1.0) for t in ref)

    def _run(self, res: MeasureResult, best: float | None) -> list[float] | None:
        guard = bool(self.option.noise_threshold)
        # one candidate timed at a time per host, across processes (search/hostlock.py);
        # compiling is not locked
        with timing_lock():
            (r,) = self._runner.map([(res.config.index, best, guard)], self.option.timeout)
        res.run_time = r.elapsed
        ref = None
        if r.status == "ok":
            res.error_kind = ErrorKind(r.payload["kind"])
            res.error_msg = _short(r.payload.get("msg", ""))
            res.costs = [float(c) for c in r.payload.get("costs", [])]
            ref = r.payload.get("ref")
            if r.payload.get("busy"):
                self.load.add(*r.payload["busy"])
        elif r.status == "timeout":
            res.error_kind = ErrorKind.TIMEOUT
            res.error_msg = f"running took longer than {self.option.timeout} s: {r.payload}"
        elif r.status == "crash":
            res.error_kind = ErrorKind.CRASH
            res.error_msg = f"while running: {r.payload}"
        else:
            res.error_kind, res.error_msg = ErrorKind.RUNTIME_ERROR, _short(str(r.payload))
        res.timestamp = time.time()
        return ref


NOISE_WINDOW = 16          # reference times (two per run) whose median is the baseline
NOISE_MIN_HISTORY = 4      # before that many, the guard only calibrates


def measure_configs(task: Task, configs: Sequence[ConfigEntity | int],
                    option: MeasureOption | None = None) -> list[MeasureResult]:
    """Measure some configs of ``task`` once (no tuner, no log): a convenience for scripts."""
    option = option or MeasureOption()
    ents = [c if isinstance(c, ConfigEntity) else task.config_space.get(c) for c in configs]
    with Measurer(task, option) as m:
        out: list[MeasureResult] = []
        for k in range(0, len(ents), option.n_parallel):
            out.extend(m.measure(ents[k:k + option.n_parallel]))
        return out
