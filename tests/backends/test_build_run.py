"""build and call: target parsing, compile errors, the on-disk cache, every run-time argument
check (TypeError/ValueError naming the argument), timing, and module lifetime."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from util import ALIVE, rand, run_check

import looptune as lt
from looptune import BuildError


def _build(s, args, **kw):
    f = lt.build(s, args, **kw)
    ALIVE.append(f)   # see util.ALIVE
    return f


@pytest.fixture(scope="module")
def vadd():
    n = lt.var("n")
    X = lt.placeholder((n,), "float32", name="X")
    Y = lt.placeholder((n,), "float32", name="Y")
    Z = lt.compute((n,), lambda i: X[i] + Y[i], name="Z")
    s = lt.create_schedule(Z)
    return _build(s, [X, Y, Z]), (X, Y, Z)


@pytest.fixture(scope="module")
def mm():
    A = lt.placeholder((5, 7), "float32", name="A")
    B = lt.placeholder((7, 3), "float32", name="B")
    k = lt.reduce_axis(7, name="k")
    C = lt.compute((5, 3), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = lt.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=2)
    s[C].parallel(io)
    return _build(s, [A, B, C]), s, (A, B, C)


def _mm_arrays():
    rng = np.random.default_rng(0)
    return rand(rng, (5, 7)), rand(rng, (7, 3)), np.zeros((5, 3), np.float32)


# ---- targets and compilation ---------------------------------------------------------------

@pytest.mark.parametrize("target, msg", [
    ("cuda", r"unknown target 'cuda' in 'cuda'; use 'c' or 'opencl'"),
    ("llvm -mcpu=x", r"unknown target 'llvm'"),
    ("c -foo=1", r"target 'c -foo=1': unknown option '-foo' for 'c'; known: .*-threads"),
    ("c -device=gpu", r"unknown option '-device' for 'c'"),
    ("opencl -threads=2", r"unknown option '-threads' for 'opencl'"),
    ("c threads=2", r"option 'threads=2' must look like -name=value"),
    ("c -threads=0", r"-threads needs a positive integer"),
    ("c -threads=two", r"-threads needs a positive integer"),
    ("c -threads=", r"target\('c -threads='\): option -threads needs a positive integer; got "
     r"-threads without a value; write e.g. -threads=2"),
    ("c -cc=", r"target\('c -cc='\): option -cc needs a compiler; got -cc without a value; "
     r"write e.g. -cc=clang"),
    ("c -cc", r"target\('c -cc'\): option -cc needs a compiler; got -cc without a value"),
    ("c -O=9", r"option -O needs an optimisation level; got -O=9; write e.g. -O=2"),
    ("c -march=x86-64;ls", r"option -march needs a CPU; got -march=x86-64;ls"),
    ("c -fast-math=yes", r"option -fast-math takes no value; got -fast-math=yes; write "
     r"-fast-math alone"),
    ("c -cc=gcc\0", r"target\('c -cc=gcc\\x00'\): a target holds no control characters; "
     r"got \['\\x00'\]; write it as plain text"),
    ("c -march=native\0 -O=2", r"a target holds no control characters"),
    ("opencl -device=", r"option -device needs a device type; got -device without a value"),
])
def test_bad_target(mm, target, msg):
    f, s, args = mm
    with pytest.raises(BuildError, match=msg):
        lt.build(s, list(args), target=target)


def test_target_parse_round_trip():
    t = lt.Target.parse("c -threads=2 -fast-math")
    assert t.kind == "c" and t.options == {"threads": "2", "fast-math": True}
    assert lt.Target.parse(str(t)) == t


@pytest.mark.parametrize("march, float32_lanes", [
    ("x86-64", 4),             # SSE2 only
    ("haswell", 8),            # AVX2
    ("skylake-avx512", 16),    # AVX-512
])
def test_vector_lanes_follow_the_compilers_march(march, float32_lanes):
    if subprocess.run(["gcc", f"-march={march}", "-E", "-x", "c", "/dev/null"],
                      capture_output=True).returncode != 0:
        pytest.skip(f"this gcc does not target -march={march} (not an x86-64 compiler)")
    t = lt.Target.parse(f"c -march={march}")
    assert t.vector_lanes() == float32_lanes
    assert t.vector_lanes("float64") == float32_lanes // 2
    assert t.vector_lanes("int8") == float32_lanes * 4


def test_vector_lanes_of_this_machine_match_what_gcc_enables(monkeypatch):
    monkeypatch.delenv("LOOPTUNE_MARCH", raising=False)     # the native default
    macros = subprocess.run(["gcc", "-march=native", "-dM", "-E", "-x", "c", "/dev/null"],
                            capture_output=True, text=True).stdout
    want = 16 if "__AVX512F__" in macros else 8 if "__AVX__" in macros else 4
    assert lt.Target.parse("c").vector_lanes() == want


@pytest.mark.parametrize("target, dtype, msg", [
    ("opencl", "float32", r"vector_lanes\(\) answers for C targets, not 'opencl'"),
    ("c", "floaty", r"unknown dtype 'floaty'"),
    ("c -march=no-such-arch", "float32", r"'gcc -march=no-such-arch' failed.*-march"),
    ("c -cc=no-such-cc", "float32", r"C compiler 'no-such-cc' was not found"),
])
def test_vector_lanes_errors_name_what_was_wrong(target, dtype, msg):
    with pytest.raises(BuildError, match=msg):
        lt.Target.parse(target).vector_lanes(dtype)


def test_bad_function_name(mm):
    f, s, args = mm
    with pytest.raises(BuildError,
                       match=r"build\(name='2fast'\): the function name must be a C identifier"):
        lt.build(s, list(args), name="2fast")


def test_build_needs_a_schedule(mm):
    f, s, args = mm
    with pytest.raises(BuildError, match=r"expected a schedule .*got list"):
        lt.build([s], list(args))


def test_missing_compiler_is_a_build_error(mm):
    f, s, args = mm
    with pytest.raises(BuildError, match=r"C compiler 'no-such-cc' was not found"):
        lt.build(s, list(args), target="c -cc=no-such-cc")


def test_compiler_failure_carries_message_and_source_path(mm):
    f, s, args = mm
    with pytest.raises(BuildError, match=r"gcc failed on .*\.c") as info:
        lt.build(s, list(args), target="c -march=no-such-arch")
    assert info.value.source_path and info.value.source_path.endswith(".c")
    assert "no-such-arch" in info.value.output


def test_threads_option_and_source(mm):
    f, s, (A, B, C) = mm
    g = _build(s, [A, B, C], target="c -threads=2")
    assert "#pragma omp parallel for" in g.source and "num_threads(2)" in g.source
    a, b, c = _mm_arrays()
    g(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_time_returns_seconds(mm):
    f, s, args = mm
    a, b, c = _mm_arrays()
    t = f.time(a, b, c, number=3, repeat=4)
    assert len(t.results) == 4 and all(x > 0 for x in t.results)
    assert t.median > 0 and t.mean > 0
    t2 = f.time(a, b, c, number=1, repeat=2, min_repeat_ms=5)
    assert len(t2.results) == 2


def test_corrupt_cache_entry_is_rebuilt(monkeypatch, tmp_path):
    """A partial .so in the cache is detected by its checksum and rebuilt (never loaded).
    The entry is corrupted before any process loads it (overwriting a loaded library in place
    would break the running process whatever the cache does)."""
    from looptune.backends.compiler import compile_shared
    monkeypatch.setenv("LOOPTUNE_CACHE", str(tmp_path))
    src = "int cachetest(float *x) { x[0] = 42.0f; return 0; }\n"
    so = compile_shared(src, "gcc", ["-O2", "-fPIC"], name="cachetest")
    assert so.parent == tmp_path
    good = so.read_bytes()
    so.write_bytes(good[: len(good) // 2])                  # a partial write
    again = compile_shared(src, "gcc", ["-O2", "-fPIC"], name="cachetest")
    assert again == so and again.read_bytes() == good
    X = lt.placeholder((9,), name="X")
    Y = lt.compute((9,), lambda i: X[i] * 3.0 + 1.0, name="Y")
    f = _build(lt.create_schedule(Y), [X, Y], name="cachetest")
    assert f.lib_path.parent == tmp_path
    x = np.arange(9, dtype=np.float32)
    run_check(None, [X, Y], {"X": x}, {"Y": x * 3 + 1}, f=f)


# ---- run-time argument checks ----------------------------------------------------------------

def test_wrong_dtype(mm):
    f, s, args = mm
    a, b, c = _mm_arrays()
    with pytest.raises(TypeError, match=r"argument 'B' must have dtype float32; got float64"):
        f(a, b.astype(np.float64), c)


def test_wrong_dtype_of_output(mm):
    f, s, args = mm
    a, b, c = _mm_arrays()
    with pytest.raises(TypeError, match=r"argument 'C' must have dtype float32; got int32"):
        f(a, b, c.astype(np.int32))


def test_wrong_shape(mm):
    f, s, args = mm
    a, b, c = _mm_arrays()
    with pytest.raises(ValueError, match=r"argument 'A' must have shape \(5, 7\); got \(5, 8\)"):
        f(np.zeros((5, 8), np.float32), b, c)


def test_wrong_shape_of_output(mm):
    f, s, args = mm
    a, b, c = _mm_arrays()
    with pytest.raises(ValueError, match=r"argument 'C' must have shape \(5, 3\); got \(3, 5\)"):
        f(a, b, np.zeros((3, 5), np.float32))


def test_wrong_number_of_dimensions(mm):
    f, s, args = mm
    a, b, c = _mm_arrays()
    with pytest.raises(ValueError, match=r"argument 'A' must have 2 dimensions"):
        f(a.ravel(), b, c)


@pytest.mark.parametrize("n", [2, 4])
def test_wrong_number_of_arguments(mm, n):
    f, s, args = mm
    arrays = list(_mm_arrays()) + [np.zeros(1, np.float32)]
    with pytest.raises(TypeError, match=rf"takes 3 arrays \(A, B, C\); got {n}"):
        f(*arrays[:n])


def test_not_an_array(mm):
    f, s, args = mm
    a, b, c = _mm_arrays()
    with pytest.raises(TypeError, match=r"argument 'A' must be a numpy.ndarray; got list"):
        f(a.tolist(), b, c)


@pytest.mark.parametrize("layout", ["fortran", "strided", "transposed"])
def test_non_contiguous_array(mm, layout):
    f, s, args = mm
    a, b, c = _mm_arrays()
    if layout == "fortran":
        a = np.asfortranarray(a)
    elif layout == "strided":
        a = np.zeros((5, 14), np.float32)[:, ::2]
    else:
        a = np.zeros((7, 5), np.float32).T
    with pytest.raises(ValueError, match=r"argument 'A' must be C-contiguous"):
        f(a, b, c)


def test_non_contiguous_output(mm):
    f, s, args = mm
    a, b, c = _mm_arrays()
    with pytest.raises(ValueError, match=r"argument 'C' must be C-contiguous"):
        f(a, b, np.zeros((5, 6), np.float32)[:, ::2])


def test_read_only_output(mm):
    f, s, args = mm
    a, b, c = _mm_arrays()
    c.flags.writeable = False
    with pytest.raises(ValueError, match=r"output 'C' is read-only"):
        f(a, b, c)


def test_output_aliasing_an_input(vadd):
    f, _ = vadd
    x = np.ones(8, np.float32)
    y = np.ones(8, np.float32)
    with pytest.raises(ValueError, match=r"output 'Z' shares memory with argument 'X'"):
        f(x, y, x)


def test_output_overlapping_an_input_view(vadd):
    f, _ = vadd
    buf = np.ones(16, np.float32)
    with pytest.raises(ValueError, match=r"output 'Z' shares memory with argument 'Y'"):
        f(np.ones(8, np.float32), buf[:8], buf[4:12])


def test_same_input_twice_is_fine(vadd):
    f, (X, Y, Z) = vadd
    x = np.arange(6, dtype=np.float32)
    z = np.zeros(6, np.float32)
    f(x, x, z)
    np.testing.assert_array_equal(z, 2 * x)


def test_inconsistent_symbolic_sizes(vadd):
    f, _ = vadd
    with pytest.raises(ValueError, match=r"size 'n' is 8 from an earlier argument but argument "
                                         r"'Y' gives 7"):
        f(np.ones(8, np.float32), np.ones(7, np.float32), np.ones(8, np.float32))


def test_inconsistent_symbolic_size_of_output(vadd):
    f, _ = vadd
    with pytest.raises(ValueError, match=r"size 'n' is 8 .* argument 'Z' gives 9"):
        f(np.ones(8, np.float32), np.ones(8, np.float32), np.ones(9, np.float32))


def test_derived_symbolic_shape_is_checked():
    n = lt.var("n")
    X = lt.placeholder((n,), name="X")
    Y = lt.compute((n * 2,), lambda i: X[i // 2], name="Y")
    f = _build(lt.create_schedule(Y), [X, Y])
    with pytest.raises(ValueError, match=r"argument 'Y' must have shape .*got \(7,\)"):
        f(np.ones(4, np.float32), np.ones(7, np.float32))
    x = np.arange(4, dtype=np.float32)
    run_check(None, [X, Y], {"X": x}, {"Y": np.repeat(x, 2)}, f=f)


def test_failed_call_writes_nothing(mm):
    f, s, args = mm
    a, b, _ = _mm_arrays()
    c = np.full((5, 3), 7.0, np.float32)
    with pytest.raises(TypeError):
        f(a, b.astype(np.float64), c)
    assert (c == 7.0).all()


# ---- module lifetime ---------------------------------------------------------------------

_GC_SCRIPT = textwrap.dedent("""
    import gc
    import numpy as np
    import looptune as lt
    for rep in range(12):
        A = lt.placeholder((1000,), name="A")
        B = lt.compute((1000,), lambda i: A[i] * 2.0, name="B")
        s = lt.create_schedule(B)
        io, ii = s[B].split(s[B].op.axis[0], factor=100)
        s[B].parallel(io)
        f = lt.build(s, [A, B])
        b = np.zeros(1000, "float32")
        f(np.ones(1000, "float32"), b)
        assert (b == 2).all()
        del f
        gc.collect()
    print("done")
""")


@pytest.mark.slow
def test_parallel_module_can_be_garbage_collected():
    """Dropping a module that ran an OpenMP loop must not crash the process later."""
    proc = subprocess.run([sys.executable, "-c", _GC_SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "done" in proc.stdout, \
        f"the process died with code {proc.returncode}:\n{proc.stderr[-2000:]}"
