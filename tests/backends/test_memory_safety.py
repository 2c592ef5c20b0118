"""Memory safety of the generated code (issue 15): intermediate sizes are computed in 64 bits
with an overflow check, a failed allocation is an error code (RunError in Python, the return
value in C; never abort()), ``-bounds-check`` checks data-dependent (gather) indices at run time,
and ``-sanitize`` in a plain Python process is a BuildError, not a dead process.

Calls that crashed the process before these fixes run in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import looptune as lt
import numpy as np
import pytest
import util


def _run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env)
    env.pop("LD_PRELOAD", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=env)


TRIPLE = """
    import numpy as np
    import looptune as lt
    n, m = lt.var("n"), lt.var("m")
    X = lt.placeholder((n,), name="X")
    W = lt.placeholder((m,), name="W")
    T = lt.compute((n, m, m, m), lambda i, a, b, c: X[i] + W[a] * W[b] - W[c], name="T")
    a, b, c = (lt.reduce_axis(m, name=r) for r in "abc")
    Y = lt.compute((n,), lambda i: lt.sum(T[i, a, b, c], axis=[a, b, c]), name="Y")
    s = lt.create_schedule(Y)
    s[Y].parallel(Y.op.axis[0])
    s[T].compute_at(s[Y], Y.op.axis[0])       # T[i] (m x m x m) allocated in the parallel loop
    f = lt.build(s, [X, W, Y], name="triple")
"""


def test_allocation_size_overflow_is_an_error_not_a_crash():
    proc = _run_python(TRIPLE + """
    try:
        f(np.ones(4, "float32"), np.ones(3_000_000, "float32"), np.zeros(4, "float32"))
    except lt.RunError as e:
        print("RunError", e.code, e)
    x = np.arange(5, dtype="float32")
    w = np.linspace(-1, 1, 7).astype("float32")
    y = np.zeros(5, "float32")
    f(x, w, y)
    want = (x[:, None, None, None] + w[None, :, None, None] * w[None, None, :, None]
            - w[None, None, None, :]).sum(axis=(1, 2, 3))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
    print("numbers ok")
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RunError 1 triple(): an intermediate buffer could not be allocated (its size " \
           "overflows 64 bits or memory is exhausted); got error code 1;" in proc.stdout
    assert "numbers ok" in proc.stdout


