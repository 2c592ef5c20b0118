"""In-place kernels and the fast call paths of a built C function: ``build(may_alias=...)``
drops ``restrict`` on the named parameters and lets the checked call pass them one buffer;
``module.bind(...)`` checks fixed arguments once and runs without checks; ``unchecked``
runs without any check."""
from __future__ import annotations

import re

import numpy as np
import pytest

import looptune as lt


def _ew(n=37, name="ew"):
    """Z = exp(X) * 0.5 + Y: a same-index elementwise map of two inputs."""
    X = lt.placeholder((n,), "float32", name="X")
    Y = lt.placeholder((n,), "float32", name="Y")
    Z = lt.compute((n,), lambda i: lt.exp(X[i]) * 0.5 + Y[i], name="Z")
    s = lt.create_schedule([Z])
    _, xi = s[Z].split(Z.op.axis[0], factor=8)
    s[Z].vectorize(xi)
    return s, (X, Y, Z)


def _params(source: str, fname: str) -> list[str]:
    sig = re.search(rf"int {fname}\(([^)]*)\)", source).group(1)
    return [p.strip() for p in sig.split(",")]


def test_may_alias_drops_restrict_on_the_named_parameters_only():
    s, (X, Y, Z) = _ew()
    f = lt.build(s, [X, Y, Z], name="ew_alias", may_alias=[X, "Z"])
    assert _params(f.source, "ew_alias") == ["const float *X", "const float *restrict Y",
                                             "float *Z"]
    assert f.may_alias == ("X", "Z")
    g = lt.build(s, [X, Y, Z], name="ew_plain")
    assert all("restrict" in p for p in _params(g.source, "ew_plain"))
    assert g.may_alias == ()


def test_in_place_update_through_the_checked_call_is_exact(rng):
    s, (X, Y, Z) = _ew()
    f = lt.build(s, [X, Y, Z], name="ew_inplace", may_alias=[X, Z])
    x = rng.standard_normal(37).astype("float32")
    y = rng.standard_normal(37).astype("float32")
    want = np.exp(x) * 0.5 + y
    buf = x.copy()
    f(buf, y, buf)                                   # Z written over X
    np.testing.assert_allclose(buf, want, rtol=1e-6)
    other = np.ones(80, np.float32)
    with pytest.raises(ValueError, match=r"output 'Z' shares memory with argument 'X'; pass "
                       r"separate arrays \(the same buffer is allowed, not a partial overlap\)"):
        f(other[:37], y, other[1:38])
    with pytest.raises(ValueError, match=r"output 'Z' shares memory with argument 'Y'; pass "
                       r"separate arrays \(in-place updates need both named in "
                       r"build\(..., may_alias=\[...\]\)\)"):
        f(x, buf, buf)


def test_may_alias_errors():
    s, (X, Y, Z) = _ew()
    W = lt.placeholder((37,), "float32", name="W")
    with pytest.raises(lt.BuildError, match=r"build\(may_alias=\[...\]\): 'W' is not one of the "
                       r"arguments of ew_bad \(X, Y, Z\)"):
        lt.build(s, [X, Y, Z], name="ew_bad", may_alias=[W, Z])
    with pytest.raises(lt.BuildError, match=r"'Q' is not one of the arguments"):
        lt.build(s, [X, Y, Z], name="ew_bad", may_alias=["Q", "Z"])
    with pytest.raises(lt.BuildError, match=r"got only 'Z'; name at least two arguments"):
        lt.build(s, [X, Y, Z], name="ew_bad", may_alias=[Z, "Z"])
    with pytest.raises(lt.BuildError, match=r"give a list of arguments"):
        lt.build(s, [X, Y, Z], name="ew_bad", may_alias="XZ")
    A = lt.placeholder((4,), "float32", name="A")
    B = lt.placeholder((4,), "float32", name="A")
    C = lt.compute((4,), lambda i: A[i] + B[i], name="C")
    with pytest.raises(lt.BuildError, match=r"'A' names several of the arguments"):
        lt.build(lt.create_schedule([C]), [A, B, C], name="dup_names", may_alias=["A", C])


