"""Do looptune's OpenMP kernels and numpy's BLAS slow each other down in one process?

    python benchmarks/threadpools.py [--n 1024] [--rounds 5] [--policies default,gomp,passive]

Each scenario runs in a fresh process (the OpenMP runtime reads its settings once, when it
starts):

- ``solo-looptune`` / ``solo-numpy``: only the looptune matmul (the example's hand schedule)
  or only numpy's sgemm (``a @ b``), the speed each gets alone;
- ``mixed``: in one process, ``--rounds`` rounds of looptune kernel, numpy sgemm, looptune
  kernel, each timed right after the other (no sleep in between), as a program that mixes them
  runs;
- ``woken``: looptune's block, then numpy's, each after a 0.2 s sleep (a kernel called now
  and then, not in a hot loop): what a call costs while the threads and cores wake up;
- ``idle``: the CPU time the idle pool threads burn in the 50 ms after one call of each side
  (spinning): what one library's threads take from the other, a figure that hardly depends on
  the rest of the machine's load, unlike the times above.

and under each OpenMP policy:

- ``default``: what looptune does now (nothing set by the user: looptune sets
  ``GOMP_SPINCOUNT=10000`` and ``OPENBLAS_THREAD_TIMEOUT=18`` before the runtimes start,
  see ``runtime_env.py``; the same as ``spin10k``);
- ``gomp``: libgomp's own default (``GOMP_SPINCOUNT=300000`` given explicitly, so looptune
  leaves the runtime alone): idle OpenMP threads spin for a while after each parallel region;
- ``active``: ``OMP_WAIT_POLICY=active`` (idle threads spin without end);
- ``spin1k``, ``spin3k``, ``spin10k``, ``spin30k``: ``GOMP_SPINCOUNT`` 1000 to 30000 (a short
  spin, then sleep);
- ``passive``: ``OMP_WAIT_POLICY=passive`` (idle threads sleep at once; looptune's default
  until 2026-11-29);
- ``openblas-own``: looptune's OpenMP default, but OpenBLAS's own idle-thread timeout
  (``OPENBLAS_THREAD_TIMEOUT=28``: its threads spin about 0.1 s after each call) instead of
  looptune's 18 (see ``runtime_env.py``).

The table shows each side's median milliseconds per call (with the spread: half the
interquartile range of the blocks, as a percentage) and its ratio to the solo speed under the
same policy. ``--n 128 --calls 200`` shows the other side of the trade: with the passive policy
each parallel region of a tiny kernel first wakes the sleeping threads (0.10 ms per call of a
0.03 ms kernel on a 2-core KVM guest, 2026-11-29; 0.029 ms with ``spin10k``). On a machine
shared with other work the figures are noisy: compare ratios, run it twice.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

POLICIES = {"default": {}, "gomp": {"GOMP_SPINCOUNT": "300000"},
            "active": {"OMP_WAIT_POLICY": "active"}, "spin10k": {"GOMP_SPINCOUNT": "10000"},
            "spin1k": {"GOMP_SPINCOUNT": "1000"}, "spin3k": {"GOMP_SPINCOUNT": "3000"},
            "spin30k": {"GOMP_SPINCOUNT": "30000"},
            "passive": {"OMP_WAIT_POLICY": "passive"},
            "openblas-own": {"OPENBLAS_THREAD_TIMEOUT": "28"}}
OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LOOPTUNE_OPENMP_DEFAULTS",
            "OPENBLAS_THREAD_TIMEOUT", "LOOPTUNE_BLAS_DEFAULTS")


def _kernel(n: int):
    """The looptune matmul (hand schedule) and numpy's, on the same inputs."""
    import looptune as lt
    import numpy as np
    from looptune.operators import load_operators
    here = os.path.dirname(os.path.abspath(__file__))
    (op,) = load_operators(os.path.join(here, "..", "examples", "matmul.py"))
    s, tensors = op.hand_schedule(n, n, n)
    f = lt.build(s, tensors, name="tp_matmul")
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    c = np.empty((n, n), np.float32)
    return (lambda: f(a, b, c)), (lambda: a @ b)


def _block(run, calls: int) -> float:
    """Median seconds per call over ``calls`` back-to-back calls (no warm-up: a program that
    mixes libraries does not warm them up either)."""
    import time
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


IDLE_WINDOW_S = 0.05


