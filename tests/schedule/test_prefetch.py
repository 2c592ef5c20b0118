"""``s[C].prefetch(T, loop, offset)``: cache hints at the top of each iteration of a loop.

A prefetch never changes a result: every case is checked bit for bit against the same
schedule without it (and against numpy), at sizes with tails, with offsets past the loop's
end, in parallel and unrolled loops, for inputs and for attached intermediates. Every
address a prefetch forms lies inside its buffer (an interpreter of the lowered loops walks
every iteration of small cases). The generated C, the steps (printing, JSON, replay, state),
the OpenCL build (no prefetch there) and the errors of the primitive and of lowering."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from sanitizer_runner import sanitizer_env
from util import ALIVE, prefetches

import looptune as lt
from looptune.lang.expr import Const, Var
from looptune.lang.simplify import simplify
from looptune.lang.visitor import substitute
from looptune.schedule import steps as steps_mod
from looptune.schedule.stmt import (Allocate, For, IfThenElse, LetStmt, Prefetch, Seq,
                                    Store)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import matmul  # noqa: E402  (the packed GEMM whose micro-kernel prefetches its panels)


def _gemm(n, m, k, mr=4, nr=16, kc=16, mc=8, nc=32, prefetch=()):
    """The example's packed GEMM; ``prefetch``: (tensor name, offset) at the micro-kernel's
    reduction loop."""
    s, args = matmul._schedule(n, m, k, "float32", mr, nr, kc, mc, nc)
    P = s.stage("partial")
    (pk,) = [v for v in P.leaf_iter_vars if v.name == "ki"]
    for name, off in prefetch:
        P.prefetch(s.tensor(name), pk, off)
    return s, args


def _run(s, args, seed=0):
    f = lt.build(s, args)
    ALIVE.append(f)
    rng = np.random.default_rng(seed)
    ins = [rng.uniform(-1, 1, [int(d) for d in t.shape]).astype(t.dtype) for t in args[:-1]]
    out = np.zeros([int(d) for d in args[-1].shape], args[-1].dtype)
    f(*ins, out)
    return ins, out, f


# ---- exactness -----------------------------------------------------------------------------

@pytest.mark.parametrize("n,m,k", [(8, 32, 16), (13, 37, 29), (1, 5, 3), (33, 70, 47)])
@pytest.mark.parametrize("offset", [1, 3, 16, 1000])
def test_gemm_panels_prefetched_is_bit_for_bit_the_same(n, m, k, offset):
    plain = _run(*_gemm(n, m, k))[1]
    ins, got, f = _run(*_gemm(n, m, k, prefetch=[("B_packed", offset), ("A_packed", offset)]))
    assert prefetches(f.source, "B_packed") and prefetches(f.source, "A_packed")
    np.testing.assert_array_equal(got, plain)
    np.testing.assert_allclose(got, ins[0] @ ins[1], rtol=1e-5, atol=1e-5)


def _blur(h=19, w=45):
    I = lt.placeholder((h + 2, w + 2), name="I")
    bx = lt.compute((h + 2, w), lambda y, x: I[y, x] + I[y, x + 1] + I[y, x + 2], name="bx")
    by = lt.compute((h, w), lambda y, x: bx[y, x] + bx[y + 1, x] + bx[y + 2, x], name="by")
    return I, bx, by


def _blur_ref(img):
    bx = img[:, :-2] + img[:, 1:-1] + img[:, 2:]
    return bx[:-2] + bx[1:-1] + bx[2:]


@pytest.mark.parametrize("where", ["inline", "root", "strip"])
def test_stencil_rows_prefetched_in_a_parallel_loop_exact(where):
    """by's row loop prefetches the rows it will read ``offset`` rows ahead: three rows of
    bx (or, with bx inlined, of the input): a loop of rows around each prefetch."""
    I, bx, by = _blur()
    s = lt.create_schedule(by)
    y, x = s[by].op.axis
    yo, yi = s[by].split(y, factor=4)
    s[by].parallel(yo)
    s[by].vectorize(x)
    if where == "inline":
        s[bx].compute_inline()
        s[by].prefetch(I, yi, 2)
    elif where == "root":
        s[by].prefetch(bx, yi, 2)
    else:
        s[bx].compute_at(s[by], yo)
        s[by].prefetch(bx, yi, 1)
    text = str(lt.lower(s, [I, by]))
    assert "prefetch " in text and "prefetch0" in text, text     # rows: a loop of rows
    img = np.random.default_rng(1).uniform(-1, 1, (21, 47)).astype("float32")
    out = np.zeros((19, 45), "float32")
    f = lt.build(s, [I, by])
    ALIVE.append(f)
    f(img, out)
    plain = lt.create_schedule(by)
    if where == "inline":
        plain[bx].compute_inline()
    ref = np.zeros_like(out)
    g = lt.build(plain, [I, by])
    ALIVE.append(g)
    g(img, ref)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_allclose(out, _blur_ref(img), rtol=1e-5, atol=1e-5)


def test_prefetch_in_an_unrolled_loop_and_symbolic_sizes_exact():
    n, m = lt.var("n"), lt.var("m")
    A = lt.placeholder((n, m), name="A")
    B = lt.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = lt.create_schedule(B)
    io, ii = s[B].split(s[B].loop("i"), factor=4)
    s[B].unroll(ii)
    s[B].prefetch(A, io, 1)
    s[B].prefetch(A, ii, 2)
    f = lt.build(s, [A, B])
    ALIVE.append(f)
    for shape in [(1, 1), (9, 13), (16, 64)]:
        a = np.random.default_rng(2).uniform(-1, 1, shape).astype("float32")
        b = np.zeros_like(a)
        f(a, b)
        np.testing.assert_array_equal(b, a * 2 + 1)


# ---- every address inside its buffer -------------------------------------------------------

def _value(e, env) -> int:
    v = simplify(substitute(e, env)) if not isinstance(e, int) else Const(e, "int32")
    assert isinstance(v, Const), f"not constant under the loops: {e} -> {v}"
    return int(v.value)


def _walk(s, env, seen: list, inside: bool = True) -> None:
    """Run the lowered loops (their control flow only) and record every prefetch's region
    (with the value of loop ``ki`` where there is one); ``inside``: check each region against
    its buffer's shape."""
    if isinstance(s, Seq):
        for x in s.stmts:
            _walk(x, env, seen, inside)
    elif isinstance(s, For):
        lo = _value(s.min, env)
        for i in range(lo, lo + _value(s.extent, env)):
            _walk(s.body, {**env, s.var: Const(i, "int32")}, seen, inside)
    elif isinstance(s, LetStmt):
        _walk(s.body, {**env, s.var: Const(_value(s.value, env), "int32")}, seen, inside)
    elif isinstance(s, IfThenElse):
        c = simplify(substitute(s.cond, env))
        if not isinstance(c, Const) or c.value:
            _walk(s.then, env, seen, inside)
        if s.orelse is not None and (not isinstance(c, Const) or not c.value):
            _walk(s.orelse, env, seen, inside)
    elif isinstance(s, Allocate):
        _walk(s.body, env, seen, inside)
    elif isinstance(s, Prefetch):
        idx = [_value(i, env) for i in s.indices]
        count = _value(s.count, env)
        if inside:
            shape = [_value(d if not isinstance(d, int) else Const(d, "int32"), env)
                     for d in s.buffer.shape]
            assert all(0 <= i < d for i, d in zip(idx, shape)), (s.buffer.name, idx, shape)
            assert 0 <= count and idx[-1] + count <= shape[-1], (s.buffer.name, idx, count,
                                                                 shape)
            seen.append((s.buffer.name, tuple(idx), count))
        else:
            ki = next(v.value for k, v in env.items() if k.name == "ki")
            seen.append((s.buffer.name, tuple(idx), count, ki))
    else:
        assert isinstance(s, Store), type(s)


