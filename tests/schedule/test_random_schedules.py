"""Randomized schedules: seeded random sequences of primitives, valid or not, over matmul, blur,
softmax and an elementwise chain. A ScheduleError (from a primitive or from lowering) is an
acceptable answer and is counted; anything else must build and match numpy. A refused primitive
must leave the schedule usable, so the sequence goes on after it."""
from __future__ import annotations

import traceback

import numpy as np
import pytest
from util import blur, chain, matmul, softmax

import looptune as lt
from looptune import ScheduleError

WORKLOADS = {
    "matmul": lambda: matmul(13, 19, 11),
    "blur": lambda: blur(11, 17),
    "softmax": lambda: softmax(9, 19),
    "chain": lambda: chain(11, 23),
}
SEEDS_PER_WORKLOAD = 15          # 60 random schedules in all
FACTORS = [1, 2, 3, 4, 5, 7, 8, 16]
BAD_FACTORS = [0, -1, 2.5]
PRIMS = ["split", "split_nparts", "tile", "fuse", "reorder", "unroll", "vectorize", "parallel",
         "compute_at", "compute_inline", "compute_root"]
WEIGHTS = np.array([3, 2, 1, 2, 2, 1, 2, 2, 3, 1, 1], float)


def _pick(rng, seq):
    return seq[rng.integers(len(seq))]


def _loop(rng, s, st):
    """Mostly a current loop of ``st``; sometimes a stale one or another stage's."""
    r = rng.random()
    if r < 0.85 or len(s.stages) == 1 and r < 0.95:
        return _pick(rng, st.leaf_iter_vars)
    if r < 0.95:
        return _pick(rng, st.all_iter_vars)
    return _pick(rng, _pick(rng, s.stages).leaf_iter_vars)


def _factor(rng):
    return _pick(rng, BAD_FACTORS) if rng.random() < 0.05 else _pick(rng, FACTORS)


def _random_step(rng, s, state) -> str:
    """Apply one random primitive; return its description (for the failure message)."""
    prim = PRIMS[rng.choice(len(PRIMS), p=WEIGHTS / WEIGHTS.sum())]
    inner = [x for x in s.stages if not x.is_output]
    if prim.startswith("compute_") and inner and rng.random() < 0.9:
        st = _pick(rng, inner)              # mostly stages that may move
    else:
        st = _pick(rng, s.stages)
    if prim == "unroll":
        if state["unrolls"] >= 2:           # bound the generated code's size
            prim = "vectorize"
        state["unrolls"] += 1
    sd = f"s[{st.name}]"
    if prim in ("split", "split_nparts"):
        v, f = _loop(rng, s, st), _factor(rng)
        kw = {"factor" if prim == "split" else "nparts": f}
        desc = f"{sd}.split({v.name}, {kw})"
        state["log"].append(desc)
        st.split(v, **kw)
    elif prim == "tile":
        a, b = _loop(rng, s, st), _loop(rng, s, st)
        fa, fb = _factor(rng), _factor(rng)
        state["log"].append(f"{sd}.tile({a.name}, {b.name}, {fa}, {fb})")
        st.tile(a, b, fa, fb)
    elif prim == "fuse":
        leaves = st.leaf_iter_vars
        k = int(rng.integers(len(leaves)))
        a = leaves[k]
        b = leaves[k + 1] if k + 1 < len(leaves) and rng.random() < 0.8 else _loop(rng, s, st)
        state["log"].append(f"{sd}.fuse({a.name}, {b.name})")
        st.fuse(a, b)
    elif prim == "reorder":
        leaves = list(st.leaf_iter_vars)
        n = int(rng.integers(1, len(leaves) + 1))
        order = [leaves[x] for x in rng.permutation(len(leaves))[:n]]
        if rng.random() < 0.1:
            order.append(_loop(rng, s, st))
        state["log"].append(f"{sd}.reorder({', '.join(v.name for v in order)})")
        st.reorder(*order)
    elif prim in ("unroll", "vectorize", "parallel"):
        v = _loop(rng, s, st)
        state["log"].append(f"{sd}.{prim}({v.name})")
        getattr(st, prim)(v)
    elif prim == "compute_at":
        readers = s.readers(st)
        host = _pick(rng, readers) if readers and rng.random() < 0.8 else _pick(rng, s.stages)
        v = _pick(rng, host.leaf_iter_vars) if rng.random() < 0.9 else _loop(rng, s, st)
        state["log"].append(f"{sd}.compute_at(s[{host.name}], {v.name})")
        st.compute_at(host, v)
    else:
        state["log"].append(f"{sd}.{prim}()")
        getattr(st, prim)()


def _one(name: str, seed: int) -> tuple[str, str | None]:
    """Run one random schedule: ('ok' | 'refused', failure message or None)."""
    rng = np.random.default_rng(seed)
    w = WORKLOADS[name]()
    s = w.schedule()
    state = {"log": [], "unrolls": 0}
    refused = 0
    for _ in range(int(rng.integers(2, 9))):
        try:
            _random_step(rng, s, state)
        except ScheduleError as e:
            refused += 1
            state["log"][-1] += f"   -> ScheduleError: {e}"
    try:
        lt.lower(s, w.args)
    except ScheduleError:
        return "refused", None
    except Exception:  # noqa: BLE001 - anything else is a bug, reported with the steps
        return "crash", _report(name, seed, s, state, traceback.format_exc(limit=4))
    try:
        w.check(s, seed)
    except Exception:  # noqa: BLE001
        return "wrong", _report(name, seed, s, state, traceback.format_exc(limit=4))
    return "ok" if not refused else "ok_after_refusal", None


def _report(name, seed, s, state, exc: str) -> str:
    attempted = "\n".join(f"    {x}" for x in state["log"])
    applied = "\n".join(f"    {x}" for x in s.steps)
    return (f"--- {name} seed {seed}\n  attempted:\n{attempted}\n  applied (s.steps):\n"
            f"{applied}\n  error:\n{exc[-1500:]}")


@pytest.mark.slow
@pytest.mark.parametrize("name", WORKLOADS)
def test_random_schedules(name):
    counts: dict[str, int] = {}
    failures = []
    base = list(WORKLOADS).index(name) * 1000
    for seed in range(base, base + SEEDS_PER_WORKLOAD):
        outcome, failure = _one(name, seed)
        counts[outcome] = counts.get(outcome, 0) + 1
        if failure:
            failures.append(failure)
    print(f"{name}: {counts}")
    assert not failures, f"{len(failures)} random schedules failed ({counts}):\n" + \
        "\n".join(failures)
    built = counts.get("ok", 0) + counts.get("ok_after_refusal", 0)
    assert built >= SEEDS_PER_WORKLOAD // 3, f"too few random schedules were valid: {counts}"
