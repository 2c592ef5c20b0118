"""export_library: a plain C program links the exported library and gets numpy's numbers."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest

import looptune as lt

from built_kernels import built_axpy, built_matmul


C_MAIN = r"""
#include "libops.h"
#include <stdio.h>
int main(void) {
  float x[10], y[10], z[10], a[13 * 7], b[7 * 21], c[13 * 21];
  for (int i = 0; i < 10; ++i) { x[i] = (float)i; y[i] = 100.0f * i; }
  for (int i = 0; i < 13 * 7; ++i) a[i] = (float)(i % 5) - 2.0f;
  for (int i = 0; i < 7 * 21; ++i) b[i] = (float)(i % 3) * 0.5f;
  if (vadd(x, y, z, 10) != 0) return 1;
  if (mm(a, b, c) != 0) return 2;
  for (int i = 0; i < 10; ++i) printf("%.6g ", z[i]);
  printf("\n");
  for (int i = 0; i < 13 * 21; ++i) printf("%.6g ", c[i]);
  printf("\n");
  return 0;
}
"""


@pytest.mark.parametrize("link", ["shared", "static"])
@pytest.mark.slow
def test_c_program_links_exported_library(tmp_path, link):
    paths = lt.export_library([built_axpy(), built_matmul()], tmp_path / "libops")
    assert {p.name for p in paths.values()} == {"libops.so", "libops.a", "libops.h", "libops.c"}
    header = paths["h"].read_text()
    assert "int vadd(const float *X, const float *Y, float *Z, int64_t n);" in header
    assert "shape [13, 7]" in header and "output C" in header
    (tmp_path / "main.c").write_text(C_MAIN)
    exe = tmp_path / "app"
    lib = ["-L", str(tmp_path), "-lops", f"-Wl,-rpath,{tmp_path}"] if link == "shared" else \
        [str(paths["a"]), "-fopenmp", "-lmvec", "-lm"]
    subprocess.run(["gcc", "-o", str(exe), str(tmp_path / "main.c"), "-I", str(tmp_path), *lib],
                   check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    z_line, c_line = out.strip().splitlines()
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_allclose(np.array(z_line.split(), np.float32), 2 * x + 100 * x)
    a = (np.arange(13 * 7) % 5 - 2).astype(np.float32).reshape(13, 7)
    b = ((np.arange(7 * 21) % 3) * 0.5).astype(np.float32).reshape(7, 21)
    np.testing.assert_allclose(np.array(c_line.split(), np.float32).reshape(13, 21), a @ b,
                               rtol=1e-5)


def test_exported_so_needs_only_libc_libm_openmp(tmp_path):
    paths = lt.export_library(built_axpy(), tmp_path / "libv")
    deps = subprocess.run(["ldd", str(paths["so"])], capture_output=True, text=True).stdout
    names = {line.split()[0] for line in deps.strip().splitlines()}
    allowed = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "libgomp.so.1", "libmvec.so.1",
               "/lib64/ld-linux-x86-64.so.2"}
    assert names <= allowed, names - allowed


def test_export_refuses_duplicate_names(tmp_path):
    f = built_axpy()
    with pytest.raises(lt.BuildError, match="two functions are named 'vadd'"):
        lt.export_library([f, f], tmp_path / "libdup")


def test_export_refuses_unwritable_output(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory")
    with pytest.raises(lt.BuildError, match="cannot create .*file.txt"):
        lt.export_library(built_axpy(), blocker / "libx")


def test_export_refuses_empty():
    with pytest.raises(lt.BuildError, match="at least one"):
        lt.export_library([], "/tmp/never")