@pytest.mark.parametrize("offset", [1, 5, 40])
def test_every_prefetched_address_is_inside_its_buffer(offset):
    """Tails of every split (13 x 37 x 29 with 4 x 16 tiles, kc 16) and an offset beyond the
    loop: every prefetch of the packed panels stays inside the (attached) buffers."""
    s, args = _gemm(13, 37, 29, prefetch=[("B_packed", offset), ("A_packed", offset)])
    f = lt.lower(s, args)
    seen: list = []
    _walk(f.body, {}, seen)
    names = {x[0] for x in seen}
    assert names == {"A_packed", "B_packed"} and len(seen) > 500
    # the last iterations fetch the last region again (no row past it)
    assert max(i[1] for n, i, _ in seen if n == "B_packed") == 15


def test_stencil_rows_prefetched_stay_inside_the_strip_buffer():
    I, bx, by = _blur(11, 9)
    s = lt.create_schedule(by)
    yo, yi = s[by].split(s[by].op.axis[0], factor=4)
    s[bx].compute_at(s[by], yo)                  # bx holds the strip's rows + 2 only
    s[by].prefetch(bx, yi, 3)
    s[bx].prefetch(I, s[bx].op.axis[0], 3)      # bx's own rows: of the strip's input rows
    seen: list = []
    _walk(lt.lower(s, [I, by]).body, {}, seen)
    assert {n for n, _, _ in seen} == {"bx", "I"}
    assert all(c == 9 for n, _, c in seen if n == "bx")


