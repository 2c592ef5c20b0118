"""rfactor: a factored reduction is exact for sum/max/min/prod, vectorized or parallel."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt

COMBINERS = {"sum": (lt.sum, np.sum), "max": (lt.max, np.max), "min": (lt.min, np.min),
             "prod": (lt.prod, np.prod)}


def _vector(n, combiner):
    X = lt.placeholder((n,), "float64", name="X")
    r = lt.reduce_axis(n, name="r")
    S = lt.compute((1,), lambda i: COMBINERS[combiner][0](X[r], axis=r), name="S")
    return X, S


@pytest.mark.parametrize("combiner", COMBINERS)
@pytest.mark.parametrize("n, factor", [(1001, 8), (37, 16), (5, 8)])
@pytest.mark.slow
def test_rfactor_1d_vectorized(combiner, n, factor):
    X, S = _vector(n, combiner)
    s = lt.create_schedule(S)
    ro, ri = s[S].split(s[S].op.reduce_axis[0], factor=factor)
    SF = s.rfactor(S, ri)
    assert SF.shape == (factor, 1)
    s[SF].vectorize(s[SF].op.axis[0])
    f = lt.build(s, [X, S])
    x = np.random.default_rng(n).uniform(0.9, 1.1, n)
    out = np.empty(1)
    f(x, out)
    np.testing.assert_allclose(out[0], COMBINERS[combiner][1](x), rtol=1e-12)


@pytest.mark.parametrize("combiner", ["sum", "max"])
def test_rfactor_row_reduction_parallel(combiner):
    R, C = 13, 301
    X = lt.placeholder((R, C), "float32", name="X")
    k = lt.reduce_axis(C, name="k")
    S = lt.compute((R,), lambda i: COMBINERS[combiner][0](X[i, k], axis=k), name="S")
    s = lt.create_schedule(S)
    ko, ki = s[S].split(s[S].op.reduce_axis[0], nparts=4)
    SF = s.rfactor(S, ko)          # SF[ko, i]: four partial results per row, one per thread
    s[SF].parallel(s[SF].op.axis[0])
    s[S].parallel(s[S].op.axis[0])
    f = lt.build(s, [X, S])
    assert "#pragma omp parallel for" in f.source
    x = np.random.default_rng(1).random((R, C), dtype=np.float32)
    out = np.empty(R, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, COMBINERS[combiner][1](x, axis=1), rtol=1e-5)


def test_parallel_reduction_loop_points_to_rfactor():
    X, S = _vector(64, "sum")
    s = lt.create_schedule(S)
    with pytest.raises(lt.ScheduleError, match=r"parallel\(r\).*carries the reduction.*"
                                               r"s\.rfactor\(S, r\)"):
        s[S].parallel(s[S].op.reduce_axis[0])


def test_vectorize_reduction_loop_is_refused():
    X, S = _vector(64, "sum")
    s = lt.create_schedule(S)
    ro, ri = s[S].split(s[S].op.reduce_axis[0], factor=8)
    with pytest.raises(lt.ScheduleError, match=r"vectorize\(r.inner\).*rfactor"):
        s[S].vectorize(ri)


@pytest.mark.parametrize("make, match", [
    (lambda s, S: s.rfactor(S, S.op.reduce_axis[0]), "only reduction loop"),
    (lambda s, S: s.rfactor(S, s[S].op.axis[0]), "is spatial"),
])
def test_rfactor_refusals(make, match):
    X, S = _vector(64, "sum")
    s = lt.create_schedule(S)
    with pytest.raises(lt.ScheduleError, match=match):
        make(s, S)


def test_rfactor_of_a_non_reduction_is_refused():
    X = lt.placeholder((8,), name="X")
    Y = lt.compute((8,), lambda i: X[i] + 1.0, name="Y")
    s = lt.create_schedule(Y)
    with pytest.raises(lt.ScheduleError, match="'Y' is not a reduction"):
        s.rfactor(Y, s[Y].op.axis[0])


def test_rfactor_keeps_the_reduction_domain_minimum():
    # was: rfactor dropped the lower bound of lt.reduce_axis((lo, hi)) and summed from 0
    X = lt.placeholder((20,), "float64", name="X")
    r = lt.reduce_axis((3, 20), name="r")
    S = lt.compute((1,), lambda i: lt.sum(X[r], axis=r), name="S")
    s = lt.create_schedule(S)
    ro, ri = s[S].split(s[S].op.reduce_axis[0], factor=4)
    s.rfactor(S, ri)
    x = np.arange(20.0)
    out = np.zeros(1)
    lt.build(s, [X, S])(x, out)
    assert out[0] == x[3:].sum()
