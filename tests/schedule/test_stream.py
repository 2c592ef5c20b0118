"""``s[T].stream(loop)``: streaming (non-temporal) stores of a stage's innermost loop.

Exactness against numpy at odd sizes (chunk tails, split tails, destinations not aligned to a
cache line or even to 16 bytes), float64, a parallel outer loop, attached stages on either
side, symbolic sizes, every -march path of the helper (AVX-512/AVX/SSE2); the generated C
(chunks, fences); the errors of stream() and of lowering; replay; the OpenCL build."""
from __future__ import annotations

import platform
import subprocess
import sys

import numpy as np
import pytest
from sanitizer_runner import sanitizer_env
from util import ALIVE, run_check

import looptune as lt
from looptune.backends.c_codegen import CCodegen
from looptune.lang.expr import BinKind, BinOp, Const, Var
from looptune.schedule import steps as steps_mod
from looptune.schedule.stmt import Buffer, For, ForKind, IfThenElse, Store

N, M = 37, 1037      # rows of 1037: several 256-element chunks and a ragged last one


def _scale(dtype="float32", n=N, m=M):
    A = lt.placeholder((n, m), dtype, name="A")
    B = lt.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return A, B


def _check(s, A, B, seed=0, f=None):
    a = np.random.default_rng(seed).uniform(-1, 1, A.shape).astype(A.dtype)
    return run_check(s, [A, B], {"A": a}, {"B": a * 2 + 1}, rtol=0, atol=0, f=f)


def _unaligned(shape, dtype, offset):
    """A C-contiguous array ``offset`` elements into a fresh buffer (numpy aligns to 16 bytes
    at most: offsets 1..15 give every misalignment relative to a cache line)."""
    n = int(np.prod(shape))
    return np.zeros(n + offset, dtype)[offset:].reshape(shape)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stream_whole_rows_exact(dtype):
    A, B = _scale(dtype)
    s = lt.create_schedule(B)
    s[B].stream(s[B].loop("j"))
    _check(s, A, B)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stream_any_destination_alignment(dtype):
    A, B = _scale(dtype, 5, 301)
    s = lt.create_schedule(B)
    s[B].stream(s[B].loop("j"))
    f = lt.build(s, [A, B])
    ALIVE.append(f)
    a = np.random.default_rng(1).uniform(-1, 1, A.shape).astype(dtype)
    for off in (0, 1, 3, 5, 8, 15):
        src, dst = _unaligned(A.shape, dtype, (off * 7) % 16), _unaligned(B.shape, dtype, off)
        src[...] = a
        f(src, dst)
        np.testing.assert_array_equal(dst, a * 2 + 1, err_msg=f"destination offset {off}")


@pytest.mark.parametrize("factor", [16, 300, 1037, 4000])
def test_stream_split_inner_with_tail_exact(factor):
    A, B = _scale()
    s = lt.create_schedule(B)
    _, ji = s[B].split(s[B].loop("j"), factor=factor)
    s[B].stream(ji)
    _check(s, A, B)


def test_stream_parallel_outer_fences_each_iteration():
    A, B = _scale()
    s = lt.create_schedule(B)
    io, _ = s[B].split(s[B].loop("i"), factor=4)
    s[B].parallel(io)
    s[B].stream(s[B].loop("j"))
    f = _check(s, A, B)
    src = f.source
    body = src[src.index("#pragma omp parallel for"):]
    assert "lt_stream_f32(&B[" in body and "#pragma omp simd" in body
    # a fence ends each parallel iteration (before OpenMP's barrier) and the function
    assert body.count("lt_sfence();") == 2
    assert body.rstrip().endswith("lt_sfence();\n  return lt_status;\n}".rstrip())


def test_stream_consumer_of_an_attached_producer():
    A = lt.placeholder((N, M), name="A")
    P = lt.compute((N, M), lambda i, j: A[i, j] * 3.0, name="P")
    B = lt.compute((N, M - 2), lambda i, j: P[i, j] + P[i, j + 2], name="B")
    s = lt.create_schedule(B)
    s[P].compute_at(s[B], s[B].loop("i"))
    s[P].vectorize(s[P].loop("j"))
    s[B].parallel(s[B].loop("i"))
    s[B].stream(s[B].loop("j"))
    a = np.random.default_rng(2).uniform(-1, 1, (N, M)).astype("float32")
    run_check(s, [A, B], {"A": a}, {"B": a[:, :-2] * 3 + a[:, 2:] * 3})


def test_stream_of_an_attached_stage():
    A = lt.placeholder((N, M), name="A")
    P = lt.compute((N, M), lambda i, j: A[i, j] - 0.5, name="P")
    B = lt.compute((N, M), lambda i, j: P[i, j] * P[i, j], name="B")
    s = lt.create_schedule(B)
    s[P].compute_at(s[B], s[B].loop("i"))
    s[P].stream(s[P].loop("j"))             # a local buffer: exact, if pointless
    a = np.random.default_rng(3).uniform(-1, 1, (N, M)).astype("float32")
    run_check(s, [A, B], {"A": a}, {"B": (a - 0.5) ** 2})