# ---- the generated code, the steps ---------------------------------------------------------

def test_generated_c_fetches_each_line_ahead_and_clamps_the_iteration():
    s, args = _gemm(32, 64, 64, kc=32, prefetch=[("B_packed", 16)])
    text = str(lt.lower(s, args))
    # ki's 32 iterations: the first 16 fetch ki + 16, the last 16 the last row; the clamp
    # stays in the address (a prefetch's min is no tail: the loop is not split on it, which
    # would copy the micro-kernel into a second branch)
    assert "prefetch B_packed[j.inner.outer, min((ki + 16), 31), 0] x 16" in text, text
    assert text.count("prefetch B_packed") == 1, text
    src = lt.build(s, args).source
    # a row of 16 floats, one line: its first byte and its last (it may start inside a line)
    assert "__builtin_prefetch((const void *)(lt_pf + 0), 0, 3);" in src
    assert "__builtin_prefetch((const void *)(lt_pf + 63), 0, 3);" in src
    assert "lt_prefetch(" not in src                # no loop, no helper for a short row
    assert not prefetches(src, "A_packed")          # only what was asked for
    plain = lt.build(*_gemm(32, 64, 64)).source
    assert "prefetch" not in plain                  # no helper when nothing prefetches


def test_steps_print_serialise_replay_and_state():
    s, args = _gemm(13, 37, 29, prefetch=[("B_packed", 16)])
    step = s.steps[-1]
    assert str(step) == "s[partial].prefetch(B_packed, s[partial].loop('ki'), 16)"
    assert steps_mod.dumps([step]) == '[["prefetch", "partial", ["B_packed", "ki", 16]]]'
    fresh, _ = matmul._schedule(13, 37, 29, "float32", 4, 16, 16, 8, 32)
    again = lt.replay(lt.create_schedule(args[-1]), steps_mod.loads(steps_mod.dumps(s.steps)))
    assert str(lt.lower(again, args)) == str(lt.lower(s, args))
    ns = steps_mod.namespace(fresh)
    exec(str(step), ns)
    assert fresh.state == s.state
    # a prefetch is part of the program: the same loops without it are another state
    assert _gemm(13, 37, 29)[0].state != s.state
    assert _gemm(13, 37, 29, prefetch=[("B_packed", 8)])[0].state != s.state


def test_opencl_drops_the_hints_and_stays_exact(opencl):
    I, bx, by = _blur()
    s = lt.create_schedule(by)
    s[bx].compute_inline()
    y, x = s[by].op.axis
    s[by].bind(y, "blockIdx.x")
    xo, xi = s[by].split(x, factor=16)
    s[by].prefetch(I, xo, 1)
    f = lt.build(s, [I, by], target=opencl)
    img = np.random.default_rng(3).uniform(-1, 1, (21, 47)).astype("float32")
    out = np.zeros((19, 45), "float32")
    f(img, out)
    np.testing.assert_allclose(out, _blur_ref(img), rtol=1e-5, atol=1e-5)


# ---- errors --------------------------------------------------------------------------------

