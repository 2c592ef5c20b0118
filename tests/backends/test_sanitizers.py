"""Risky schedules built with ``-sanitize=address,undefined`` and run in a subprocess that
preloads the sanitizer runtimes: the generated code never reads or writes out of bounds (not
even in an if_then_else branch not taken, or in a guarded tail) and has no undefined behaviour.
Arrays are exact-size numpy allocations, so AddressSanitizer's redzones border each one."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def _runtime(name: str) -> str | None:
    try:
        out = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True,
                             check=False).stdout.strip()
    except OSError:
        return None
    return out if os.path.isabs(out) and os.path.exists(out) else None


ASAN, UBSAN = _runtime("libasan.so"), _runtime("libubsan.so")

RUNNER = textwrap.dedent("""
    import os
    import sys
    os.environ.pop("LD_PRELOAD", None)     # the compiler this process runs needs no sanitizer
    sys.path[:0] = [{tests!r}, {tests!r} + "/schedule"]
    import numpy as np
    import looptune as lt
    import util
    TARGET = "c -sanitize=address,undefined"
    MAKE = {{"BLUR": lambda: util.blur(13, 17), "CONV": lambda: util.conv2d(1, 2, 9, 11, 3),
            "CHAIN": lambda: util.chain(11, 23), "SOFTMAX": lambda: util.softmax(9, 19),
            "SCALED": lambda: util.matmul_scaled(13, 19, 11),
            "MATMUL": lambda: util.matmul(13, 19, 11)}}

    KEEP = []   # see util.ALIVE

    def run(args, inputs, want, tol, s):
        f = lt.build(s, args, target=TARGET)
        KEEP.append(f)
        arrays = [np.array(inputs[t.name]) if t.name in inputs else
                  np.zeros(want[t.name].shape, t.dtype) for t in args]
        f(*arrays)
        for t, a in zip(args, arrays):
            if t.name in want:
                np.testing.assert_allclose(a, want[t.name], **tol)

    def index_case(m, key):
        X, flat, outs = m._index_ops()
        s = lt.create_schedule(outs)
        m.INDEX[key](s, flat, outs)
        x = np.random.default_rng(0).uniform(-1, 1, (m.N, m.M)).astype("float32")
        run([X, *outs], {{"X": x}}, m._index_reference(x.astype(np.float64)),
            {{"rtol": 1e-5}}, s)

    def int32_case():
        X = lt.placeholder((37,), "int32", name="X")
        Y = lt.placeholder((37,), "int32", name="Y")
        S = lt.compute((37,), lambda i: X[i] * Y[i] + X[i], name="S")
        rng = np.random.default_rng(0)
        x = rng.integers(-2**31, 2**31, 37, dtype=np.int32)
        y = rng.integers(-2**31, 2**31, 37, dtype=np.int32)
        with np.errstate(over="ignore"):
            want = x * y + x
        run([X, Y, S], {{"X": x, "Y": y}}, {{"S": want}}, {{"rtol": 0}}, lt.create_schedule(S))

    for case in {cases!r}:
        print("case", case, flush=True)
        mod, table, key = case.split(":")
        if table == "INT":
            int32_case()
        elif table == "INDEX":
            index_case(__import__(mod), key)
        else:
            w = MAKE[table]()
            s = w.schedule()
            getattr(__import__(mod), table)[key](s, w)
            data = w.make_data(np.random.default_rng(0))
            run(w.args, data, w.reference(data), w.tol, s)
    print("sanitized run ok")
""")

GROUPS = {
    "out_of_bounds": [
        "test_sched_stencils:BLUR:at_innermost_xi",
        "test_sched_stencils:BLUR:halide_classic",
        "test_sched_stencils:CONV:pad_at_xo",
        "test_sched_stencils:CONV:pad_inline",
        "test_sched_elementwise:INDEX:split_vec_par",
        "test_sched_elementwise:INDEX:flat_at_innermost",
        "test_sched_elementwise:CHAIN:nested_at",
        "test_sched_reductions:SOFTMAX:row_blocks",
        "test_sched_matmul:SCALED:at_middle_ko",   # (inner levels take ~30 s to compile)
    ],
    # numpy wraps int32 arithmetic; in C signed overflow is undefined behaviour
    "int32_wraparound": ["int32:INT:wraps"],
}


@pytest.mark.slow
@pytest.mark.skipif(not (ASAN and UBSAN), reason="gcc's libasan/libubsan runtimes not found")
@pytest.mark.parametrize("group", GROUPS)
def test_sanitized_run(group, tmp_path):
    env = dict(os.environ, LD_PRELOAD=f"{ASAN}:{UBSAN}",
               ASAN_OPTIONS="detect_leaks=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    script = RUNNER.format(tests=str(TESTS), cases=GROUPS[group])
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0 and "sanitized run ok" in proc.stdout, \
        f"{group}: exit {proc.returncode}\n{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}"
