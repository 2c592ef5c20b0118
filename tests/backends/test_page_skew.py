"""Stack buffers of a page or more start half a page from the output, modulo 4 KiB
(backends/c_math.py, lt_page_skew): a row buffer whose address agreed with the output's
modulo 4 KiB made row softmax 15% slower (4K aliasing), by the luck of the stack and of the
allocator. The placement changes no result; register tiles (under a page) stay arrays, and so
do buffers whose page of slack would pass the stack limit (6 KiB: 10 KiB in all)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import looptune as lt

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _rows(N=6, M=1024, dtype="float32"):
    """out = x * 2 + rowsum(x * 3) with the row of x * 3 buffered per row (M floats)."""
    x = lt.placeholder((N, M), dtype, name="x")
    e = lt.compute((N, M), lambda i, j: x[i, j] * 3.0, name="e")
    k = lt.reduce_axis(M, name="k")
    r = lt.compute((N,), lambda i: lt.sum(e[i, k], axis=k), name="r")
    out = lt.compute((N, M), lambda i, j: e[i, j] * 2.0 + r[i], name="out")
    s = lt.create_schedule(out)
    i, _ = s[out].op.axis
    s[out].parallel(i)
    s[e].compute_at(s[out], i)
    s[r].compute_at(s[out], i)
    return s, [x, out]


def _at(offset: int, shape, dtype, fill):
    """An array of ``shape`` starting ``offset`` bytes into a page."""
    n = int(np.prod(shape))
    item = np.dtype(dtype).itemsize
    buf = np.empty(n + 8192 // item, dtype)
    start = ((-buf.ctypes.data) % 4096 + offset) // item
    a = buf[start:start + n].reshape(shape)
    a[...] = fill
    assert a.ctypes.data % 4096 == offset
    return a


@pytest.mark.parametrize("M, dtype, skewed", [(1024, "float32", True), (512, "float64", True),
                                              (1536, "float32", False), (1023, "float32", False),
                                              (256, "float32", False)])
def test_page_sized_stack_buffers_are_skewed_and_results_do_not_change(M, dtype, skewed):
    s, args = _rows(6, M, dtype)
    f = lt.build(s, args, name=f"skew_{M}_{dtype}")
    src = f.source
    assert ("lt_page_skew(" in src) is skewed, src
    if skewed:   # the buffer is a page larger and its pointer starts inside it
        assert re.search(r"e_page\[\d+\] __attribute__\(\(aligned\(64\)\)\);", src)
        assert "__builtin_assume_aligned(e_page + lt_page_skew(e_page, out, " in src
    rng = np.random.default_rng(M)
    x = rng.standard_normal((6, M)).astype(dtype)
    e = x * dtype_t(dtype)(3)
    want = e * dtype_t(dtype)(2) + e.sum(axis=1, keepdims=True, dtype=dtype)
    for off in (0, 16, 2048, 4032):
        out = _at(off, (6, M), dtype, np.nan)
        f(x, out)
        np.testing.assert_allclose(out, want, rtol=1e-5 if dtype == "float32" else 1e-12,
                                   atol=1e-4 if dtype == "float32" else 1e-9)


def dtype_t(dtype):
    return np.dtype(dtype).type


def test_register_tiles_stay_plain_arrays():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import matmul
    finally:
        sys.path.remove(str(EXAMPLES))
    s, args = matmul.hand_schedule(64, 64, 64)
    src = lt.build(s, args, name="skew_mm").source
    assert "lt_page_skew" not in src
    assert re.search(r"float partial\[\d+\] __attribute__\(\(aligned\(64\)\)\);", src)