def test_stream_symbolic_sizes():
    n, m = lt.var("n"), lt.var("m")
    A = lt.placeholder((n, m), name="A")
    B = lt.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = lt.create_schedule(B)
    s[B].stream(s[B].loop("j"))
    f = lt.build(s, [A, B])
    ALIVE.append(f)
    for shape in [(3, 1), (2, 17), (5, 777)]:
        a = np.random.default_rng(4).uniform(-1, 1, shape).astype("float32")
        run_check(s, [A, B], {"A": a}, {"B": a * 2 + 1}, f=f)


@pytest.mark.parametrize("march", ["x86-64", "haswell", "skylake-avx512"])
def test_stream_every_simd_path_exact(march):
    """-march=x86-64: the SSE2 path; haswell: AVX; skylake-avx512: AVX-512F (built only: run
    where the CPU has it)."""
    if platform.machine() != "x86_64":
        pytest.skip("the -march names are x86-64's")
    A, B = _scale("float32", 3, 999)
    s = lt.create_schedule(B)
    s[B].stream(s[B].loop("j"))
    f = lt.build(s, [A, B], target=f"c -march={march}")
    ALIVE.append(f)
    with open("/proc/cpuinfo") as fh:
        flags = fh.read()
    if march == "skylake-avx512" and "avx512f" not in flags or \
            march == "haswell" and "avx2" not in flags:
        return
    _check(s, A, B, f=f)


def test_stream_opencl_is_a_plain_loop_and_exact(opencl):
    A, B = _scale("float32", 7, 301)
    s = lt.create_schedule(B)
    s[B].bind(s[B].loop("i"), "blockIdx.x")
    s[B].stream(s[B].loop("j"))
    f = lt.build(s, [A, B], target=opencl)
    a = np.random.default_rng(5).uniform(-1, 1, A.shape).astype("float32")
    b = np.zeros_like(a)
    f(a, b)
    np.testing.assert_array_equal(b, a * 2 + 1)


def test_stream_guarded_body_falls_back_to_simd():
    buf = Buffer("B", (40,), "float32")
    v = Var("x")
    body = IfThenElse(BinOp(BinKind.LT, v, Const(33, "int32")),
                      Store(buf, (v,), Const(1.0, "float32")))
    gen = CCodegen()
    gen.visit(For(v, Const(0, "int32"), Const(40, "int32"), ForKind.STREAMED, body))
    text = "\n".join(gen.lines)
    assert "#pragma omp simd" in text and "lt_stream" not in text and gen.streams == 0


def test_stream_steps_replay_and_print():
    A, B = _scale()
    s = lt.create_schedule(B)
    _, ji = s[B].split(s[B].loop("j"), factor=64)
    s[B].stream(ji)
    assert str(s.steps[-1]) == "s[B].stream(s[B].loop('j.inner'))"
    assert steps_mod.dumps(s.steps[-1:]) == '[["stream", "B", ["j.inner"]]]'
    again = lt.replay(lt.create_schedule(B), steps_mod.loads(steps_mod.dumps(s.steps)))
    assert str(lt.lower(again, [A, B])) == str(lt.lower(s, [A, B]))
    assert "streamed" in str(lt.lower(s, [A, B]))


# ---- errors --------------------------------------------------------------------------------

def test_stream_errors_of_the_primitive():
    _, B = _scale()
    s = lt.create_schedule(B)
    with pytest.raises(lt.ScheduleError, match=r"stage 'B': stream\(i\): loop 'i' is not the "
                       r"innermost loop of 'B' \(order \[i, j\]\); stream the innermost"):
        s[B].stream(s[B].loop("i"))
    s[B].vectorize(s[B].loop("j"))
    with pytest.raises(lt.ScheduleError, match=r"stage 'B': stream\(j\): loop 'j' is already "
                       r"marked vectorize; a loop takes one of .*stream"):
        s[B].stream(s[B].loop("j"))

    X = lt.placeholder((N, M), "int32", name="X")
    Y = lt.compute((N, M), lambda i, j: X[i, j] + 1, name="Y")
    s = lt.create_schedule(Y)
    with pytest.raises(lt.ScheduleError, match=r"stage 'Y': stream\(j\): 'Y' is int32; "
                       r"streaming stores work for float32 and float64 outputs only"):
        s[Y].stream(s[Y].loop("j"))


