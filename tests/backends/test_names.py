"""User names never become code (issue 15): names with quotes, ``*/``, ``%``, newlines,
backslashes, ``#``, unicode, keywords and macros go through build, the OpenCL build and export;
the generated sources compile, the header declares only our functions and the numbers match
numpy. Every generator puts user text into code only through ``backends/sanitize.py``."""
from __future__ import annotations

import re
import subprocess
import types

import looptune as lt
import numpy as np
import pytest
import util
from looptune.backends import sanitize

HOSTILE = ['"', "'", "*/", "/*", "//", "%n", "%s", "%%", "\n", "\r", "\t", "\\", "\\\n",
           "#define X 1", "#include <x>", "??/", "??=", "é", "λ", "\u202e", "\u2028", "\0",
           " ", ".", "-", "0", "1e", "{", "}", ";", "$"]
WORDS = ["NULL", "NAN", "EOF", "size_t", "M_PI", "FLT_MAX", "int", "kernel", "__kernel",
         "global", "local", "lt_alloc", "lt_floordiv", "errno", "stdin", "main", "float4",
         "restrict", "class", "new", "linux", "unix", "INFINITY", "free", "expf", "exp",
         "LONG_MIN", "INT64_MIN", "get_global_id", "CLK_LOCAL_MEM_FENCE", "cl_khr_fp64",
         "M_PI_F", "MAXFLOAT", "int64_t", "true", "bool", "half", "uchar", "I", "i", "n", "k",
         "err", "mem", "lt_err", "once", "done", "arg3", "global", "system", "_Bool", "__LINE__",
         "A", "v_NULL", "NULL_1", "memcpy", "y0", "EDOM", "RAND_MAX", "PTHREAD_ONCE_INIT",
         "vec_step", "FLT_EPSILON", "CHAR_BIT", "float16", "image2d_t", "sampler_t", "event_t",
         "read_only", "constant", "private", "__global", "get_local_id", "barrier",
         "CLK_GLOBAL_MEM_FENCE", "memory_order", "atomic_int", "uchar4", "HUGE_VALF", "lt_status",
         "lt_i0", "lt_chk", "template", "this", "operator"]


def random_name(rng: np.random.Generator) -> str:
    pool = HOSTILE + WORDS + list("abcxyzABC_")
    return "".join(pool[k] for k in rng.integers(0, len(pool), int(rng.integers(1, 5))))


def hostile_names(seed: int, count: int) -> list[str]:
    """``count`` distinct random names (distinct as Python strings; many sanitize alike)."""
    rng = np.random.default_rng(seed)
    names: list[str] = []
    while len(names) < count:
        name = random_name(rng)
        if name not in names:
            names.append(name)
    return names


# ---- the regression cases of the issue -------------------------------------------------------

def _cl_module(s, args, name: str):
    """What export needs of an OpenCL module, without a device: the lowered function and the
    generated program."""
    from looptune.backends.opencl_codegen import generate_opencl
    func = lt.lower(s, args, name=name)
    prog = generate_opencl(func)
    return types.SimpleNamespace(lowered=func, source=prog.source, kernels=prog.kernels,
                                 temporaries=prog.temporaries)


def _host_translation_unit(mod, tmp_path) -> str:
    from looptune.backends.c_codegen import translation_unit
    from looptune.backends.opencl_host import host_source, runtime_source
    text = translation_unit([runtime_source("libx", lt.Target.parse("opencl")), host_source(mod)])
    path = tmp_path / "host.c"
    path.write_text(text)
    subprocess.run(["gcc", "-std=gnu11", "-fsyntax-only", "-Wformat=2", "-Werror=format",
                    "-Werror=format-security", str(path)], check=True, capture_output=True,
                   text=True)
    return text


def test_opencl_host_code_cannot_be_escaped_by_an_output_name(tmp_path):
    evil = 'C"); system("touch PWNED"); ("%n%s'
    X = lt.placeholder((13,), name="X")
    Y = lt.compute((13,), lambda i: X[i] + 1.0, name=evil)
    s = lt.create_schedule(Y)
    xo, xi = s[Y].split(Y.op.axis[0], factor=4)
    s[Y].bind(xo, "blockIdx.x")
    s[Y].bind(xi, "threadIdx.x")
    text = _host_translation_unit(_cl_module(s, [X, Y], "addone"), tmp_path)
    assert 'system("touch' not in text          # the name is escaped, not pasted
    # ... and passed as a %s argument, never in a format
    assert f'"%s: reading %s back failed (%d)", "addone", {sanitize.c_string(evil)}' in text


