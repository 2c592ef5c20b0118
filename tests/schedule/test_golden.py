"""Golden loop-nest text for the lowering of key schedules (tests/schedule/golden/*.txt).

After an intended change of the lowering, refresh with ``pytest tests/schedule --update-golden``
and review the diff of the .txt files like code.
"""
from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from util import blur, matmul, softmax

import looptune as lt

GOLDEN = Path(__file__).parent / "golden"


def tiled_matmul():
    w = matmul(37, 53, 101)
    s = w.schedule()
    C = w["C"]
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].unroll(ki)
    s[C].parallel(io)
    return w, s


def blur_compute_at():
    w = blur(37, 53)
    s = w.schedule()
    by, bx = w["blur_y"], w["blur_x"]
    y, x = s[by].op.axis
    yo, xo, yi, xi = s[by].tile(y, x, 8, 16)
    s[by].vectorize(xi)
    s[by].parallel(yo)
    s[bx].compute_at(s[by], xo)
    by_, bx_ = s[bx].op.axis
    s[bx].vectorize(bx_)
    return w, s


def softmax_rows():
    w = softmax(37, 53)
    s = w.schedule()
    out = w["softmax"]
    i, j = s[out].op.axis
    for name in ("rowmax", "expx", "rowsum"):
        s[w[name]].compute_at(s[out], i)
    jo, ji = s[out].split(j, factor=8)
    s[out].vectorize(ji)
    s[out].parallel(i)
    return w, s


def blur_two_y_outer():
    """blur_x, computed at blur_y's y.outer, splits its own y: two distinct loops called
    y.outer, one inside the other (the printer shows the inner one as y.outer#2)."""
    w = blur(19, 23)
    s = w.schedule()
    by, bx = w["blur_y"], w["blur_x"]
    y, x = s[by].op.axis
    yo, yi = s[by].split(y, factor=8)
    s[bx].compute_at(s[by], yo)
    s[bx].split(s[bx].op.axis[0], factor=4)
    return w, s


CASES = {"tiled_matmul": tiled_matmul, "blur_compute_at": blur_compute_at,
         "softmax": softmax_rows, "blur_two_y_outer": blur_two_y_outer}


@pytest.mark.parametrize("name", CASES)
def test_golden_loop_nest(name, update_golden):
    w, s = CASES[name]()
    text = str(lt.lower(s, w.args, name=name)) + "\n"
    path = GOLDEN / f"{name}.txt"
    if update_golden:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing; create it with pytest --update-golden"
    want = path.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True),
                                            f"golden/{name}.txt", "lowered now"))
        pytest.fail(f"the loop nest of '{name}' changed (refresh with --update-golden if "
                    f"intended):\n{diff}")


@pytest.mark.parametrize("name", CASES)
def test_golden_schedules_compute_the_right_numbers(name):
    w, s = CASES[name]()
    w.check(s)
