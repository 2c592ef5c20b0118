"""The OpenMP runtime stays loaded for the life of the process (backends/module.py).

With ``OMP_WAIT_POLICY=active`` libgomp's idle threads spin forever; a process that ran a
parallel kernel used to die with SIGSEGV at exit, when unloading its kernels unloaded libgomp
under those threads.
"""
from __future__ import annotations

import os
import subprocess
import sys

import looptune as lt
import numpy as np
import pytest
from looptune.backends import module

SCRIPT = """
import numpy as np, looptune as lt
n = 257
A = lt.placeholder((n, n), "float32", name="A")
B = lt.compute((n, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
s = lt.create_schedule(B)
s[B].parallel(s[B].op.axis[0])
f = lt.build(s, [A, B], name="pin_exit")
a = np.random.default_rng(0).random((n, n), dtype=np.float32)
b = np.empty_like(a)
f(a, b)
np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
print("ok")
"""


def _parallel_kernel():
    n = 131
    A = lt.placeholder((n, 7), "float32", name="A")
    B = lt.compute((n, 7), lambda i, j: A[i, j] - 3.0, name="B")
    s = lt.create_schedule(B)
    s[B].parallel(s[B].op.axis[0])
    return lt.build(s, [A, B], name="pin_in_process"), n


def test_a_parallel_kernel_pins_the_openmp_runtime_it_loaded():
    f, n = _parallel_kernel()
    a = np.arange(n * 7, dtype=np.float32).reshape(n, 7)
    b = np.empty_like(a)
    f(a, b)
    np.testing.assert_array_equal(b, a - 3)
    with open("/proc/self/maps") as fh:
        maps = fh.read()
    if "/libgomp.so" not in maps:
        pytest.skip("the kernel's OpenMP runtime is not the system's libgomp here")
    assert any("libgomp" in p for p in module._PINNED), module._PINNED
    assert module.pin_openmp_runtime() is True          # idempotent


@pytest.mark.slow
def test_ten_processes_with_the_active_wait_policy_exit_cleanly(tmp_path):
    env = dict(os.environ, OMP_WAIT_POLICY="active", OMP_NUM_THREADS="4",
               LOOPTUNE_CACHE=os.environ.get("LOOPTUNE_CACHE", str(tmp_path / "cache")))
    env.pop("LOOPTUNE_OPENMP_DEFAULTS", None)          # the user's policy, not looptune's
    codes = []
    for _ in range(10):
        p = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                           text=True, timeout=120)
        codes.append(p.returncode)
        assert p.returncode == 0, (codes, p.stdout, p.stderr[-2000:])
        assert p.stdout.strip() == "ok"
    assert codes == [0] * 10
