"""Do looptune's OpenMP kernels and numpy's BLAS slow each other down in one process?

    python benchmarks/threadpools.py [--n 1024] [--rounds 5] [--policies default,gomp,passive]

Each scenario runs in a fresh process (the OpenMP runtime reads its settings once, when it
starts):

- ``solo-looptune`` / ``solo-numpy``: only the looptune matmul (the example's hand schedule)
  or only numpy's sgemm (``a @ b``), the speed each gets alone;
- ``mixed``: in one process, ``--rounds`` rounds of looptune kernel, numpy sgemm, looptune
  kernel, each timed right after the other (no sleep in between), as a program that mixes them
  runs.

and under each OpenMP policy:

- ``default``: what looptune does now (nothing set by the user: looptune sets
  ``OMP_WAIT_POLICY=passive`` before the runtime starts, see ``backends/module.py``);
- ``gomp``: libgomp's own default (``GOMP_SPINCOUNT=300000`` given explicitly, so looptune
  leaves the runtime alone): idle OpenMP threads spin for a while after each parallel region;
- ``active``: ``OMP_WAIT_POLICY=active`` (idle threads spin without end);
- ``spin10k``: ``GOMP_SPINCOUNT=10000`` (a short spin, then sleep).

The table shows each side's median milliseconds per call (with the spread: half the range of
the rounds' medians, as a percentage) and its ratio to the solo speed under the same policy.
On a machine shared with other work the figures are noisy: compare ratios, run it twice.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

POLICIES = {"default": {}, "gomp": {"GOMP_SPINCOUNT": "300000"},
            "active": {"OMP_WAIT_POLICY": "active"}, "spin10k": {"GOMP_SPINCOUNT": "10000"}}
OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "LOOPTUNE_OPENMP_DEFAULTS")


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


def child(scenario: str, n: int, rounds: int, calls: int) -> dict:
    """Run one scenario in this process; {"looptune": [s...], "numpy": [s...], "env": ...}."""
    ours, theirs = _kernel(n)
    out: dict = {"looptune": [], "numpy": []}
    if scenario == "solo-looptune":
        ours()
        out["looptune"] = [_block(ours, calls) for _ in range(rounds)]
    elif scenario == "solo-numpy":
        theirs()
        out["numpy"] = [_block(theirs, calls) for _ in range(rounds)]
    else:
        ours(), theirs()
        for _ in range(rounds):
            out["looptune"].append(_block(ours, calls))
            out["numpy"].append(_block(theirs, calls))
            out["looptune"].append(_block(ours, calls))
    from looptune.backends.module import openmp_settings
    out["env"] = openmp_settings()
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
    spread = (max(ts) - min(ts)) / 2 / med * 100
    ratio = f" ({med / solo:.2f}x solo)" if solo else ""
    return f"{med * 1e3:8.2f} ms ±{spread:4.1f}%{ratio}"


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
        sl, sn = statistics.median(solo_l["looptune"]), statistics.median(solo_n["numpy"])
        print(f"\npolicy {policy}: the runtime started with {mixed['env']}")
        print(f"  solo   looptune {_fmt(solo_l['looptune'], None)}   numpy "
              f"{_fmt(solo_n['numpy'], None)}")
        print(f"  mixed  looptune {_fmt(mixed['looptune'], sl)}   numpy "
              f"{_fmt(mixed['numpy'], sn)}")


if __name__ == "__main__":
    main()