def test_errors_of_the_primitive():
    I, bx, by = _blur()
    J = lt.placeholder((3,), name="J")
    s = lt.create_schedule(by)
    y, x = s[by].op.axis
    with pytest.raises(lt.ScheduleError, match=r"stage 'by': prefetch\(I, y\): 'by' does not "
                       r"read 'I' \(not even through inlined stages\); it reads \['bx'\]"):
        s[by].prefetch(I, y, 1)            # by reads bx, which is not inlined
    with pytest.raises(lt.ScheduleError, match=r"s.tensor\('J'\): no stage or input is called"):
        s[by].prefetch(J, y, 1)
    with pytest.raises(lt.ScheduleError, match=r"prefetch\(by, y\): 'by' is what 'by' "
                       r"computes; prefetch a tensor it reads"):
        s[by].prefetch(by, y, 1)
    for bad in (0, -2, 1.5, "x"):
        with pytest.raises(lt.ScheduleError, match=r"prefetch\(bx, y\): offset must be a "
                           r"positive int"):
            s[by].prefetch(bx, y, bad)
    with pytest.raises(lt.ScheduleError, match=r"expected a tensor this stage reads; got 3"):
        s[by].prefetch(3, y, 1)
    with pytest.raises(lt.ScheduleError, match=r"prefetch\(bx, \.\.\.\): loop 'y' is a loop "
                       r"of stage 'bx'"):
        s[by].prefetch(bx, s[bx].op.axis[0], 1)
    s[by].vectorize(x)
    with pytest.raises(lt.ScheduleError, match=r"prefetch\(bx, x\): loop 'x' is marked "
                       r"vectorize: .*prefetch at a loop outside it"):
        s[by].prefetch(bx, x, 1)
    s[by].prefetch(bx, y, 2)
    with pytest.raises(lt.ScheduleError, match=r"'bx' is already prefetched at loop 'y'"):
        s[by].prefetch(bx, y, 4)
    with pytest.raises(lt.ScheduleError, match=r"split\(y\): loop 'y' prefetches 'bx'; split "
                       r"before prefetching"):
        s[by].split(y, factor=2)
    s2 = lt.create_schedule(by)
    y2, x2 = s2[by].op.axis
    s2[by].prefetch(bx, x2, 1)
    with pytest.raises(lt.ScheduleError, match=r"fuse\(y, x\): loop 'x' prefetches 'bx'; fuse "
                       r"before prefetching"):
        s2[by].fuse(y2, x2)
    with pytest.raises(lt.ScheduleError, match=r"vectorize\(x\): loop 'x' prefetches 'bx'; a "
                       r"SIMD loop has no iterations of its own"):
        s2[by].vectorize(x2)
    with pytest.raises(lt.ScheduleError, match=r"bind\(x\): loop 'x' prefetches 'bx'; a bound "
                       r"loop has no iterations"):
        s2[by].bind(x2, "threadIdx.x")
    s2[by].parallel(x2)                     # a loop may prefetch and run in parallel


def test_errors_at_lowering():
    I, bx, by = _blur()
    s = lt.create_schedule(by)
    y, x = s[by].op.axis
    s[by].prefetch(bx, y, 1)
    s[bx].compute_inline()                  # inlined after the prefetch was asked for
    with pytest.raises(lt.ScheduleError, match=r"stage 'by': prefetch\(bx, y\): 'by' reads no "
                       r"element of 'bx' after inlining \('bx' is inlined into it: prefetch "
                       r"the tensors 'bx' reads\)"):
        lt.lower(s, [I, by])

    s = lt.create_schedule(by)
    y, x = s[by].op.axis
    s[bx].compute_at(s[by], y)              # bx's buffer exists inside each iteration of y
    s[by].prefetch(bx, y, 1)
    with pytest.raises(lt.ScheduleError, match=r"prefetch\(bx, y\): 'bx' is computed inside "
                       r"loop 'y' \(compute_at by, y\): its buffer does not exist yet"):
        lt.lower(s, [I, by])
    s = lt.create_schedule(by)
    y, x = s[by].op.axis
    s[bx].compute_at(s[by], y)
    s[by].prefetch(bx, x, 1)                # inside the attach point: fine
    lt.lower(s, [I, by])

    A = lt.placeholder((8, 8), name="A")
    P = lt.compute((8, 8), lambda i, j: A[i, j] + 1.0, name="P")
    Q = lt.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="Q")
    C = lt.compute((8, 8), lambda i, j: P[i, j] + Q[i, j], name="C")
    s = lt.create_schedule(C)
    s[P].prefetch(A, s[P].op.axis[0], 1)
    s[Q].prefetch(A, s[Q].op.axis[0], 2)
    s[Q].compute_with(s[P], s[P].op.axis[0])
    text = str(lt.lower(s, [A, C]))         # both at the top of the fused loop's iteration
    assert "prefetch A[min((i + 1), 7), 0] x 8" in text
    assert "prefetch A[min((i + 2), 7), 0] x 8" in text          # Q's, in P's loop variable
    body = text[text.index("for i in [0, 8)"):]
    assert body.index("prefetch") < body.index("P[i, j] =") < body.index("Q[i, j] =")
    assert text.count("for i in") == 2      # the fused loop and C's
    f = lt.build(s, [A, C])
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    c = np.empty_like(a)
    f(a, c)
    np.testing.assert_array_equal(c, (a + 1) + a * 2)