def _idle_cpu(run) -> float:
    """CPU seconds that threads other than this one burn in the ``IDLE_WINDOW_S`` after one
    call of ``run`` while this thread sleeps: the idle pool threads spinning. Unlike a wall
    time this hardly depends on what else the machine runs (it is what they take from it)."""
    import time
    run()
    p0, t0 = time.process_time(), time.thread_time()
    time.sleep(IDLE_WINDOW_S)
    return max(0.0, (time.process_time() - p0) - (time.thread_time() - t0))


WOKEN_SLEEP_S = 0.2


def child(scenario: str, n: int, rounds: int, calls: int) -> dict:
    """Run one scenario in this process; {"looptune": [s...], "numpy": [s...], "env": ...}."""
    import time
    from looptune.search.jobs import pin_openmp_runtime
    pin_openmp_runtime()       # spinning threads (the active policy) must not see it unloaded
    ours, theirs = _kernel(n)
    out: dict = {"looptune": [], "numpy": []}
    if scenario == "solo-looptune":
        ours()
        out["looptune"] = [_block(ours, calls) for _ in range(rounds)]
    elif scenario == "solo-numpy":
        theirs()
        out["numpy"] = [_block(theirs, calls) for _ in range(rounds)]
    elif scenario == "woken":
        ours(), theirs()
        for _ in range(rounds):
            time.sleep(WOKEN_SLEEP_S)
            out["looptune"].append(_block(ours, calls))
            time.sleep(WOKEN_SLEEP_S)
            out["numpy"].append(_block(theirs, calls))
    elif scenario == "idle":
        ours(), theirs()
        out["looptune"] = [_idle_cpu(ours) for _ in range(rounds)]
        out["numpy"] = [_idle_cpu(theirs) for _ in range(rounds)]
    else:
        ours(), theirs()
        for _ in range(rounds):
            out["looptune"].append(_block(ours, calls))
            out["numpy"].append(_block(theirs, calls))
            out["looptune"].append(_block(ours, calls))
    from looptune.runtime_env import blas_settings, openmp_settings
    out["env"] = {**openmp_settings(), **blas_settings()}
    return out


def run_scenario(policy: str, scenario: str, a) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARS}
    env.update(POLICIES[policy])
    cmd = [sys.executable, os.path.abspath(__file__), "--child", scenario, "--n", str(a.n),
           "--rounds", str(a.rounds), "--calls", str(a.calls)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{policy}/{scenario} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.splitlines()[-1])


def _fmt(ts: list[float], solo: float | None) -> str:
    if not ts:
        return "-"
    med = statistics.median(ts)
    q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [med, med, med]
    spread = (q[2] - q[0]) / 2 / med * 100
    ratio = f" ({med / solo:.2f}x solo)" if solo else ""
    return f"{med * 1e3:9.4f} ms ±{spread:4.1f}%{ratio}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1024, help="matmul size (n x n x n)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per scenario")
    ap.add_argument("--calls", type=int, default=5, help="timed calls per block")
    ap.add_argument("--policies", default="default,gomp",
                    help=f"comma-separated, of {', '.join(POLICIES)}")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.n, a.rounds, a.calls)))
        return
    print(f"matmul {a.n}^3 float32, {a.rounds} rounds of {a.calls} calls; {os.cpu_count()} "
          f"CPUs")
    for policy in a.policies.split(","):
        solo_l = run_scenario(policy, "solo-looptune", a)
        solo_n = run_scenario(policy, "solo-numpy", a)
        mixed = run_scenario(policy, "mixed", a)
        idle = run_scenario(policy, "idle", a)
        woken = run_scenario(policy, "woken", a)
        sl, sn = statistics.median(solo_l["looptune"]), statistics.median(solo_n["numpy"])
        print(f"\npolicy {policy}: the runtime started with {mixed['env']}")
        print(f"  solo   looptune {_fmt(solo_l['looptune'], None)}   numpy "
              f"{_fmt(solo_n['numpy'], None)}")
        print(f"  mixed  looptune {_fmt(mixed['looptune'], sl)}   numpy "
              f"{_fmt(mixed['numpy'], sn)}")
        print(f"  woken  looptune {_fmt(woken['looptune'], sl)}   numpy "
              f"{_fmt(woken['numpy'], sn)}")
        ms = IDLE_WINDOW_S * 1e3
        print(f"  CPU ms burnt by idle threads in the {ms:.0f} ms after a call: looptune "
              f"{statistics.median(idle['looptune']) * 1e3:.2f}, numpy "
              f"{statistics.median(idle['numpy']) * 1e3:.2f}")


if __name__ == "__main__":
    main()
