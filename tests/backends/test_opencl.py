"""The OpenCL backend against numpy on any OpenCL device (PoCL's CPU device in CI).

Skipped, with the reason, where pyopencl is missing or no device can compile a kernel.
"""
from __future__ import annotations

import logging
import os
import subprocess

import looptune as lt
import numpy as np
import pytest
import util

cl = pytest.importorskip("pyopencl", reason="the opencl target needs pyopencl (pip install "
                         "'looptune[opencl]')")

pytestmark = pytest.mark.opencl


@pytest.fixture(scope="module")
def target(opencl: str) -> str:
    """The OpenCL target (tests/conftest.py's ``opencl``: skips without a device)."""
    return opencl


def check(s, w: util.Workload, target: str, seed: int = 0):
    """Build ``s`` for ``target``, run it on guarded arrays, compare with numpy."""
    f = lt.build(s, w.args, target=target, name=w.name)
    data = w.make_data(np.random.default_rng(seed))
    util.run_check(s, w.args, data, w.reference(data), f=f, **w.tol)
    return f


def bind_2d(s, T, fy: int, fx: int):
    """Tile T's two axes and bind them to 2-D work-groups of fy x fx work-items."""
    i, j = s[T].op.axis
    by, bx, ty, tx = s[T].tile(i, j, fy, fx)
    s[T].bind(by, "blockIdx.y")
    s[T].bind(bx, "blockIdx.x")
    s[T].bind(ty, "threadIdx.y")
    s[T].bind(tx, "threadIdx.x")
    return by, bx, ty, tx


def bind_1d(s, T, factor: int):
    o, i = s[T].split(s[T].op.axis[0], factor=factor)
    s[T].bind(o, "blockIdx.x")
    s[T].bind(i, "threadIdx.x")


def arrays(w: util.Workload, seed: int = 0) -> list[np.ndarray]:
    data = w.make_data(np.random.default_rng(seed))
    ref = w.reference(data)
    return [data[t.name] if t.name in data else np.zeros(ref[t.name].shape, t.dtype)
            for t in w.args]


# ---- differential tests ----------------------------------------------------------------------

def test_matmul_2d_blocks_and_threads(target):
    w = util.matmul(37, 53, 101)
    s = w.schedule()
    bind_2d(s, w["C"], 8, 8)
    f = check(s, w, target)
    assert [k.name for k in f.kernels] == ["matmul_C"]
    assert f.launch_sizes(*arrays(w)) == [((56, 40), (8, 8))]
    assert "get_group_id(1)" in f.source and "get_local_id(0)" in f.source
    assert "reqd_work_group_size(8, 8, 1)" in f.source


def test_matmul_private_accumulator(target):
    w = util.matmul(37, 53, 29)
    s = w.schedule()
    CL = s.cache_write(w["C"], "local")
    _, _, _, tx = bind_2d(s, w["C"], 4, 16)
    s[CL].compute_at(s[w["C"]], tx)
    (k,) = s[CL].op.reduce_axis
    _, ki = s[CL].split(k, factor=4)
    s[CL].unroll(ki)
    f = check(s, w, target)
    assert "__local" not in f.source           # one accumulator per work-item


def test_matmul_shared_tiles_with_barriers(target):
    w = util.matmul(37, 53, 29)
    s = util.shared_tiles(w)          # A and B in shared tiles, C.local per work-item
    f = check(s, w, target)
    src = f.source
    assert "__local float A_shared[64];" in src and "__local float B_shared[64];" in src
    assert "barrier(CLK_LOCAL_MEM_FENCE);" in src
    assert f.kernels[0].local_bytes == 3 * 64 * 4        # C.local is shared by the group too


def test_softmax_one_kernel_with_compute_at(target):
    w = util.softmax(37, 53)
    s = w.schedule()
    out = w["softmax"]
    s[w["expx"]].compute_inline()
    i, j = s[out].op.axis
    _, ji = s[out].split(j, factor=16)
    s[out].bind(i, "blockIdx.x")
    s[out].bind(ji, "threadIdx.x")
    s[w["rowmax"]].compute_at(s[out], i)
    s[w["rowsum"]].compute_at(s[out], i)
    f = check(s, w, target)
    assert len(f.kernels) == 1 and not f.temporaries


