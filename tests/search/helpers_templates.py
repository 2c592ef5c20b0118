"""Templates for the search tests, in a module that measurement workers can import.

``test_matmul`` is a small tunable matmul. ``test_faulty`` has a ``mode`` knob whose values
make a candidate misbehave *inside a measurement worker only* (the tuner process never runs
them): ``segv``/``abort`` kill the runner, ``hang`` stalls it, ``hang_build`` stalls a builder,
``raise`` is a template bug, ``invalid`` an invalid schedule, ``wrong`` a wrong result.
"""
from __future__ import annotations

import os
import signal
import time

import looptune as lt
from looptune.search import template, worker_role

FAULT_MODES = ["ok", "invalid", "raise", "segv", "abort", "hang", "hang_build", "wrong"]


def matmul_tensors(N: int, M: int, K: int, dtype: str = "float32", plus: float = 0.0):
    A = lt.placeholder((N, K), dtype, name="A")
    B = lt.placeholder((K, M), dtype, name="B")
    k = lt.reduce_axis(K, name="k")
    if plus:
        C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j] + plus, axis=k), name="C")
    else:
        C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def tiled_matmul(cfg, N, M, K, dtype="float32"):
    """The tiling both test matmul templates share: split i, j (power-of-two) and k in two,
    order the inner loops (a knob), j's inner loop innermost. Returns (s, [A, B, C], io, ji,
    ki)."""
    A, B, C = matmul_tensors(N, M, K, dtype)
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    cfg.define_split("tile_i", i, num_outputs=2)
    cfg.define_split("tile_j", j, num_outputs=2, policy="power2")
    cfg.define_split("tile_k", k, num_outputs=2)
    io, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    ko, ki = cfg["tile_k"].apply(s, C, k)
    cfg.define_reorder("order", [ko, ii, ki], policy="all")
    inner = cfg["order"].apply(s, C, [ko, ii, ki])
    s[C].reorder(io, jo, *inner, ji)
    return s, [A, B, C], io, ji, ki


@template("test_matmul")
def tmatmul(cfg, N, M, K, dtype="float32"):
    """Tile i, j, k; order the inner loops; vectorize the innermost; maybe parallel."""
    s, (A, B, C), io, ji, _ = tiled_matmul(cfg, N, M, K, dtype)
    cfg.define_annotate("ann", [ji], policy="try_vec")
    cfg["ann"].apply(s, C, [ji])
    cfg.define_knob("parallel", [False, True])
    if cfg["parallel"].val:
        s[C].parallel(io)
    return s, [A, B, C]


@template("test_faulty")
def tfaulty(cfg, N):
    """A matmul whose ``mode`` knob picks a misbehaviour (see the module docstring)."""
    cfg.define_knob("mode", FAULT_MODES)
    mode = cfg["mode"].val
    role = worker_role()
    A, B, C = matmul_tensors(N, N, N, plus=1.0 if mode == "wrong" else 0.0)
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    cfg.define_split("tile_j", j, num_outputs=2, candidate=[[-1, 1], [-1, 4]], policy="candidate")
    cfg["tile_j"].apply(s, C, j)
    if mode == "invalid":
        s[C].vectorize(k)                      # a reduction loop: ScheduleError
    elif mode == "raise":
        raise ValueError("a bug in the template")
    elif mode == "segv" and role == "runner":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif mode == "abort" and role == "runner":
        os.abort()
    elif mode == "hang" and role == "runner":
        time.sleep(1000)
    elif mode == "hang_build" and role == "builder":
        time.sleep(1000)
    return s, [A, B, C]
