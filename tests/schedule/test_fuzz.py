"""Schedule fuzzing: random schedules of ten operators, built and compared against numpy.

Each case ``seed = BASE + index`` picks an operator (matmul, conv2d with padding, two-stage
blur, 4-stage softmax, layernorm, max/avg pooling, transpose, float and int elementwise
chains) with odd sizes, applies 3-10 random primitive calls (see ``fuzz_gen.py`` for how they
are chosen and how refused ones are handled), builds the result and compares it with numpy
(floats to rtol 1e-4, integers exactly) using canary-guarded buffers. A failure prints the
seed, the operator, every call tried, the applied steps and the lowered loop nest, and
``python tests/schedule/fuzz_gen.py SEED`` replays it.

One case in eight is built with ``-sanitize=address,undefined`` instead. An instrumented .so
cannot be loaded into this (uninstrumented) python, so those cases run, batched, in
``sanitizer_runner.py`` processes started with the ASan/UBSan runtimes preloaded; the batch
starts when the module does and runs beside the in-process cases (a second core's work).

``LOOPTUNE_FUZZ_CASES`` sets the number of cases (default 300, about a minute on 2 cores;
e.g. 5000 for a long run) and ``LOOPTUNE_FUZZ_BASE`` the base seed. The default base is
fixed, so CI runs the same 300 cases every time (a random failure must not block an unrelated
change); those cases no longer find anything, so look for new bugs on fresh seeds:

    LOOPTUNE_FUZZ_BASE=random LOOPTUNE_FUZZ_CASES=2000 \
        python -m pytest tests/schedule/test_fuzz.py -q

``random`` draws a new base (printed first, with the command that reruns the same batch, and
again in the summary line). Replay one failing case with ``python tests/schedule/fuzz_gen.py
SEED``, fix the class of bug, and keep the case in ``test_fuzz_regressions.py``.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fuzz_gen import SANITIZE_EVERY, Case, build_and_run, generate
from sanitizer_runner import run_batch, sanitizer_env

DEFAULT_BASE = 20240611


def draw_base(spec: str | None) -> tuple[int, bool]:
    """(base seed, drawn at random?) from ``LOOPTUNE_FUZZ_BASE``: unset -> the fixed CI base,
    ``random`` -> a fresh base in [10**8, 10**9) (so the default's seeds never overlap), an
    integer -> that base. Under pytest-xdist the workers of one run draw the same base from
    the run's id (``PYTEST_XDIST_TESTRUNUID``): each drawing its own collected other test ids,
    a collection error."""
    if spec is None or spec.strip() == "":
        return DEFAULT_BASE, False
    if spec.strip().lower() == "random":
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        pick = int(run, 16) % (9 * 10**8) if run else secrets.randbelow(9 * 10**8)
        return 10**8 + pick, True
    try:
        return int(spec), False
    except ValueError:
        raise ValueError(f"LOOPTUNE_FUZZ_BASE={spec!r}: give an integer base seed or "
                         "'random'") from None


BASE, DRAWN = draw_base(os.environ.get("LOOPTUNE_FUZZ_BASE"))
N_CASES = int(os.environ.get("LOOPTUNE_FUZZ_CASES", "300"))
REPLAY = (f"LOOPTUNE_FUZZ_BASE={BASE} LOOPTUNE_FUZZ_CASES={N_CASES} "
          "python -m pytest tests/schedule/test_fuzz.py")
MIN_ACCEPTED = 0.7      # of the cases, at least this share must lower, build and run


def _sanitized(index: int) -> bool:
    return index % SANITIZE_EVERY == 3


PLAIN = [i for i in range(N_CASES) if not _sanitized(i)]
SANITIZED = [i for i in range(N_CASES) if _sanitized(i)]


@dataclass
class Stats:
    cases: int = 0
    refused_cases: int = 0          # lowering refused the finished schedule
    steps: int = 0
    refused_steps: int = 0
    ran: int = 0                    # built and compared (in process or sanitized)
    sanitized: int = 0
    failed: list = field(default_factory=list)
    slowest: tuple = (0.0, None)

    def count(self, case: Case) -> None:
        self.cases += 1
        self.steps += len(case.attempts)
        self.refused_steps += case.refused_steps
        self.refused_cases += case.lowered is None and case.bug is None

    def line(self, seconds: float) -> str:
        return (f"schedule fuzz (base {BASE}{', drawn at random' if DRAWN else ''}; "
                f"cases {BASE}..{BASE + N_CASES - 1}): "
                f"{self.cases} cases ({self.sanitized} with ASan+UBSan), "
                f"{self.ran} built and ran, {self.refused_cases} refused as invalid at "
                f"lowering, {self.refused_steps} of {self.steps} primitive calls refused, "
                f"{len(self.failed)} failed {sorted(self.failed)[:10]}; {seconds:.1f} s; "
                f"slowest case {self.slowest[1]} ({self.slowest[0]:.2f} s)")


STATS = Stats()


@pytest.fixture(scope="module", autouse=True)
def fuzz_env(tmp_path_factory, request):
    """A private compile cache (so runs measure real builds and leave no litter) and the
    summary line at the end."""
    t0 = time.perf_counter()
    _to_terminal(request, f"schedule fuzz: base {BASE}"
                 f"{' (drawn at random)' if DRAWN else ''}, {N_CASES} cases; "
                 f"rerun this batch with: {REPLAY}")
    old = os.environ.get("LOOPTUNE_CACHE")
    os.environ["LOOPTUNE_CACHE"] = str(tmp_path_factory.mktemp("fuzz-cache"))
    yield
    if old is None:
        os.environ.pop("LOOPTUNE_CACHE", None)
    else:
        os.environ["LOOPTUNE_CACHE"] = old
    _to_terminal(request, STATS.line(time.perf_counter() - t0))


def _to_terminal(request, line: str) -> None:
    """Write ``line`` past pytest's output capture, onto the terminal."""
    plugins = request.config.pluginmanager
    reporter, capman = plugins.get_plugin("terminalreporter"), plugins.get_plugin(
        "capturemanager")
    if reporter is None or capman is None:
        print(line)
        return
    with capman.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line(line)


class SanitizerBatch:
    """The sanitized cases: generated here, run by a background thread in subprocesses."""

    def __init__(self, indices: list[int]):
        self.cases: dict[int, Case] = {}
        specs = []
        for i in indices:
            case = generate(BASE + i, sanitize=True)
            self.cases[case.seed] = case
            if case.bug is None and case.lowered is not None:
                specs.append({"seed": case.seed, "op": case.op_name, "params": case.params,
                              "steps": case.steps_json, "lowered": case.lowered})
        self.results: dict[int, str | None] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(specs,), daemon=True)
        self.thread.start()

    def _run(self, specs) -> None:
        try:
            self.results = run_batch(specs)
        except Exception:  # noqa: BLE001 - any other exception is the finding
            err = traceback.format_exc()
            self.results = {s["seed"]: f"sanitizer batch failed:\n{err}" for s in specs}
        finally:
            self.done.set()