def test_exported_function_returns_the_allocation_error_to_its_caller(tmp_path):
    proc = _run_python(TRIPLE + f"""
    lt.export_library(f, {str(tmp_path / "libtriple")!r})
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    main = tmp_path / "main.c"
    main.write_text(textwrap.dedent("""
        #include <stdio.h>
        #include <stdlib.h>
        #include "libtriple.h"
        int main(void) {
          int64_t m = 3000000;
          float *x = calloc(4, sizeof(float)), *w = calloc(m, sizeof(float));
          float y[4];
          printf("%d\\n", triple(x, w, y, 4, m));
          float x2[2] = {1, 2}, w2[2] = {1, 1}, y2[2];
          int rc = triple(x2, w2, y2, 2, 2);
          printf("%d %g %g\\n", rc, y2[0], y2[1]);
          return 0;
        }
    """))
    exe = tmp_path / "app"
    subprocess.run(["gcc", "-o", str(exe), str(main), "-I", str(tmp_path), "-L", str(tmp_path),
                    "-ltriple", f"-Wl,-rpath,{tmp_path}"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split() == ["1", "0", "8", "16"], out
    assert "returns 1 when an intermediate buffer cannot be allocated" in \
        (tmp_path / "libtriple.h").read_text()


# ---- -bounds-check --------------------------------------------------------------------------

def _gather(target: str, parallel: bool = False):
    """G[i, j] = A[I[i], J[j]] + A[I[i], 0]."""
    A = lt.placeholder((7, 5), name="A")
    rows = lt.placeholder((11,), "int32", name="I")
    cols = lt.placeholder((3,), "int64", name="J")
    G = lt.compute((11, 3), lambda i, j: A[rows[i], cols[j]] + A[rows[i], 0], name="G")
    s = lt.create_schedule(G)
    if parallel:
        s[G].parallel(G.op.axis[0])
    return lt.build(s, [A, rows, cols, G], target=target, name="gather"), [A, rows, cols, G]


def _gather_data(rng):
    a = util.rand(rng, (7, 5))
    return a, rng.integers(0, 7, 11).astype(np.int32), rng.integers(0, 5, 3).astype(np.int64)


@pytest.mark.parametrize("parallel", [False, True])
def test_bounds_check_gathers_inside_bounds_match_numpy(parallel, rng):
    f, args = _gather("c -bounds-check", parallel)
    a, i, j = _gather_data(rng)
    want = a[i][:, j] + a[i, 0][:, None]
    util.run_check(None, args, {"A": a, "I": i, "J": j}, {"G": want}, f=f)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("which, value, dim, index", [
    ("I", 7, 0, r"I\[i\]"), ("I", -1, 0, r"I\[i\]"), ("J", 5, 1, r"J\[j\]"),
    ("J", -(2 ** 40), 1, r"J\[j\]"), ("J", 2 ** 40, 1, r"J\[j\]"),
])
def test_bounds_check_reports_an_index_out_of_bounds(parallel, which, value, dim, index, rng):
    f, _ = _gather("c -bounds-check", parallel)
    a, i, j = _gather_data(rng)
    bad = {"I": i, "J": j}[which]
    bad[len(bad) // 2] = value
    extent = 7 if dim == 0 else 5
    with pytest.raises(lt.RunError, match=rf"gather\(\): the index {index} of tensor 'A' "
                       rf"\(dimension {dim}\) is outside \[0, {extent}\); got error code 25\d "
                       "from -bounds-check; give index arrays values inside"):
        f(a, i, j, np.zeros((11, 3), np.float32))


def test_bounds_check_in_an_exported_function_returns_the_site(tmp_path, rng):
    f, _ = _gather("c -bounds-check")
    paths = lt.export_library(f, tmp_path / "libgather")
    header = paths["h"].read_text()
    assert "returns 256 when index I[i] of A (dimension 0) is outside [0, 7)" in header
    main = tmp_path / "main.c"
    main.write_text(textwrap.dedent("""
        #include <stdio.h>
        #include "libgather.h"
        int main(void) {
          float a[35] = {0}, g[33];
          int32_t i[11] = {0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3};
          int64_t j[3] = {0, 4, 2};
          printf("%d ", gather(a, i, j, g));
          j[1] = 5;
          printf("%d ", gather(a, i, j, g));
          j[1] = 4;
          i[3] = 70;
          printf("%d\\n", gather(a, i, j, g));
          return 0;
        }
    """))
    exe = tmp_path / "app"
    subprocess.run(["gcc", "-o", str(exe), str(main), "-I", str(tmp_path), str(paths["a"]),
                    "-lm"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    codes = [int(c) for c in out.split()]
    assert codes[0] == 0 and codes[1] >= 256 and codes[2] >= 256
    msgs = [f.code.checks[c - 256].message("gather", c) for c in codes[1:]]
    assert "J[j]" in msgs[0] and "I[i]" in msgs[1]


def test_without_bounds_check_no_check_is_generated():
    f, _ = _gather("c")
    assert "lt_chk(" not in f.source.split("lt_chk(int64_t")[1]
    assert f.code.checks == ()


# ---- -sanitize in a plain process -----------------------------------------------------------

@pytest.mark.parametrize("kind, runtime", [("address", "AddressSanitizer"),
                                           ("address,undefined", "AddressSanitizer"),
                                           ("thread", "ThreadSanitizer"),
                                           ("leak", "LeakSanitizer")])
@pytest.mark.slow
def test_sanitize_without_its_runtime_is_a_build_error(kind, runtime):
    proc = _run_python(f"""
        import looptune as lt
        X = lt.placeholder((10,), name="X")
        Y = lt.compute((10,), lambda i: X[i] * 2.0, name="Y")
        try:
            lt.build(lt.create_schedule(Y), [X, Y], target="c -sanitize={kind}", name="twice")
        except lt.BuildError as e:
            print("BuildError:", e)
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"-sanitize={kind} needs the {runtime} runtime loaded first in this process" \
        in proc.stdout
    assert "LD_PRELOAD=$(gcc -print-file-name=lib" in proc.stdout


def test_sanitize_undefined_needs_no_preload(rng):
    X = lt.placeholder((10,), name="X")
    Y = lt.compute((10,), lambda i: X[i] * 2.0, name="Y")
    f = lt.build(lt.create_schedule(Y), [X, Y], target="c -sanitize=undefined", name="twice")
    x = util.rand(rng, (10,))
    util.run_check(None, [X, Y], {"X": x}, {"Y": 2 * x}, f=f)