def _header_lines(header) -> list[str]:
    """The header with its comments removed by gcc's own tokenizer (nothing expanded)."""
    out = subprocess.run(["gcc", "-x", "c", "-fpreprocessed", "-dD", "-E", "-P", str(header)],
                         capture_output=True, text=True, check=True).stdout
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def assert_header_declares_only(paths, declarations: list[str], tmp_path) -> None:
    """The header holds our declarations and its guard, nothing else: checked on the text
    without comments, on the macros it defines, and by compiling it as C11 with trigraphs
    and as C++."""
    header = paths["h"]
    guard = sanitize.c_identifier(header.name[:-2]).upper() + "_H"
    frame = {f"#ifndef {guard}", f"#define {guard}", "#include <stdint.h>",
             "#include <stdbool.h>", "#ifdef __cplusplus", 'extern "C" {', "#endif", "}"}
    lines = _header_lines(header)
    extra = [ln for ln in lines if ln not in frame and ln not in declarations]
    assert not extra, f"the header declares more than our functions: {extra}"
    assert [ln for ln in lines if ln in declarations] == declarations
    base = tmp_path / "base.c"
    base.write_text("#include <stdint.h>\n#include <stdbool.h>\n")
    inc = tmp_path / "inc.c"
    inc.write_text(base.read_text() + f'#include "{header.name}"\n')

    def macros(src):
        out = subprocess.run(["gcc", "-dM", "-E", "-I", str(header.parent), str(src)],
                             capture_output=True, text=True, check=True).stdout
        return {ln.split()[1] for ln in out.splitlines()}
    assert macros(inc) - macros(base) == {guard}
    for cmd in (["gcc", "-std=c11", "-trigraphs", "-x", "c"],
                ["g++", "-std=c++11", "-trigraphs", "-x", "c++"]):
        subprocess.run([*cmd, "-fsyntax-only", "-Wall", "-Werror", "-I", str(header.parent),
                        str(inc)], check=True, capture_output=True, text=True)


def test_exported_header_comments_cannot_declare_things(tmp_path):
    n = lt.var("n */ int injected_var; /*")
    X = lt.placeholder((n,), name="X */ #define INJECTED 1 /*")
    Y = lt.compute((n,), lambda i: X[i] * 3.0, name="Y\n#define INJECTED2 2\n")
    f = lt.build(lt.create_schedule(Y), [X, Y], name="triple")
    paths = lt.export_library(f, tmp_path / "libtri")
    decl = f.declaration.replace("*restrict ", "*")
    assert_header_declares_only(paths, [decl], tmp_path)
    x = np.arange(9, dtype=np.float32)
    y = np.zeros(9, np.float32)
    f(x, y)
    np.testing.assert_array_equal(y, 3 * x)


def _rowsum_rfactor(axis_name: str):
    """Row sums whose reduce axis (named ``axis_name``) is rfactored into threadIdx.x."""
    X = lt.placeholder((13, 64), name="X")
    k = lt.reduce_axis(64, name=axis_name)
    S = lt.compute((13,), lambda i: lt.sum(X[i, k], axis=k), name="S")
    s = lt.create_schedule(S)
    _, ki = s[S].split(S.op.reduce_axis[0], factor=16)
    SF = s.rfactor(S, ki)
    f0, i0 = s[SF].op.axis
    s[SF].reorder(i0, f0)
    s[SF].bind(i0, "blockIdx.x")
    s[SF].bind(f0, "threadIdx.x")
    s[S].bind(s[S].op.axis[0], "blockIdx.x")
    return s, [X, S]


def test_opencl_loop_comment_cannot_end_the_kernel(tmp_path):
    from looptune.backends.opencl_codegen import generate_opencl
    s, args = _rowsum_rfactor("k */ return; /*")
    src = tmp_path / "k.cl"
    src.write_text(generate_opencl(lt.lower(s, args, name="rowsums")).source)
    code = "\n".join(_header_lines(src))
    kernels = code[code.index("__kernel"):]
    assert re.search(r"\breturn\b", kernels) is None, kernels