def softmax_kernel_per_stage(w):
    """Schedule softmax ``w`` as one kernel per root stage (row statistics 1-D, others 2-D)."""
    s = w.schedule()
    for T in (w["rowmax"], w["rowsum"]):
        bind_1d(s, T, 8)
    for T in (w["expx"], w["softmax"]):
        bind_2d(s, T, 4, 16)
    return s


def test_softmax_one_kernel_per_root_stage(target):
    w = util.softmax(37, 53)
    f = check(softmax_kernel_per_stage(w), w, target)
    assert [k.name for k in f.kernels] == [
        "softmax_rowmax", "softmax_expx", "softmax_rowsum", "softmax_softmax"]
    assert [b.name for b in f.temporaries] == ["rowmax", "expx", "rowsum"]


def test_conv2d(target):
    w = util.conv2d()
    s = w.schedule()
    Y = w["conv"]
    s[w["Xpad"]].compute_inline()
    n, c, y, x = s[Y].op.axis
    nc = s[Y].fuse(n, c)
    yx = s[Y].fuse(y, x)
    o, i = s[Y].split(yx, factor=16)
    s[Y].bind(nc, "blockIdx.y")
    s[Y].bind(o, "blockIdx.x")
    s[Y].bind(i, "threadIdx.x")
    check(s, w, target)


def blur_in_work_group(w, producer_threads_x: int = 16):
    """blur_y in 8x16 work-groups; blur_x computed per work-group by its threads."""
    s = w.schedule()
    by, bx = w["blur_y"], w["blur_x"]
    _, xo, _, _ = bind_2d(s, by, 8, 16)
    s[bx].compute_at(s[by], xo)
    ay, ax = s[bx].op.axis
    ayo, ayi = s[bx].split(ay, nparts=8)
    axo, axi = s[bx].split(ax, nparts=producer_threads_x)
    s[bx].reorder(ayo, axo, ayi, axi)
    s[bx].bind(ayo, "threadIdx.y")
    s[bx].bind(axo, "threadIdx.x")
    return s


@pytest.mark.parametrize("size", [(32, 48), (37, 53)])
def test_blur_compute_at_inside_work_group(target, size):
    w = util.blur(*size)
    f = check(blur_in_work_group(w), w, target)
    assert "__local float blur_x[160];" in f.source        # a 10 x 16 tile per work-group
    assert "barrier(CLK_LOCAL_MEM_FENCE);" in f.source


def test_work_group_level_stores_come_from_one_work_item(target):
    # threads fill blur_x; blur_y is computed outside any thread loop, by local id 0 only
    w = util.blur(21, 35)
    s = w.schedule()
    by, bx = w["blur_y"], w["blur_x"]
    y, x = s[by].op.axis
    yo, xo, _, _ = s[by].tile(y, x, 8, 16)
    s[by].bind(yo, "blockIdx.y")
    s[by].bind(xo, "blockIdx.x")
    s[bx].compute_at(s[by], xo)
    ay, ax = s[bx].op.axis
    ayo, _ = s[bx].split(ay, nparts=2)
    axo, _ = s[bx].split(ax, nparts=16)
    s[bx].reorder(ayo, axo)
    s[bx].bind(ayo, "threadIdx.y")
    s[bx].bind(axo, "threadIdx.x")
    f = check(s, w, target)
    assert "if (get_local_id(0) == 0 && get_local_id(1) == 0)" in f.source


def test_blocks_without_threads(target):
    w = util.matmul(13, 21, 5)
    s = w.schedule()
    i, j = s[w["C"]].op.axis
    s[w["C"]].bind(i, "blockIdx.y")
    s[w["C"]].bind(j, "blockIdx.x")
    f = check(s, w, target)
    assert f.launch_sizes(*arrays(w)) == [((21, 13), None)]
    assert "get_global_id(1)" in f.source and "get_group_id" not in f.source