@pytest.fixture(scope="module", autouse=True)
def sanitizer_batch(fuzz_env, request) -> SanitizerBatch | None:
    wanted = {i for i in SANITIZED
              if any(getattr(item, "callspec", None) and item.callspec.params.get("index") == i
                     and item.originalname == "test_fuzz_case_sanitized"
                     for item in request.session.items)}
    return SanitizerBatch(sorted(wanted))


def _fail(case: Case, what: str) -> None:
    STATS.failed.append(case.seed)
    pytest.fail(f"{what}\n\n{case.describe()}", pytrace=False)


@pytest.mark.slow
def test_sanitizer_catches_oob():
    """The sanitized path really detects errors: a deliberately out-of-bounds C function,
    built with looptune's sanitizer flags and called from a runner with the runtimes
    preloaded, must be stopped by an ASan report."""
    p = subprocess.run([sys.executable, str(HERE / "sanitizer_runner.py"), "--oob"],
                       capture_output=True, text=True, env=sanitizer_env(), timeout=120,
                       check=False)
    assert p.returncode != 0, f"the out-of-bounds write went unnoticed:\n{p.stderr[-3000:]}"
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in p.stderr, p.stderr[-3000:]
    assert "calling" in p.stdout and "returned" not in p.stdout, p.stdout


@pytest.mark.parametrize("index", PLAIN, ids=lambda i: f"seed{BASE + i}")
@pytest.mark.slow
def test_fuzz_case(index):
    case = generate(BASE + index)
    STATS.count(case)
    if case.bug:
        _fail(case, f"looptune bug while scheduling or lowering:\n{case.bug}")
    if case.lowered is None:
        return                        # refused as invalid (counted); nothing to build
    t0 = time.perf_counter()
    try:
        err = build_and_run(case.op, case.s, "c", case.seed)
    except Exception:  # noqa: BLE001 - any other exception is the finding
        _fail(case, f"build or run raised:\n{traceback.format_exc()}")
    STATS.ran += 1
    dt = time.perf_counter() - t0
    if dt > STATS.slowest[0]:
        STATS.slowest = (dt, case.seed)
    if err:
        _fail(case, f"wrong results:\n{err}")