@pytest.mark.opencl
def test_opencl_loop_comment_keeps_the_numbers(opencl):
    s, args = _rowsum_rfactor("k */ return; /*")
    x = np.random.default_rng(3).uniform(-1, 1, (13, 64)).astype(np.float32)
    util.run_check(s, args, {"X": x}, {"S": x.astype(np.float64).sum(axis=1)},
                   f=lt.build(s, args, target=opencl, name="rowsums"))


# ---- exported function names -----------------------------------------------------------------

@pytest.mark.parametrize("name, why", [
    ("memcpy", "collides with a symbol or macro of the C library"),
    ("free", "collides with a symbol or macro of the C library"),
    ("sin", "collides with a symbol or macro of the C library"),
    ("expf", "collides with a symbol or macro of the C library"),
    ("index", "collides with a symbol or macro of the C library"),
    ("NULL", "collides with a symbol or macro of the C library"),
    ("M_PI", "collides with a symbol or macro of the C library"),
    ("int", "is a C, C\\+\\+ or OpenCL C keyword or type"),
    ("class", "is a C, C\\+\\+ or OpenCL C keyword or type"),
    ("lt_alloc", "starts with a prefix reserved"),
    ("__init", "starts with a prefix reserved"),
    ("fa\u00e7ade", "must be a C identifier"),
])
def test_function_names_that_collide_are_refused(name, why):
    X = lt.placeholder((4,), name="X")
    Y = lt.compute((4,), lambda i: X[i], name="Y")
    with pytest.raises(lt.BuildError, match=rf"build\(name='{name}'\): the function name {why}"
                       r".*; got '.*'; p"):
        lt.build(lt.create_schedule(Y), [X, Y], name=name)


def test_exported_function_named_main_is_refused(tmp_path):
    X = lt.placeholder((4,), name="X")
    Y = lt.compute((4,), lambda i: X[i], name="Y")
    f = lt.build(lt.create_schedule(Y), [X, Y])          # "main": fine inside Python
    with pytest.raises(lt.BuildError, match=r"export_library\(name='main'\): the function "
                       "name is the program's entry point; got 'main'; pick another name"):
        lt.export_library(f, tmp_path / "libm1")


def test_export_refuses_a_library_file_name_that_needs_quoting(tmp_path):
    X = lt.placeholder((4,), name="X")
    Y = lt.compute((4,), lambda i: X[i], name="Y")
    f = lt.build(lt.create_schedule(Y), [X, Y], name="copy4")
    with pytest.raises(lt.BuildError, match=r"the library's file name must not .* got \['\"'\]"):
        lt.export_library(f, tmp_path / 'lib"x')


# ---- the property test: random names through build, the OpenCL build and export --------------

def _named_workload(names: list[str]):
    """y[i] = sum_k (2 A[i, k] + 1) x[k] over a symbolic n, with an intermediate T; every name
    (size, tensors, reduce axis) from ``names``."""
    n = lt.var(names[0])
    A = lt.placeholder((n, 7), name=names[1])
    x = lt.placeholder((7,), name=names[2])
    k = lt.reduce_axis(7, name=names[3])
    T = lt.compute((n, 7), lambda i, j: A[i, j] * 2.0 + 1.0, name=names[4])
    y = lt.compute((n,), lambda i: lt.sum(T[i, k] * x[k], axis=k), name=names[5])
    return [A, x, y], T


def _c_schedule(args, T):
    y = args[-1]
    s = lt.create_schedule(y)
    io, ii = s[y].split(y.op.axis[0], factor=4)
    s[y].parallel(io)
    s[T].compute_at(s[y], io)                 # a heap intermediate of symbolic size per block
    return s


def _cl_schedule(args, T):
    y = args[-1]
    s = lt.create_schedule(y)
    s[T].bind(T.op.axis[0], "blockIdx.x")
    _, ki = s[y].split(y.op.reduce_axis[0], factor=4)
    yf = s.rfactor(y, ki)                      # a bound loop named after the reduce axis
    f0, i0 = s[yf].op.axis
    s[yf].reorder(i0, f0)
    s[yf].bind(i0, "blockIdx.x")
    s[yf].bind(f0, "threadIdx.x")
    s[y].bind(s[y].op.axis[0], "blockIdx.x")
    return s