def test_unchecked_and_bind_match_the_checked_call(rng):
    s, (X, Y, Z) = _ew()
    f = lt.build(s, [X, Y, Z], name="ew_fast")
    x, y = rng.standard_normal((2, 37)).astype("float32")
    want = np.empty(37, np.float32)
    f(x, y, want)
    z = np.empty(37, np.float32)
    f.unchecked(x, y, z)
    np.testing.assert_array_equal(z, want)
    y.setflags(write=False)                         # read-only inputs bind (weights are)
    run = f.bind(None, y, None)
    assert run.free == ("X", "Z")
    z2 = np.empty(37, np.float32)
    run(x, z2)
    np.testing.assert_array_equal(z2, want)
    z3 = np.zeros(37, np.float32)
    full = f.bind(x, y, z3)
    assert full.free == ()
    full()
    np.testing.assert_array_equal(z3, want)


def test_bind_checks_what_it_fixes():
    s, (X, Y, Z) = _ew()
    f = lt.build(s, [X, Y, Z], name="ew_bind", may_alias=[X, Z])
    ok = np.zeros(37, np.float32)
    with pytest.raises(TypeError, match=r"ew_bind.bind\(\) takes 3 arguments \(X, Y, Z; None "
                       r"for one given at each call\); got 2"):
        f.bind(None, ok)
    with pytest.raises(TypeError, match=r"argument 'Y' must have dtype float32; got float64"):
        f.bind(None, np.zeros(37), None)
    with pytest.raises(ValueError, match=r"ew_bind.bind\(\): argument 'Y' must have shape "
                       r"\(37,\); got \(36,\)"):
        f.bind(None, np.zeros(36, np.float32), None)
    ro = np.zeros(37, np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match=r"output 'Z' is read-only"):
        f.bind(None, None, ro)
    with pytest.raises(ValueError, match=r"output 'Z' shares memory with argument 'Y'"):
        f.bind(None, ok, ok)
    buf = np.zeros(37, np.float32)
    f.bind(buf, ok, buf)                             # the in-place pair: one buffer is fine


def test_symbolic_sizes_come_from_the_arrays_on_the_fast_paths(rng):
    n = lt.var("n")
    A = lt.placeholder((n, 3), "float32", name="A")
    B = lt.compute((n, 3), lambda i, j: A[i, j] * 2.0, name="B")
    f = lt.build(lt.create_schedule([B]), [A, B], name="twice_n")
    for rows in (1, 5):
        a = rng.standard_normal((rows, 3)).astype("float32")
        b = np.empty_like(a)
        f.unchecked(a, b)
        np.testing.assert_array_equal(b, 2 * a)
        b2 = np.empty_like(a)
        f.bind(None, b2)(a)                         # n from a fixed array
        np.testing.assert_array_equal(b2, 2 * a)
        b3 = np.empty_like(a)
        f.bind(a, None)(b3)                         # n from a free array: read at each call
        np.testing.assert_array_equal(b3, 2 * a)


def test_fast_paths_raise_the_kernels_errors():
    n = 6
    data = lt.placeholder((n,), "float32", name="data")
    idx = lt.placeholder((3,), "int32", name="idx")
    out = lt.compute((3,), lambda i: data[idx[i]], name="out")
    f = lt.build(lt.create_schedule([out]), [data, idx, out], target="c -bounds-check",
                 name="gather_chk")
    d = np.arange(n, dtype=np.float32)
    bad = np.array([0, 9, 1], np.int32)
    o = np.empty(3, np.float32)
    with pytest.raises(lt.RunError, match=r"gather_chk\(\): the index .* of tensor 'data'"):
        f.unchecked(d, bad, o)
    with pytest.raises(lt.RunError, match=r"of tensor 'data'"):
        f.bind(d, None, o)(bad)
    f.bind(d, None, o)(np.array([5, 0, 2], np.int32))
    np.testing.assert_array_equal(o, [5, 0, 2])