ASAN_CASE = """
import sys
sys.path.insert(0, {examples!r})
import numpy as np
import looptune as lt
import matmul
s, args = matmul._schedule(13, 37, 29, "float32", 4, 16, 16, 8, 32)
P = s.stage("partial")
ki = P.loop("ki")
P.prefetch(s.tensor("B_packed"), ki, 40)
P.prefetch(s.tensor("A_packed"), ki, 3, bound="nonfaulting")   # past its buffer: no report
f = lt.build(s, args, target="c -sanitize=address,undefined")
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (13, 29)).astype("float32")
b = rng.uniform(-1, 1, (29, 37)).astype("float32")
c = np.zeros((13, 37), "float32")
f(a, b, c)
assert np.allclose(c, a @ b, rtol=1e-5, atol=1e-5)
print("ok")
"""


def test_prefetch_under_asan_and_ubsan():
    examples = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
    proc = subprocess.run([sys.executable, "-c", ASAN_CASE.format(examples=examples)],
                          capture_output=True, text=True, timeout=300, env=sanitizer_env(),
                          check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


# ---- along: the same iteration of a loop, in a later iteration of an enclosing host loop ------

def _rows(N=37, M=256, chunk=32):
    """A row-wise pipeline: e = exp-like map of x buffered per row (computed at out's row
    loop), out = e * 2; e's column loop split in chunks."""
    x = lt.placeholder((N, M), name="x")
    e = lt.compute((N, M), lambda i, j: x[i, j] * 3.0 + 1.0, name="e")
    out = lt.compute((N, M), lambda i, j: e[i, j] * 2.0, name="out")
    s = lt.create_schedule(out)
    io, ii = s[out].split(s[out].op.axis[0], factor=1)
    s[out].parallel(io)
    s[e].compute_at(s[out], ii)
    jo, ji = s[e].split(s[e].op.axis[1], factor=chunk)
    s[e].vectorize(ji)
    return s, x, e, out, io, jo


@pytest.mark.parametrize("N, M, chunk, offset", [(37, 256, 32, 1), (5, 100, 16, 2),
                                                 (1, 64, 64, 1), (9, 48, 32, 3)])
def test_prefetch_along_fetches_each_chunk_of_a_later_row_and_changes_nothing(N, M, chunk,
                                                                             offset):
    s, x, e, out, io, jo = _rows(N, M, chunk)
    s[e].prefetch(x, jo, offset, along=io)
    text = lowered = str(lt.lower(s, [x, out]))
    # row i.outer + offset, clamped to the last row (the clamp stays in the address)
    if N == 1:                              # unit loops are elided: the one row, again
        assert "prefetch x[0, 0] x 64" in text, text
        text = text.replace("x[0, 0] x 64", "x[0, (j.outer * 64)] x 64")
    rows = set(re.findall(r"prefetch x\[(.+?), \(j\.outer \* \d+\)\] x ", text))
    want = {f"(i.outer + {offset})", f"{N - 1}", f"min((i.outer + {offset}), {N - 1})"}
    assert rows and rows <= want and (N == 1 or any("i.outer" in r for r in rows)), text
    assert f"prefetch x[min((i.outer + {offset}), {N - 1}), (j.outer * {chunk})] x {chunk}" \
        in text or N == 1 or M % chunk, text
    body = text[text.index("for j.outer"):] if N > 1 else text
    assert body.index("prefetch x") < body.index("e[0, ")     # at the top of each chunk
    f = lt.build(s, [x, out])
    a = np.random.default_rng(N).random((N, M), dtype=np.float32)
    got = np.empty_like(a)
    f(a, got)
    np.testing.assert_array_equal(got, (a * np.float32(3) + np.float32(1)) * np.float32(2))
    assert "along='i.outer'" in str(s.steps[-1])          # the printed step replays
    s2, x2, e2, out2, io2, jo2 = _rows(N, M, chunk)
    s2[e2].prefetch(x2, jo2, offset, along="i.outer")
    assert str(lt.lower(s2, [x2, out2])) == lowered
    src = f.source
    assert prefetches(src, "x")


def test_prefetch_along_replays_from_json_and_old_records_still_replay():
    from looptune.schedule.steps import Step
    s, x, e, out, io, jo = _rows()
    s[e].prefetch(x, jo, 2, along=io)
    step = s.steps[-1]
    rec = step.to_json()
    assert rec == ["prefetch", "e", ["x", "j.outer", 2, "i.outer"]]
    assert Step.from_json(rec) == step
    old = Step.from_json(["prefetch", "e", ["x", "j.outer", 2]])      # a log of before
    assert old.along is None and old.to_json() == ["prefetch", "e", ["x", "j.outer", 2]]
    s2, x2, _, out2, _, _ = _rows()
    s2 = lt.create_schedule(out2)
    for st in s.steps:                       # the same steps, applied from their records
        s2.apply_step(Step.from_json(st.to_json()))
    assert str(lt.lower(s2, [x2, out2])) == str(lt.lower(s, [x, out]))


def test_prefetch_along_errors():
    s, x, e, out, io, jo = _rows()
    with pytest.raises(lt.ScheduleError, match=r"stage 'out': prefetch\(e, i.outer\): "
                       r"along='i.outer': 'out' is not computed at another stage's loop"):
        s[out].prefetch(e, io, 1, along=io)
    with pytest.raises(lt.ScheduleError, match=r"along must be a loop \(IterVar, or its name\)"):
        s[e].prefetch(x, jo, 1, along=3)
    with pytest.raises(lt.ScheduleError, match=r"along='j.inner': no loop called 'j.inner' "
                       r"encloses 'e' where it is computed; the enclosing loops are "
                       r"\['out.i.outer', 'out.i.inner'\]"):
        s[e].prefetch(x, jo, 1, along=s[e].leaf_iter_vars[2])
    ji_out = s[out].op.axis[1]
    with pytest.raises(lt.ScheduleError, match=r"no loop called 'j' encloses 'e'"):
        s[e].prefetch(x, jo, 1, along=ji_out)
    s[e].prefetch(x, jo, 1, along=s[out].leaf_iter_vars[1])       # i.inner encloses it too
    with pytest.raises(lt.ScheduleError, match=r"split\(i.inner\): loop 'i.inner' is the loop "
                       r"stage 'e' prefetches 'x' along; split before prefetching"):
        s[out].split(s[out].leaf_iter_vars[1], factor=2)
    # a tensor computed at a loop holds one iteration's values: not along
    x = lt.placeholder((8, 64), name="x")
    p = lt.compute((8, 64), lambda i, j: x[i, j] + 1.0, name="p")
    e = lt.compute((8, 64), lambda i, j: p[i, j] * 3.0, name="e")
    out = lt.compute((8, 64), lambda i, j: e[i, j] * 2.0, name="out")
    s = lt.create_schedule(out)
    i, _ = s[out].op.axis
    s[e].compute_at(s[out], i)
    s[p].compute_at(s[out], i)
    with pytest.raises(lt.ScheduleError, match=r"'p' is computed at a loop \(compute_at out, "
                       r"i\), so its buffer holds one iteration's values"):
        s[e].prefetch(p, s[e].op.axis[1], 1, along=i)


def test_prefetch_along_from_a_stage_whose_attach_loop_was_split():
    s, x, e, out, io, jo = _rows()
    s[out].split(s[out].leaf_iter_vars[1], factor=1)        # i.inner, e's attach point
    with pytest.raises(lt.ScheduleError, match=r"along='i.outer': 'e' is computed at loop "
                       r"'i.inner' of 'out', which was split or fused after compute_at"):
        s[e].prefetch(x, jo, 1, along=io)


def test_prefetch_along_a_host_loop_that_no_longer_encloses_fails_at_lowering():
    s, x, e, out, io, jo = _rows()
    s[e].prefetch(x, jo, 1, along=io)
    s[e].compute_root()                     # moved after the prefetch was asked for
    with pytest.raises(lt.ScheduleError, match=r"along loop 'out.i.outer' no longer encloses "
                       r"'e'"):
        lt.lower(s, [x, out])


def _random_row_pipeline(seed: int):
    """A random row pipeline with a prefetch along a host loop: e = x * 3 + 1 per row (maybe
    with its row sum fused into its chunk loop), out = e * 2 + rowsum(e) or e * 2; the rows
    split and maybe parallel, e computed at either row loop, its columns in chunks (tails
    included), x prefetched some rows ahead along a random enclosing loop."""
    rng = np.random.default_rng(seed)
    N, M = int(rng.integers(1, 20)), int(rng.integers(1, 90))
    x = lt.placeholder((N, M), name="x")
    e = lt.compute((N, M), lambda i, j: x[i, j] * 3.0 + 1.0, name="e")
    with_sum = bool(rng.integers(2))
    if with_sum:
        k = lt.reduce_axis(M, name="k")
        rs = lt.compute((N,), lambda i: lt.sum(e[i, k], axis=k), name="rs")
        out = lt.compute((N, M), lambda i, j: e[i, j] * 2.0 + rs[i], name="out")
    else:
        out = lt.compute((N, M), lambda i, j: e[i, j] * 2.0, name="out")
    s = lt.create_schedule(out)
    io, ii = s[out].split(s[out].op.axis[0], factor=int(rng.integers(1, 4)))
    if rng.integers(2):
        s[out].parallel(io)
    at = [io, ii][int(rng.integers(2))]
    s[e].compute_at(s[out], at)
    chunk = int(rng.integers(1, 40))
    jo, ji = s[e].split(s[e].op.axis[1], factor=chunk)
    if rng.integers(2):
        s[e].vectorize(ji)
    if with_sum:
        s[rs].compute_at(s[out], at)
        if at is ii and rng.integers(2):   # the row sum's loop in e's chunk loop
            (kk,) = s[rs].op.reduce_axis
            ko, ki = s[rs].split(kk, factor=chunk)
            s[rs].compute_with(s[e], jo)
    along = [io, ii][:[io, ii].index(at) + 1][int(rng.integers([io, ii].index(at) + 1))]
    offset = int(rng.integers(1, 4))
    s[e].prefetch(x, jo, offset, along=along)
    a = rng.standard_normal((N, M)).astype(np.float32)
    ev = a * np.float32(3) + np.float32(1)
    want = ev * np.float32(2) + (ev.sum(axis=1, keepdims=True, dtype=np.float32)
                                 if with_sum else np.float32(0))
    return s, [x, out], a, want, f"seed {seed}: N={N} M={M} chunk={chunk} along={along.name} " \
        f"offset={offset} sum={with_sum}\n{s.steps}"


@pytest.mark.parametrize("seeds", [range(0, 20), pytest.param(range(20, 400),
                                                              marks=pytest.mark.slow)])
def test_random_row_pipelines_with_prefetch_along_are_exact(seeds):
    for seed in seeds:
        s, args, a, want, what = _random_row_pipeline(seed)
        f = lt.build(s, args, name=f"rows{seed}")
        got = np.empty_like(want)
        f(a, got)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=what)
        text = str(lt.lower(s, args))
        if want.shape[0] > 3 and "along=i.outer" in what:   # later rows exist: fetched
            assert "prefetch x" in text, what + text