def test_float16_is_refused(target):
    X = lt.placeholder((4,), "float16", name="X")
    Y = lt.compute((4,), lambda i: X[i] + X[i], name="Y")
    with pytest.raises(lt.BuildError, match="computes in float16, which the opencl target "
                                            "does not support"):
        lt.build(lt.create_schedule(Y), [X, Y], target=target)


def test_producer_longer_than_the_launch_is_strided(target, monkeypatch):
    # blur_x's 10 rows per work-group on threadIdx.y of extent 8 (blur_y's): a strided loop;
    # its <= 16 columns on threadIdx.x of extent 16: a guard. (Tail partitioning would give the
    # full tiles a constant 10 rows, which disagrees with 8: turn it off to see the general case)
    import sys
    monkeypatch.setattr(sys.modules["looptune.schedule.lower"], "partition_tails",
                        lambda s, region_hook=None: s)
    w = util.blur(37, 53)
    s = w.schedule()
    by, bx = w["blur_y"], w["blur_x"]
    _, xo, _, _ = bind_2d(s, by, 8, 16)
    s[bx].compute_at(s[by], xo)
    ay, ax = s[bx].op.axis
    s[bx].bind(ay, "threadIdx.y")
    s[bx].bind(ax, "threadIdx.x")
    f = check(s, w, target)
    assert "y = (int64_t)get_local_id(1); y < blur_x_ext0; y += 8)" in f.source
    assert "if (x < blur_x_ext1)" in f.source