MAIN = r"""
#include <stdio.h>
#include "%(lib)s.h"
int main(void) {
  float a[%(n)d * 7], x[7], y[%(n)d];
  for (int i = 0; i < %(n)d * 7; ++i) a[i] = (float)((i * 5) %% 11) / 4.0f - 1.0f;
  for (int i = 0; i < 7; ++i) x[i] = (float)(i %% 3) - 0.5f;
  int rc = %(fn)s(a, x, y, %(n)d);
  if (rc != 0) { printf("rc %%d\n", rc); return 1; }
  for (int i = 0; i < %(n)d; ++i) printf("%%.9g\n", y[i]);
%(cl)s  return 0;
}
"""
MAIN_CL = r"""  for (int i = 0; i < %(n)d; ++i) y[i] = -1.0f;
  rc = %(fn)s_cl(a, x, y, %(n)d);
  if (rc != 0) { printf("rc %%d %%s\n", rc, libnames_opencl_error()); return 1; }
  for (int i = 0; i < %(n)d; ++i) printf("%%.9g\n", y[i]);
"""


def _check_names(seed: int, tmp_path, opencl: str | None) -> None:
    names = hostile_names(seed, 6)
    fn = f"f{seed}_{''.join(np.random.default_rng(seed).choice(list('abcxyz'), 4))}"
    nrows = 9 + seed % 4
    a = (((np.arange(nrows * 7) * 5) % 11) / 4.0 - 1.0).astype(np.float32).reshape(nrows, 7)
    xv = ((np.arange(7) % 3) - 0.5).astype(np.float32)
    want = (2.0 * a.astype(np.float64) + 1.0) @ xv
    args, T = _named_workload(names)
    inputs = {names[1]: a, names[2]: xv}
    ctx = f"names {names!r}"
    f = lt.build(_c_schedule(args, T), args, name=fn)
    util.run_check(None, args, inputs, {names[5]: want}, f=f)
    mods = [f]
    if opencl is not None:
        args, T = _named_workload(names)
        g = lt.build(_cl_schedule(args, T), args, target=opencl, name=fn + "_cl")
        util.run_check(None, args, inputs, {names[5]: want}, f=g)
        mods.append(g)
    paths = lt.export_library(mods, tmp_path / "libnames")
    from looptune.backends.opencl_host import host_source
    decls = [f.declaration.replace("*restrict ", "*")] + [host_source(m).declaration
                                                          for m in mods[1:]]
    if opencl is not None:
        decls.append("const char *libnames_opencl_error(void);")
    assert_header_declares_only(paths, decls, tmp_path)
    subprocess.run(["gcc", "-std=gnu11", "-fsyntax-only", "-Werror=format",
                    "-Werror=format-security", str(paths["c"])], check=True)
    main = tmp_path / "main.c"
    fill = {"lib": "libnames", "n": nrows, "fn": fn}
    main.write_text(MAIN % dict(fill, cl=MAIN_CL % fill if opencl is not None else ""))
    exe = tmp_path / "app"
    subprocess.run(["gcc", "-Wall", "-Werror", "-o", str(exe), str(main), "-I", str(tmp_path),
                    "-L", str(tmp_path), "-lnames", f"-Wl,-rpath,{tmp_path}"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{ctx}: {out.stdout}{out.stderr}"
    got = np.array(out.stdout.split(), np.float64)
    np.testing.assert_allclose(got, np.tile(want, len(mods)), rtol=1e-5, atol=1e-5, err_msg=ctx)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.slow
def test_random_names_build_export_and_compute(seed, tmp_path):
    _check_names(seed, tmp_path, None)


@pytest.mark.opencl
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.slow
def test_random_names_opencl_build_export_and_compute(seed, tmp_path, opencl):
    _check_names(seed, tmp_path, opencl)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 14))
def test_random_names_property(seed, tmp_path):
    _check_names(seed, tmp_path, None)


@pytest.mark.slow
@pytest.mark.opencl
@pytest.mark.parametrize("seed", range(2, 14))
def test_random_names_opencl_property(seed, tmp_path, opencl):
    _check_names(seed, tmp_path, opencl)