# ---- bound="nonfaulting": the region as it is, no clamp --------------------------------------

def _gemm_nf(n, m, k, offset, kc=16, **kw):
    s, args = matmul._schedule(n, m, k, "float32", 4, 16, kc, 8, 32, **kw)
    P = s.stage("partial")
    ki = P.loop("ki")
    P.prefetch(s.tensor("B_packed"), ki, offset, bound="nonfaulting")
    P.prefetch(s.tensor("A_packed"), ki, offset, bound="nonfaulting")
    return s, args


@pytest.mark.parametrize("n,m,k", [(8, 32, 16), (13, 37, 29), (1, 5, 3), (33, 70, 47)])
@pytest.mark.parametrize("offset", [1, 3, 16, 1000])
def test_nonfaulting_prefetch_is_bit_for_bit_the_same(n, m, k, offset):
    plain = _run(*_gemm(n, m, k))[1]
    ins, got, f = _run(*_gemm_nf(n, m, k, offset))
    assert prefetches(f.source, "B_packed")
    np.testing.assert_array_equal(got, plain)
    np.testing.assert_allclose(got, ins[0] @ ins[1], rtol=1e-5, atol=1e-5)


def test_nonfaulting_prefetch_leaves_the_iteration_unclamped():
    s, args = matmul._schedule(32, 64, 64, "float32", 4, 16, 32, 8, 32)
    P = s.stage("partial")
    P.prefetch(s.tensor("B_packed"), P.loop("ki"), 16, bound="nonfaulting")
    text = str(lt.lower(s, args))
    assert "prefetch B_packed[j.inner.outer, (ki + 16), 0] x 16" in text, text
    assert "min((ki + 16)" not in text, text
    src = lt.build(s, args).source
    # the address is an integer: past the buffer is no pointer C forbids
    assert "lt_pf = (uintptr_t)B_packed + (uintptr_t)((int64_t)((((j_inner_outer * 512) + " \
        "(ki * 16)) + 256)) * 4);" in src, src