def symbolic_matmul(target):
    """C[n, m] = A[n, k] @ B[k, m] of symbolic sizes in 4 x 8 work-groups, built as "mm"."""
    n, m, kk = lt.var("n"), lt.var("m"), lt.var("k")
    A = lt.placeholder((n, kk), "float32", name="A")
    B = lt.placeholder((kk, m), "float32", name="B")
    k = lt.reduce_axis(kk, name="k")
    C = lt.compute((n, m), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = lt.create_schedule(C)
    bind_2d(s, C, 4, 8)
    return lt.build(s, [A, B, C], target=target, name="mm"), (n, m, kk), (A, B, C)


def test_symbolic_sizes(target):
    f, (n, m, kk), (A, B, C) = symbolic_matmul(target)
    rng = np.random.default_rng(1)
    for N, M, K in [(5, 7, 3), (33, 17, 40), (0, 9, 2), (6, 0, 1)]:
        a, b = util.rand(rng, (N, K)), util.rand(rng, (K, M))
        util.run_check(None, [A, B, C], {"A": a, "B": b},
                       {"C": a.astype(np.float64) @ b}, f=f)
    a, b, c = np.zeros((33, 40), "float32"), np.zeros((40, 17), "float32"), np.zeros(
        (33, 17), "float32")
    assert f.launch_sizes(a, b, c) == [((24, 36), (8, 4))]
    assert set(f.kernels[0].size_vars) == {n, m, kk}


def test_symbolic_work_group_checked_at_call(target):
    n = lt.var("n")
    X = lt.placeholder((n,), "float32", name="X")
    Y = lt.compute((n,), lambda i: X[i] * 2.0, name="Y")
    s = lt.create_schedule(Y)
    s[Y].bind(Y.op.axis[0], "threadIdx.x")
    f = lt.build(s, [X, Y], target=target, name="twice")
    x = np.arange(7, dtype="float32")
    y = np.zeros(7, "float32")
    f(x, y)
    np.testing.assert_array_equal(y, 2 * x)
    big = f.device.max_work_group_size + 1
    with pytest.raises(lt.ScheduleError, match="larger than device|more than device"):
        f(np.zeros(big, "float32"), np.zeros(big, "float32"))


def test_unbound_stages_run_as_single_work_items(target, caplog):
    w = util.chain(13, 7)
    s = w.schedule()
    s[w["D"]].parallel(s[w["D"]].op.axis[0])
    with caplog.at_level(logging.INFO, logger="looptune.backends.opencl"):
        f = check(s, w, target)
    assert "single work-item" in caplog.text
    assert "marked parallel" in caplog.text
    assert len(f.kernels) == 3 and [b.name for b in f.temporaries] == ["B1", "B2"]
    assert all(k.local_size is None for k in f.kernels)


def test_dtypes_and_intrinsics(target):
    n = lt.var("n")
    X = lt.placeholder((n,), "int32", name="X")
    Q = lt.compute((n,), lambda i: X[i] // -3 + X[i] % 5, name="Q")
    P = lt.compute((n,), lambda i: X[i] < 2, name="P")
    F = lt.compute((n,), lambda i: lt.exp(X[i].astype("float64") * 0.01)
                   + lt.sigmoid(X[i].astype("float32")).astype("float64"), name="F")
    s = lt.create_schedule([Q, P, F])
    for T in (Q, P, F):
        bind_1d(s, T, 16)
    f = lt.build(s, [X, Q, P, F], target=target, name="mixed")
    x = np.arange(-40, 41, dtype="int32")
    want = {"Q": x // -3 + x % 5, "P": x < 2,
            "F": np.exp(x * 0.01) + 1 / (1 + np.exp(-x.astype(np.float32)))}
    util.run_check(None, [X, Q, P, F], {"X": x}, want, f=f)


def test_time_uses_event_profiling(target):
    w = util.matmul(64, 64, 64)
    s = w.schedule()
    bind_2d(s, w["C"], 8, 8)
    f = lt.build(s, w.args, target=target)
    args = arrays(w)
    t = f.time(*args, number=3, repeat=2)
    assert len(t.results) == 2 and t.median > 0
    t = f.time(*args, number=1, repeat=1, min_repeat_ms=2)
    assert t.median > 0
    np.testing.assert_allclose(args[2], args[0] @ args[1], rtol=1e-4, atol=1e-4)


def test_program_cache_and_module_surface(target, tmp_path):
    from looptune.backends import opencl
    w = util.matmul(9, 10, 11)
    s = w.schedule()
    bind_2d(s, w["C"], 4, 4)
    f = lt.build(s, w.args, target=target, name="cached")
    n = len(opencl._programs)
    g = lt.build(s, w.args, target=target, name="cached")
    assert len(opencl._programs) == n and g.source == f.source
    k = f.kernels[0]
    assert k.name == "cached_C"
    assert [b.name for b in k.buffers] == ["A", "B", "C"] and k.local_size is not None
    assert "__kernel" in f.source and "opencl" in repr(f)


# ---- export: a C program runs the OpenCL functions of an exported library --------------------

CL_MAIN = r"""
#include "libmix.h"
#include <stdio.h>
#include <stdlib.h>
static void fill(float *x, long n, int seed) {
  for (long i = 0; i < n; ++i) x[i] = (float)((i * 7 + seed * 13) % 23) / 8.0f - 1.0f;
}
static void dump(const char *tag, const float *x, long n) {
  printf("%s", tag);
  for (long i = 0; i < n; ++i) printf(" %.9g", x[i]);
  printf("\n");
}
int main(void) {
  static float a[33 * 40], b[40 * 17], c[33 * 17], x[37 * 53], y[37 * 53], z[37 * 53];
  fill(a, 33 * 40, 1); fill(b, 40 * 17, 2); fill(x, 37 * 53, 3);
  int rc = mm(a, b, c, 33, 40, 17);
  if (rc) { printf("mm %d %s\n", rc, libmix_opencl_error()); return 1; }
  dump("mm", c, 33 * 17);
  rc = mm(a, b, c, 0, 2, 9);                     /* empty: no launch, no error */
  if (rc) { printf("mm0 %d %s\n", rc, libmix_opencl_error()); return 1; }
  rc = softmax(x, y);
  if (rc) { printf("softmax %d %s\n", rc, libmix_opencl_error()); return 1; }
  dump("softmax", y, 37 * 53);
  if (softmax_c(x, z)) return 2;                 /* a C function of the same library */
  dump("softmax_c", z, 37 * 53);
  return 0;
}
"""


def _fill(n: int, seed: int) -> np.ndarray:
    i = np.arange(n, dtype=np.int64)
    return ((i * 7 + seed * 13) % 23).astype(np.float32) / np.float32(8.0) - np.float32(1.0)


_PROBE = """
import pyopencl as cl
why = "no device"
for p in cl.get_platforms():
    for d in p.get_devices():
        try:
            cl.Program(cl.Context([d]), "__kernel void k(__global float *a) { a[0] = 1; }").build()
            raise SystemExit(0)
        except cl.Error as e:
            lines = str(e).strip().splitlines()
            why = next((ln for ln in lines if "error:" in ln), lines[-1]).strip()
raise SystemExit(why)
"""


def _bundled_driver_fails(vendors: str) -> str:
    """Why no device of the ICD directory ``vendors`` alone builds a trivial kernel (in a
    fresh process, as the exported program will look), or "" when one does."""
    import sys
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         env=_fresh_env(OCL_ICD_VENDORS=vendors), timeout=120, check=False)
    if out.returncode == 0:
        return ""
    return (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1]


def _fresh_env(**extra) -> dict:
    """This environment without the variables that point a C program to an OpenCL loader
    (pyopencl's import sets PYOPENCL_HOME): the exported library finds the platform alone."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOOPTUNE_OPENCL_LIBRARY", "PYOPENCL_HOME", "OCL_ICD_VENDORS")}
    return dict(env, **extra)


def _mixed_library(target, tmp_path):
    mm = symbolic_matmul(target)[0]
    w = util.softmax(37, 53)
    sm = lt.build(softmax_kernel_per_stage(w), w.args, target=target, name="softmax")
    assert len(sm.kernels) == 4 and len(sm.temporaries) == 3
    smc = lt.build(w.schedule(), w.args, name="softmax_c")
    paths = lt.export_library([mm, sm, smc], tmp_path / "libmix")
    (tmp_path / "main.c").write_text(CL_MAIN)
    exe = tmp_path / "app"
    subprocess.run(["gcc", "-o", str(exe), str(tmp_path / "main.c"), "-I", str(tmp_path),
                    "-L", str(tmp_path), "-lmix", f"-Wl,-rpath,{tmp_path}"], check=True)
    return paths, exe


@pytest.mark.slow
def test_exported_library_runs_opencl_functions_from_c(target, tmp_path):
    paths, exe = _mixed_library(target, tmp_path)
    header = paths["h"].read_text()
    assert "int mm(const float *A, const float *B, float *C, int64_t n, int64_t k, " \
           "int64_t m);" in header
    assert "const char *libmix_opencl_error(void);" in header
    assert "runs on an OpenCL device" in header
    out = subprocess.run([str(exe)], capture_output=True, text=True, env=_fresh_env(),
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    _check_mixed_output(out.stdout)


def _check_mixed_output(stdout: str) -> None:
    rows = {line.split()[0]: np.array(line.split()[1:], np.float32)
            for line in stdout.strip().splitlines()}
    a, b = _fill(33 * 40, 1).reshape(33, 40), _fill(40 * 17, 2).reshape(40, 17)
    np.testing.assert_allclose(rows["mm"].reshape(33, 17), a.astype(np.float64) @ b,
                               rtol=1e-5, atol=1e-5)
    x = _fill(37 * 53, 3).reshape(37, 53).astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(rows["softmax"].reshape(37, 53), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rows["softmax_c"].reshape(37, 53), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_exported_library_finds_pyopencls_platform_through_ocl_icd_vendors(target, tmp_path):
    """Only the wheel's .icd directory in the ICD search (a system PoCL, e.g. Debian's, out of
    it): its driver, named there without a directory, is found beside the .icd file."""
    from looptune.backends.opencl_loader import pyopencl_bundle
    home, loader = pyopencl_bundle()
    if not loader:
        pytest.skip("this pyopencl brings no ICD loader and driver of its own")
    why = _bundled_driver_fails(os.path.join(home, ".libs"))
    if why:
        pytest.skip(f"the pyopencl wheel's own PoCL builds no kernel on this CPU ({why}); the "
                    "README's OpenCL note: its LLVM predates newer CPUs, a system PoCL serves "
                    "them")
    _, exe = _mixed_library(target, tmp_path)
    for extra in ({}, {"LOOPTUNE_OPENCL_LIBRARY": loader}):
        env = _fresh_env(OCL_ICD_VENDORS=os.path.join(home, ".libs"), **extra)
        out = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        _check_mixed_output(out.stdout)


def test_exported_library_with_a_library_that_is_no_loader_says_so(target, tmp_path):
    _, exe = _mixed_library(target, tmp_path)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                         env=_fresh_env(LOOPTUNE_OPENCL_LIBRARY="libm.so.6"))
    assert out.returncode == 1, out.stdout[:300]
    assert out.stdout.startswith("mm -1 mm: no OpenCL platform: the OpenCL loader libm.so.6 has "
                                 "no clGetPlatformIDs; install an OpenCL ICD loader and driver")


def test_exported_opencl_function_without_a_loader_says_so(target, tmp_path):
    _, exe = _mixed_library(target, tmp_path)
    env = dict(os.environ, LOOPTUNE_OPENCL_LIBRARY=str(tmp_path / "no" / "libOpenCL.so"))
    out = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1
    assert out.stdout.startswith("mm -1 mm: no OpenCL platform: cannot load the OpenCL loader ")
    assert str(tmp_path / "no" / "libOpenCL.so") in out.stdout
    assert "LOOPTUNE_OPENCL_LIBRARY" in out.stdout


def test_export_refuses_opencl_functions_of_two_targets(target, tmp_path):
    w = util.matmul(9, 10, 11)
    s = w.schedule()
    bind_2d(s, w["C"], 4, 4)
    f = lt.build(s, w.args, target=target, name="mm1")
    g = lt.build(s, w.args, target=lt.Target("opencl", {"platform": "pocl"}), name="mm2")
    with pytest.raises(lt.BuildError, match="one library runs on one device"):
        lt.export_library([f, g], tmp_path / "libtwo")


def test_argument_checks(target):
    w = util.matmul(9, 10, 11)
    s = w.schedule()
    bind_2d(s, w["C"], 4, 4)
    f = lt.build(s, w.args, target=target, name="checked")
    a, b, c = arrays(w)
    with pytest.raises(TypeError, match="dtype"):
        f(a.astype("float64"), b, c)
    with pytest.raises(ValueError, match="shape"):
        f(a, b, np.zeros((9, 9), "float32"))
    with pytest.raises(TypeError, match="takes 3 arrays"):
        f(a, b)


# ---- device selection ------------------------------------------------------------------------

def test_device_selection(target):
    w = util.matmul(5, 6, 7)
    with pytest.raises(lt.BuildError, match="no usable OpenCL device"):
        lt.build(w.schedule(), w.args, target="opencl -platform=no-such-platform")
    with pytest.raises(lt.BuildError, match="-device must be one of"):
        lt.build(w.schedule(), w.args, target="opencl -device=fpga")
    cpus = [d for p in cl.get_platforms() for d in p.get_devices()
            if d.type & cl.device_type.CPU]
    if cpus:
        f = lt.build(w.schedule(), w.args, target="opencl -device=cpu")
        assert f.device.type & cl.device_type.CPU
    word = lt.build(w.schedule(), w.args, target=target).device.platform.name.split()[0]
    f = lt.build(w.schedule(), w.args, target=f"opencl -platform={word.lower()}")
    assert word in f.device.platform.name


# ---- validation ------------------------------------------------------------------------------

def test_same_tag_twice_in_a_nest(target):
    w = util.matmul(8, 8, 8)
    s = w.schedule()
    i, j = s[w["C"]].op.axis
    with pytest.raises(lt.ScheduleError, match=r"'i'.* bound to threadIdx.x"):
        s[w["C"]].bind(i, "threadIdx.x")
        s[w["C"]].bind(j, "threadIdx.x")     # refused here or when the kernel is generated
        lt.build(s, w.args, target=target)


def test_block_loop_under_serial_loop(target):
    w = util.matmul(16, 16, 8)
    s = w.schedule()
    i, _ = s[w["C"]].op.axis
    _, ii = s[w["C"]].split(i, factor=4)
    s[w["C"]].bind(ii, "blockIdx.x")
    with pytest.raises(lt.ScheduleError, match=r"bind\(i.inner, 'blockIdx.x'\).*nested inside "
                                               r"loop 'i.outer' \(serial, not bound\)"):
        lt.build(s, w.args, target=target)


def test_extents_disagree_between_stages(target):
    w = util.blur(32, 48)
    s = blur_in_work_group(w, producer_threads_x=8)
    with pytest.raises(lt.ScheduleError, match=r"bind\(x.inner, .threadIdx.x.\): the extent 16 "
                                               r"disagrees with extent 8 of loop .x.outer."):
        lt.build(s, w.args, target=target)


def test_work_group_larger_than_device(target):
    from looptune.backends.opencl import select_device
    most = select_device(lt.Target.parse(target)).max_work_group_size
    w = util.matmul(4, 2 * most, 3)
    s = w.schedule()
    bind_2d(s, w["C"], 2, most)
    with pytest.raises(lt.ScheduleError, match="larger than device|more than device"):
        lt.build(s, w.args, target=target)


def test_reduction_loop_bound(target):
    w = util.matmul(8, 8, 8)
    s = w.schedule()
    (k,) = s[w["C"]].op.reduce_axis
    with pytest.raises(lt.ScheduleError, match="rfactor"):
        s[w["C"]].bind(k, "threadIdx.x")
    i, j = s[w["C"]].op.axis
    s[w["C"]].reorder(k, i, j)
    with pytest.raises(lt.ScheduleError, match=r"bind\(k.*rfactor"):
        s[w["C"]].bind(k, "blockIdx.x")      # refused here or when the kernel is generated
        lt.build(s, w.args, target=target)


def test_bound_reduction_caught_in_the_kernel(target):
    # the kernel-level check, whatever bind() lets through: C's store ignores blockIdx.x
    from looptune.backends.opencl_codegen import generate_opencl
    from looptune.schedule.stmt import For, ForKind, StmtMutator

    class BindK(StmtMutator):
        def visit_For(self, s):
            body = self.visit(s.body)
            if s.var.name == "k":
                return For(s.var, s.min, s.extent, ForKind.THREAD, body, "blockIdx.x")
            return For(s.var, s.min, s.extent, s.kind, body, s.tag)

    w = util.matmul(8, 8, 8)
    s = w.schedule()
    i, j = s[w["C"]].op.axis
    s[w["C"]].reorder(s[w["C"]].op.reduce_axis[0], i, j)
    f = lt.lower(s, w.args)
    f.body = BindK().visit(f.body)
    with pytest.raises(lt.ScheduleError, match=r"store to 'C' does not depend on 'k'.*rfactor"):
        generate_opencl(f)


def test_shared_buffer_placement(target):
    w = util.matmul(16, 16, 8)
    A, C = w["A"], w["C"]
    s = w.schedule()
    s.cache_read(A, "shared", [C])
    bind_2d(s, C, 4, 4)
    with pytest.raises(lt.ScheduleError, match="scope 'shared' but is computed at root"):
        lt.build(s, w.args, target=target)
    s = w.schedule()
    AS = s.cache_read(A, "shared", [C])
    _, _, _, tx = bind_2d(s, C, 4, 4)
    s[AS].compute_at(s[C], tx)
    with pytest.raises(lt.ScheduleError, match="allocated inside thread loops"):
        lt.build(s, w.args, target=target)


def test_blur_store_at_slides_per_work_group(target):
    """store_at on OpenCL: blur_y's strips one per work-group, blur_x computed per row and
    stored per strip (a sliding window in each work-group's private buffer)."""
    w = util.blur(37, 53)
    s = w.schedule()
    by, bx = w["blur_y"], w["blur_x"]
    y, _ = s[by].op.axis
    yo, yi = s[by].split(y, factor=8)
    s[by].bind(yo, "blockIdx.x")
    s[bx].compute_at(s[by], yi)
    s[bx].store_at(s[by], yo)
    assert "% 4" in str(lt.lower(s, w.args))        # folded to 4 rows
    check(s, w, target)