@pytest.mark.slow
@pytest.mark.parametrize("index", SANITIZED, ids=lambda i: f"seed{BASE + i}")
def test_fuzz_case_sanitized(index, sanitizer_batch):
    case = sanitizer_batch.cases[BASE + index]
    STATS.count(case)
    STATS.sanitized += 1
    if case.bug:
        _fail(case, f"looptune bug while scheduling or lowering:\n{case.bug}")
    if case.lowered is None:
        return
    assert sanitizer_batch.done.wait(timeout=3600), "the sanitizer batch did not finish"
    STATS.ran += 1
    err = sanitizer_batch.results.get(case.seed, "no result from the sanitized runner")
    if err:
        _fail(case, f"failed under ASan+UBSan (target 'c -sanitize=address,undefined'):\n"
                    f"{err}")


@pytest.mark.slow
def test_dropping_a_parallel_module_does_not_crash():
    """Found by this fuzzer (fixed in backends/build.py, libraries stay loaded): a dropped
    Module of a kernel with a parallel loop used to dlclose its .so, unloading libgomp under
    its live worker threads: SIGSEGV later, in whatever ran next (a subprocess, so that a
    regression cannot take pytest down)."""
    script = textwrap.dedent("""
        import gc
        import numpy as np
        import looptune as lt
        A = lt.placeholder((2, 64), "float32", name="A")
        a = np.ones((2, 64), np.float32)
        b = np.empty_like(a)
        for k in range(10):
            B = lt.compute((2, 64), lambda i, j: A[i, j] * float(k), name="B")
            s = lt.create_schedule(B)
            s[B].parallel(s[B].op.axis[0])
            f = lt.build(s, [A, B])
            f(a, b)
            assert (b == k).all()
            del f
            gc.collect()
        print("survived")
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0 and "survived" in p.stdout, (
        f"exit status {p.returncode} (-11 is SIGSEGV)\n{p.stderr[-3000:]}")


@pytest.mark.slow
def test_fuzz_summary():
    """The generator must not degenerate into refusing everything. It draws its own cases
    (the first 200 of this base, generated and lowered, not built), so the check is the same
    whichever tests ran before it, in whatever order."""
    stats = Stats()
    for i in range(min(N_CASES, 200)):
        stats.count(generate(BASE + i, sanitize=_sanitized(i)))
    accepted = stats.cases - stats.refused_cases
    assert accepted >= MIN_ACCEPTED * stats.cases, (
        f"only {accepted} of {stats.cases} cases lowered; the generator refuses too much: "
        f"{stats.line(0.0)}")
    assert stats.refused_steps > 0, "no primitive call was refused: the bad choices are gone"


def test_fuzz_base_from_the_environment(monkeypatch):
    assert draw_base(None) == (DEFAULT_BASE, False)
    assert draw_base("") == (DEFAULT_BASE, False)
    assert draw_base("77000000") == (77000000, False)
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    drawn = {draw_base("random") for _ in range(5)}
    assert all(d and 10**8 <= b < 10**9 for b, d in drawn) and len(drawn) > 1
    # the workers of one xdist run: one base from the run's id
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "9f3c0a5e2b7d4c1e8a6f0b3d5c7e9a1b")
    same = {draw_base("random") for _ in range(5)}
    assert len(same) == 1 and all(d and 10**8 <= b < 10**9 for b, d in same)
    with pytest.raises(ValueError, match=r"LOOPTUNE_FUZZ_BASE='soon': give an integer"):
        draw_base("soon")


@pytest.mark.slow
def test_a_random_base_is_drawn_once_for_all_xdist_workers():
    """``LOOPTUNE_FUZZ_BASE=random`` under ``-n 2``: every worker draws the base of the run's id
    and collects the same seeds (each drawing its own was a collection error)."""
    pytest.importorskip("xdist")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID")}
    env.update(LOOPTUNE_FUZZ_BASE="random", LOOPTUNE_FUZZ_CASES="4")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:randomly",
                        "-p", "no:cacheprovider", str(HERE / "test_fuzz.py"), "-k", "seed"],
                       capture_output=True, text=True, timeout=300, env=env, check=False,
                       cwd=HERE.parents[1])
    assert p.returncode == 0 and "4 passed" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]