def test_nonfaulting_regions_are_the_clamped_ones_moved_on():
    """Walking every iteration of a case with tails (13 x 37 x 29, 4 x 16 tiles, kc 16): each
    nonfaulting prefetch at iteration ki asks for row ki + 5 of the packed block, past its 16
    rows in the last 5 iterations; the clamped twin asks for min(ki + 5, 15)."""
    def regions(bound):
        s, args = matmul._schedule(13, 37, 29, "float32", 4, 16, 16, 8, 32)
        P = s.stage("partial")
        P.prefetch(s.tensor("B_packed"), P.loop("ki"), 5, bound=bound)
        seen: list = []
        _walk(lt.lower(s, args).body, {}, seen, inside=False)
        return seen
    clamped, free = regions("clamp"), regions("nonfaulting")
    assert len(free) > 100 and len(clamped) > 100
    assert all(n == "B_packed" and c == 16 and i[1] == ki + 5 for n, i, c, ki in free)
    assert all(c == 16 and i[1] == min(ki + 5, 15) for _, i, c, ki in clamped)
    assert max(i[1] for _, i, _, _ in free) == 20          # past the buffer's 16 rows of k


def test_nonfaulting_along_unclamped_and_exact():
    s, x, e, out, io, jo = _rows(9, 48, 32)
    s[e].prefetch(x, jo, 3, along=io, bound="nonfaulting")
    text = str(lt.lower(s, [x, out]))
    assert "prefetch x[(i.outer + 3), (j.outer * 32)]" in text and "min((i.outer" not in text
    f = lt.build(s, [x, out])
    a = np.random.default_rng(1).random((9, 48), dtype=np.float32)
    got = np.empty_like(a)
    f(a, got)
    np.testing.assert_array_equal(got, (a * np.float32(3) + np.float32(1)) * np.float32(2))