def test_stream_errors_reduction_and_inline():
    A = lt.placeholder((N, M), name="A")
    k = lt.reduce_axis(M, name="k")
    R = lt.compute((N,), lambda i: lt.sum(A[i, k], axis=k), name="R")
    P = lt.compute((N, M), lambda i, j: A[i, j] + 1.0, name="P")
    C = lt.compute((N, M), lambda i, j: P[i, j] * R[i], name="C")
    s = lt.create_schedule(C)
    with pytest.raises(lt.ScheduleError, match=r"stage 'R': stream\(k\): loop 'k' is a "
                       r"reduction loop of 'R'; .*stream a spatial loop"):
        s[R].stream(s[R].loop("k"))
    s[R].reorder(s[R].loop("k"), s[R].loop("i"))
    with pytest.raises(lt.ScheduleError, match=r"stage 'R': stream\(i\): 'R' is a reduction: "
                       r"its updates read back"):
        s[R].stream(s[R].loop("i"))
    s[P].stream(s[P].loop("j"))
    with pytest.raises(lt.ScheduleError, match=r"stage 'P': compute_inline\(\): loop 'j' of "
                       r"'P' is streamed"):
        s[P].compute_inline()
    s2 = lt.create_schedule(C)
    s2[P].compute_inline()
    with pytest.raises(lt.ScheduleError, match=r"stage 'P': stream\(j\): stage 'P' is "
                       r"inlined: it has no loops"):
        s2[P].stream(s2[P].loop("j"))


def test_stream_errors_at_lowering():
    A, B = _scale()
    s = lt.create_schedule(B)
    s[B].stream(s[B].loop("j"))
    s[B].reorder(s[B].loop("j"), s[B].loop("i"))
    with pytest.raises(lt.ScheduleError, match=r"stage 'B': stream\(j\): loop 'j' is no "
                       r"longer the innermost loop \(order \[j, i\]\)"):
        lt.lower(s, [A, B])

    P = lt.compute((N, M), lambda i, j: A[i, j] * 3.0, name="P")
    C = lt.compute((N, M), lambda i, j: P[i, j] + 1.0, name="C")
    s = lt.create_schedule(C)
    s[C].stream(s[C].loop("j"))
    s[P].compute_at(s[C], s[C].loop("j"))
    with pytest.raises(lt.ScheduleError, match=r"stage 'C': stream\(j\): stage 'P' is computed "
                       r"inside the streamed loop 'j'; compute_at an outer loop"):
        lt.lower(s, [A, C])

    T = lt.compute((M, N), lambda j, i: A[i, j], name="T")      # T[j, i]: i is innermost
    s = lt.create_schedule(T)
    s[T].reorder(s[T].loop("i"), s[T].loop("j"))
    s[T].stream(s[T].loop("j"))
    with pytest.raises(lt.ScheduleError, match=r"stage 'T': stream\(j\): the store T\[j, i\] "
                       r"is not contiguous in loop 'j'.*split the last axis"):
        lt.lower(s, [A, T])

    s = lt.create_schedule(B)
    f = s[B].fuse(s[B].loop("i"), s[B].loop("j"))
    s[B].stream(f)
    with pytest.raises(lt.ScheduleError, match=r"stage 'B': stream\(i.j.fused\): the store "
                       r"B\[.*\] is not contiguous"):
        lt.lower(s, [A, B])


def test_stream_nested_in_a_vectorized_loop_is_refused():
    A = lt.placeholder((N, M), name="A")
    B = lt.compute((N, M), lambda i, j: A[i, j] + 1.0, name="B")
    C = lt.compute((N, M), lambda i, j: B[i, j] * 2.0, name="C")
    s = lt.create_schedule(C)
    s[B].compute_at(s[C], s[C].loop("j"))
    s[C].vectorize(s[C].loop("j"))
    s[B].stream(s[B].loop("j"))
    with pytest.raises(lt.ScheduleError, match=r"streamed loop 'j' is nested inside "
                       r"vectorized loop 'j'; vectorize \(or stream\) only one"):
        lt.lower(s, [A, C])


ASAN_CASE = """
import numpy as np
import looptune as lt
A = lt.placeholder((7, 523), "float32", name="A")
B = lt.compute((7, 523), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
s = lt.create_schedule(B)
s[B].parallel(s[B].loop("i"))
jo, ji = s[B].split(s[B].loop("j"), factor=300)
s[B].stream(ji)
f = lt.build(s, [A, B], target="c -sanitize=address,undefined")
a = np.random.default_rng(0).uniform(-1, 1, (7, 523)).astype("float32")
for off in (0, 1, 3):
    b = np.zeros(7 * 523 + off, "float32")[off:].reshape(7, 523)  # ends at the redzone
    f(a, b)
    assert np.array_equal(b, a * 2 + 1), off
print("ok")
"""


def test_stream_under_asan_and_ubsan():
    proc = subprocess.run([sys.executable, "-c", ASAN_CASE], capture_output=True, text=True,
                          timeout=300, env=sanitizer_env(), check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
