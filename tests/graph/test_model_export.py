"""Exporting a compiled model as one C library: a C program links it (static and shared) and
matches the graph's reference run; weights inline or embedded as a blob; thread safety; error
codes; user names made safe in C; the errors."""
from __future__ import annotations

import ctypes
import dataclasses
import re
import subprocess
import threading
from pathlib import Path

import looptune as lt
import numpy as np
import pytest
from looptune.errors import BuildError
from looptune.graph.export import export_model
from tune_models import inputs_for, small_cnn, tiny_transformer

_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "{header}"

static void *load(const char *path, size_t n) {{
  void *p = malloc(n ? n : 1);
  FILE *f = fopen(path, "rb");
  if (!f || fread(p, 1, n, f) != n) {{ fprintf(stderr, "cannot read %s\n", path); exit(3); }}
  fclose(f);
  return p;
}}

int main(int argc, char **argv) {{
  if (argc != {nargs}) {{ fprintf(stderr, "usage: inputs... outputs...\n"); return 4; }}
{loads}
  int rc = {prefix}_run({args});
  if (rc != 0) {{ fprintf(stderr, "%s\n", {prefix}_strerror(rc)); return rc; }}
{saves}
  return 0;
}}
"""


def _c_program(paths: dict, prefix: str, model, tmp: Path, shared: bool) -> Path:
    """A C program calling ``<prefix>_run`` on inputs read from files, writing the outputs."""
    g, src = model.graph, model.source_graph
    ins = [(v, src.types[v]) for v in src.inputs]
    outs = [(v, g.types[v]) for v in g.outputs]
    loads, saves, args = [], [], []
    for k, (_, t) in enumerate(ins):
        loads.append(f"  void *in{k} = load(argv[{k + 1}], {t.nbytes});")
        args.append(f"in{k}")
    for k, (_, t) in enumerate(outs):
        loads.append(f"  void *out{k} = calloc(1, {max(1, t.nbytes)});")
        args.append(f"out{k}")
        saves.append(f'  {{ FILE *f = fopen(argv[{len(ins) + k + 1}], "wb"); '
                     f"fwrite(out{k}, 1, {t.nbytes}, f); fclose(f); }}")
    main = tmp / "main.c"
    main.write_text(_MAIN.format(header=paths["h"].name, nargs=1 + len(ins) + len(outs),
                                 loads="\n".join(loads), prefix=prefix, args=", ".join(args),
                                 saves="\n".join(saves)))
    link = re.search(r"Link the static library with: (.*)", paths["h"].read_text()).group(1)
    exe = tmp / ("main_so" if shared else "main_a")
    lib = [f"-L{paths['so'].parent}", f"-l{paths['so'].stem[3:]}",
           f"-Wl,-rpath,{paths['so'].parent}"] if shared else [str(paths["a"])]
    subprocess.run(["gcc", "-O1", f"-I{paths['h'].parent}", str(main), *lib, *link.split(),
                    "-o", str(exe)], check=True, capture_output=True, text=True)
    return exe


def _run_program(exe: Path, model, xs: dict, tmp: Path) -> list[np.ndarray]:
    g, src = model.graph, model.source_graph
    files = []
    for k, v in enumerate(src.inputs):
        f = tmp / f"in{k}.bin"
        f.write_bytes(np.ascontiguousarray(xs[v]).tobytes())
        files.append(str(f))
    outs = [tmp / f"out{k}.bin" for k in range(len(g.outputs))]
    subprocess.run([str(exe), *files, *map(str, outs)], check=True, capture_output=True,
                   text=True, timeout=120)
    return [np.frombuffer(f.read_bytes(), g.types[v].dtype).reshape(g.types[v].shape)
            for f, v in zip(outs, g.outputs)]


def _check(got, ref, rtol=1e-4, atol=1e-5):
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def cnn_model():
    g = small_cnn()
    return g, lt.graph.compile(g)


@pytest.fixture(scope="module")
def transformer_model():
    g = tiny_transformer()
    return g, lt.graph.compile(g)


@pytest.mark.slow
def test_a_c_program_links_the_static_cnn_library_and_matches_the_reference(cnn_model,
                                                                           tmp_path):
    g, model = cnn_model
    paths = lt.export_library(model, tmp_path / "libtiny")      # the public entry point
    assert {"c", "h", "so", "a"} <= set(paths) and all(p.exists() for p in paths.values())
    header = paths["h"].read_text()
    assert "int tiny_run(const float *image, float *softmax" in header
    assert "Thread-safe: calls are serialized by a mutex" in header
    exe = _c_program(paths, "tiny", model, tmp_path, shared=False)
    for seed in (0, 1):
        xs = inputs_for(g, seed)
        _check(_run_program(exe, model, xs, tmp_path), g.run_reference(xs))


@pytest.mark.slow
def test_a_c_program_links_the_shared_transformer_library_and_matches_the_reference(
        transformer_model, tmp_path):
    g, model = transformer_model
    paths = export_model(model, tmp_path / "build" / "libencoder")
    exe = _c_program(paths, "encoder", model, tmp_path, shared=True)
    xs = inputs_for(g, 3)
    _check(_run_program(exe, model, xs, tmp_path), g.run_reference(xs))


def _ctypes_run(paths, prefix, model, xs) -> list[np.ndarray]:
    lib = ctypes.CDLL(str(paths["so"]))
    g, src = model.graph, model.source_graph
    outs = [np.full(g.types[v].shape, np.nan, g.types[v].dtype) for v in g.outputs]
    ptrs = [ctypes.c_void_p(np.ascontiguousarray(xs[v]).ctypes.data) for v in src.inputs]
    rc = getattr(lib, f"{prefix}_run")(*ptrs, *[ctypes.c_void_p(o.ctypes.data) for o in outs])
    assert rc == 0
    return outs


@pytest.mark.slow
def test_weights_inline_or_as_an_embedded_blob_give_the_same_results(cnn_model, tmp_path):
    g, model = cnn_model
    xs = inputs_for(g, 5)
    inline = export_model(model, tmp_path / "a" / "libcnn", inline_limit=1 << 30)
    blob = export_model(model, tmp_path / "b" / "libcnn", inline_limit=0)
    assert "weights" not in inline and "static const float lt_model_w0" in \
        inline["c"].read_text()
    nbytes = sum(a.nbytes for a in model.weights.values())
    assert blob["weights"].stat().st_size >= nbytes and ".incbin" in blob["c"].read_text()
    blob["weights"].unlink()       # embedded at build time: the library needs no file
    a = _ctypes_run(inline, "cnn", model, xs)
    b = _ctypes_run(blob, "cnn", model, xs)
    for x, y, m in zip(a, b, model(xs)):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_allclose(x, m, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_concurrent_calls_are_serialized_and_correct(transformer_model, tmp_path):
    g, model = transformer_model
    paths = export_model(model, tmp_path / "libmt")
    lib = ctypes.CDLL(str(paths["so"]))
    lib.mt_run.argtypes = [ctypes.c_void_p] * 2
    cases = [inputs_for(g, s) for s in range(4)]
    refs = [g.run_reference(xs)[0] for xs in cases]
    errors = []

    def work(k):
        xs = cases[k % 4]
        out = np.empty_like(refs[k % 4])
        for _ in range(20):
            if lib.mt_run(xs["tokens"].ctypes.data, out.ctypes.data) != 0 or \
                    not np.allclose(out, refs[k % 4], rtol=1e-4, atol=1e-5):
                errors.append(k)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_error_codes_and_their_descriptions(cnn_model, tmp_path):
    _, model = cnn_model
    paths = export_model(model, tmp_path / "libcodes")
    lib = ctypes.CDLL(str(paths["so"]))
    lib.codes_strerror.restype = ctypes.c_char_p
    out = np.empty(model.graph.types[model.graph.outputs[0]].shape, np.float32)
    assert lib.codes_run(None, ctypes.c_void_p(out.ctypes.data)) == -1
    assert lib.codes_strerror(-1) == b"an input or output pointer is NULL"
    assert lib.codes_strerror(0) == b"success"
    assert lib.codes_strerror(1).startswith(b"a kernel could not allocate")
    assert lib.codes_strerror(259).startswith(b"an index a kernel reads is out of range")
    assert lib.codes_strerror(77) == b"unknown error code"
    assert lib.codes_failed_step() == -1
    header = paths["h"].read_text()
    assert "#define CODES_ERROR_NULL_ARGUMENT (-1)" in header
    assert "#define CODES_ERROR_ALLOC (1)" in header
    assert "int codes_failed_step(void);" in header


def test_outputs_that_are_inputs_weights_or_repeated_are_copied(tmp_path):
    g = lt.graph.Graph("io")
    x = g.input("x", (3, 5))
    c = g.const(np.arange(4, dtype="float32"), name="c")
    y = g.op("Relu", x)
    g.output(y, x, y, c)
    model = lt.graph.compile(g)
    paths = export_model(model, tmp_path / "libio")
    assert "int io_run(const float *x, float *relu_1, float *x_out, float *relu_1_out, " \
           "float *c);" in paths["h"].read_text()
    xs = {"x": np.random.default_rng(0).standard_normal((3, 5)).astype("float32")}
    _check(_ctypes_run(paths, "io", model, xs), g.run_reference(xs), rtol=0, atol=0)


def test_user_names_are_made_safe_in_c(tmp_path):
    g = lt.graph.Graph('we"ird*/ name')
    x = g.input("int", (2, 3))                      # a C keyword
    x2 = g.input("x/*y*/ \\", (2, 3))               # comment and splice characters
    w = g.const(np.ones((2, 3), "float32"), name="memcpy")
    g.output(g.op("Mul", g.op("Add", x, x2, name="NULL"), w, name="%s\n#define"))
    model = lt.graph.compile(g)
    paths = export_model(model, tmp_path / "libweird")
    header = paths["h"].read_text()
    assert "int weird_run(const float *v_int, const float *x__y____, float *v__s__define);" \
        in header
    assert "*/ name" not in header and "\n#define\n" not in header
    rng = np.random.default_rng(1)
    xs = {v: rng.standard_normal((2, 3)).astype("float32") for v in g.inputs}
    _check(_ctypes_run(paths, "weird", model, xs), g.run_reference(xs))


@pytest.mark.slow
def test_prefix_from_the_file_name_or_given(cnn_model, tmp_path):
    _, model = cnn_model
    paths = export_model(model, tmp_path / "mymodel", prefix="net")
    assert "int net_run(" in paths["h"].read_text()
    assert paths["so"].name == "mymodel.so"
    paths = export_model(model, tmp_path / "classifier")
    assert "int classifier_run(" in paths["h"].read_text()


def test_a_bad_library_name_or_prefix(cnn_model, tmp_path):
    _, model = cnn_model
    with pytest.raises(BuildError, match=r"file name must not be empty or hold quotes"):
        export_model(model, tmp_path / 'lib"x')
    with pytest.raises(BuildError, match=r"export_library\(name='2x_run'\): the function name "
                                         "must be a C identifier"):
        export_model(model, tmp_path / "libnet", prefix="2x")


def test_a_step_on_numpy_cannot_be_exported(cnn_model, tmp_path):
    _, model = cnn_model
    st = model.steps[0]
    broken = dataclasses.replace(st, kernel=None)
    model2 = _with(model, steps=[broken, *model.steps[1:]])
    with pytest.raises(BuildError, match=r"group 0 \(.*\) runs on numpy: its operator has no "
                                         "tensor-expression compute"):
        export_model(model2, tmp_path / "libx")


def test_an_opencl_kernel_cannot_be_exported(cnn_model, tmp_path):
    from looptune.backends.target import Target
    _, model = cnn_model
    k = model.kernels[0]
    fake = type("CLModule", (), {"target": Target.parse("opencl"), "name": k.name})()
    model2 = _with(model, kernels=[dataclasses.replace(k, module=fake, target="opencl"),
                                   *model.kernels[1:]])
    with pytest.raises(BuildError, match=f"kernel {k.name} was built for 'opencl'; a model "
                                         "library holds C kernels only"):
        export_model(model2, tmp_path / "libx")


def _with(model, **parts):
    """A shallow copy of ``model`` with some attributes replaced."""
    m = object.__new__(type(model))
    m.__dict__.update(model.__dict__)
    m.__dict__.update(parts)
    return m


def test_a_failing_kernel_returns_its_code_and_names_the_step(transformer_model, tmp_path):
    from looptune.graph.export import export_spec, model_spec
    g, model = transformer_model
    spec = model_spec(model)
    k = spec.steps[2].kernel
    first = next(n for n, st in enumerate(spec.steps) if st.kernel == k)
    kern = spec.kernels[k]
    sig = kern.code.function.split("{", 1)[0]
    spec.kernels[k] = dataclasses.replace(kern, code=dataclasses.replace(
        kern.code, function=sig + "{\n  return 300;\n}\n"))     # an index out of range
    paths = export_spec(spec, tmp_path / "libfail")
    lib = ctypes.CDLL(str(paths["so"]))
    lib.fail_strerror.restype = ctypes.c_char_p
    x = inputs_for(g)["tokens"]
    out = np.empty(g.types[g.outputs[0]].shape, np.float32)
    assert lib.fail_run(ctypes.c_void_p(x.ctypes.data), ctypes.c_void_p(out.ctypes.data)) == 300
    assert lib.fail_failed_step() == first
    assert b"out of range" in lib.fail_strerror(300)