def test_nonfaulting_step_prints_serialises_and_replays():
    from looptune.schedule.steps import Step
    s, args = _gemm_nf(13, 37, 29, 16)
    step = s.steps[-1]
    assert str(step) == ("s[partial].prefetch(A_packed, s[partial].loop('ki'), 16, "
                         "bound='nonfaulting')")
    assert step.to_json() == ["prefetch", "partial", ["A_packed", "ki", 16, None,
                                                      "nonfaulting"]]
    assert Step.from_json(step.to_json()) == step
    again = lt.replay(lt.create_schedule(args[-1]), steps_mod.loads(steps_mod.dumps(s.steps)))
    assert str(lt.lower(again, args)) == str(lt.lower(s, args))
    fresh, _ = matmul._schedule(13, 37, 29, "float32", 4, 16, 16, 8, 32)
    ns = steps_mod.namespace(fresh)
    for st in s.steps[-2:]:
        exec(str(st), ns)
    assert fresh.state == s.state
    # the bound is part of the program: the clamped twin is another state
    assert _gemm(13, 37, 29, prefetch=[("B_packed", 16), ("A_packed", 16)])[0].state != s.state
    s2, x, e, _, io, jo = _rows()
    s2[e].prefetch(x, jo, 2, along=io, bound="nonfaulting")
    rec = s2.steps[-1].to_json()
    assert rec == ["prefetch", "e", ["x", "j.outer", 2, "i.outer", "nonfaulting"]]
    assert Step.from_json(rec) == s2.steps[-1]


@pytest.mark.parametrize("bad", ["clip", None, 3, "NonFaulting"])
def test_a_bound_other_than_clamp_or_nonfaulting_is_refused(bad):
    s, _ = matmul._schedule(13, 37, 29, "float32", 4, 16, 16, 8, 32)
    P = s.stage("partial")
    with pytest.raises(lt.ScheduleError, match=r"stage 'partial': prefetch\(B_packed, ki\): "
                       r"bound must be one of 'clamp', 'nonfaulting' \(clamp the region into "
                       rf"the buffer, or leave it as it is where a prefetch cannot fault\); "
                       rf"got {re.escape(repr(bad))}"):
        P.prefetch(s.tensor("B_packed"), P.loop("ki"), 4, bound=bad)
    assert not any(st.__class__.__name__ == "Prefetch" for st in s.steps)


def test_a_long_row_goes_through_the_helper_loop_and_stays_exact():
    """A row of more than 8 lines (256 floats) is fetched by lt_prefetch's loop, line by
    line; the result is the same."""
    s, x, e, out, io, jo = _rows(7, 512, 256)
    s[e].prefetch(x, jo, 1, along=io)
    f = lt.build(s, [x, out])
    assert "lt_prefetch((uintptr_t)x, " in f.source and "lt_pf" not in f.source
    assert "__builtin_prefetch((const void *)a, 0, 3);" in f.source
    a = np.random.default_rng(2).random((7, 512), dtype=np.float32)
    got = np.empty_like(a)
    f(a, got)
    np.testing.assert_array_equal(got, (a * np.float32(3) + np.float32(1)) * np.float32(2))
