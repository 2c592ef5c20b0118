"""Exporting a compiled model as ONE C library: ``.so``, ``.a``, ``.h`` and ``.c``.

```python
model = lt.graph.compile(g)                 # g = lt.graph.Graph("tiny"), input x, output out
lt.export_library(model, "build/libtiny")   # int tiny_run(const float *x, float *out)
```

The library holds the whole network:

- ``int <prefix>_run(const T *input..., T *output...)``: the graph's inputs then its outputs,
  row-major contiguous buffers of the shapes the header documents, in the graph's order.
  Returns 0; -1 (``<PREFIX>_ERROR_NULL_ARGUMENT``) for a NULL buffer; else the code of the
  kernel that failed (1: a temporary buffer could not be allocated; 256 and up: an index out
  of range, in kernels built with ``-bounds-check``). ``<prefix>_strerror(code)`` describes a
  code, ``<prefix>_failed_step()`` names the kernel call that failed in this thread.
  ``<prefix>`` is the library's file name without ``lib`` (``build/libtiny`` -> ``tiny``).
- The kernels are static functions of the one translation unit (the code ``lt.build``
  generated for each, renamed), called in the model's order.
- The weights are embedded: as ``static const`` arrays in the C source up to
  ``inline_limit`` bytes in all, else as one binary blob ``<lib>.weights`` that the assembler
  includes (``.incbin``) into the library's read-only data at build time: the library needs
  no file at run time, and the C source stays small (rebuilding it needs the blob beside it).
- The intermediates live in one static arena of the memory plan's size (zero-filled ``.bss``:
  allocated once, when the library is loaded; never per call).
- Thread safety: one arena per library, so concurrent calls are serialized by a mutex; each
  kernel runs on the OpenMP threads as in Python. Input and output buffers must not overlap.

Every user string that reaches C (value names in parameters and comments) goes through
:mod:`looptune.backends.sanitize`.
"""
from __future__ import annotations

import dataclasses
import math
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..backends.c_codegen import CSource, translation_unit
from ..backends.compiler import compiler_version, flags_for
from ..backends.export import export_library as export_functions
from ..backends.export import library_base
from ..backends.sanitize import c_comment, c_identifier, check_function_name
from ..errors import BuildError
from ..lang import dtype as dt
from .ir import TensorType

INLINE_LIMIT = 64 * 1024        # bytes of weights written as C arrays; more go to the blob
ALIGN = 64
_INLINE_DTYPES = ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                  "uint32", "uint64", "bool")
# the run function's codes: its own (negative), and a failing kernel's, passed through
ERRORS = ((0, "OK", "success"),
          (-1, "ERROR_NULL_ARGUMENT", "an input or output pointer is NULL"),
          (1, "ERROR_ALLOC", "a kernel could not allocate a temporary buffer (memory exhausted)"),
          (256, "ERROR_BOUNDS", "an index a kernel reads is out of range (codes 256 and up: "
                                "kernels built with -bounds-check)"))


@dataclass(frozen=True)
class KernelSpec:
    """One kernel: its generated C function (as ``lt.build`` made it) and its options."""

    name: str
    code: CSource
    options: dict = field(default_factory=dict)        # the C target's options


@dataclass(frozen=True)
class StepSpec:
    """One kernel call: the kernel's index and the values passed, in argument order."""

    kernel: int
    args: tuple[str, ...]
    label: str = ""


@dataclass
class ModelSpec:
    """What the C emitter needs of a compiled model."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    types: dict[str, TensorType]
    kernels: list[KernelSpec]
    steps: list[StepSpec]
    plan: dict[str, tuple[int, int]]            # intermediate value -> (offset, nbytes)
    weights: dict[str, np.ndarray]
    labels: tuple[str, ...] = ()                # the user's name of each output (C names)

    def label(self, j: int) -> str:
        return self.labels[j] if self.labels else self.outputs[j]

    @property
    def arena_bytes(self) -> int:
        return max((o + n for o, n in self.plan.values()), default=0)


# ---- the model's values in C ------------------------------------------------------------------

def _ctype(t: TensorType) -> str:
    return dt.c_type(t.dtype)


def _shape(t: TensorType) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _param_names(spec: ModelSpec) -> tuple[dict[str, str], list[str]]:
    """Unique C parameter names: one per graph input, one per output position (an output
    that is also an input, or repeated, gets a parameter of its own)."""
    used: set[str] = set()

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in used:
            k += 1
            name = f"{base}_{k}"
        used.add(name)
        return name

    ins = {v: fresh(c_identifier(v)) for v in spec.inputs}
    outs = [fresh(c_identifier(spec.label(j)) + ("" if spec.label(j) not in ins and
                                                 spec.outputs.index(v) == j else "_out"))
            for j, v in enumerate(spec.outputs)]
    return ins, outs


@dataclass
class _Weights:
    """Where each weight lives in C: inline arrays, or offsets in the embedded blob."""

    mode: str                                    # "inline" | "blob"
    decls: list[str]
    refs: dict[str, str]                         # value -> C expression of its pointer
    blob: bytes = b""


def _hex_list(a: np.ndarray) -> str:
    flat = a.reshape(-1)
    if a.dtype.kind == "f":
        sfx = "f" if a.dtype == np.float32 else ""
        items = [(float(x).hex() + sfx) if math.isfinite(x) else
                 ("NAN" if math.isnan(x) else ("-INFINITY" if x < 0 else "INFINITY"))
                 for x in flat.tolist()]
    elif a.dtype == np.bool_:
        items = ["1" if x else "0" for x in flat.tolist()]
    else:
        items = [f"{int(x)}" + ("ll" if a.dtype.itemsize == 8 else "") for x in flat.tolist()]
        if a.dtype == np.int64:
            items = ["INT64_MIN" if x == "-9223372036854775808ll" else x for x in items]
        elif a.dtype == np.uint64:
            items = [x[:-2] + "ull" for x in items]
    rows = [", ".join(items[k:k + 8]) for k in range(0, len(items), 8)]
    return ",\n  ".join(rows) or "0"


def _weights(spec: ModelSpec, used: list[str], inline_limit: int, blob_sym: str) -> _Weights:
    arrays = {v: np.ascontiguousarray(spec.weights[v]) for v in used}
    total = sum(a.nbytes for a in arrays.values())
    inline = total <= inline_limit and all(a.dtype.name in _INLINE_DTYPES
                                           for a in arrays.values())
    w = _Weights("inline" if inline else "blob", [], {})
    parts, offset = [], 0
    for k, (v, a) in enumerate(arrays.items()):
        t = TensorType(tuple(a.shape), a.dtype.name)
        doc = f"/* weight '{c_comment(v)}' {t.dtype}{_shape(t)} */"
        if inline:
            name = f"lt_model_w{k}"
            w.decls.append(f"{doc}\nstatic const {_ctype(t)} {name}[{max(1, a.size)}] "
                           f"__attribute__((aligned({ALIGN}))) = {{\n  {_hex_list(a)}\n}};")
            w.refs[v] = name
        else:
            pad = -offset % ALIGN
            parts.append(b"\0" * pad + a.tobytes())
            offset += pad
            w.decls.append(f"{doc} /* at blob offset {offset} */")
            w.refs[v] = f"((const {_ctype(t)} *)({blob_sym} + {offset}))"
            offset += a.nbytes
    w.blob = b"".join(parts)
    return w


def _blob_asm(blob_sym: str, blob_file: str) -> str:
    """The blob as read-only data of this object (a local symbol: two model libraries in one
    program do not clash), included by the assembler."""
    asm = (f".section .rodata\\n.balign {ALIGN}\\n.type {blob_sym}, @object\\n{blob_sym}:\\n"
           f".incbin \\\"{blob_file}\\\"\\n.size {blob_sym}, .-{blob_sym}\\n.previous\\n")
    return (f'__asm__("{asm}");\n'
            f"extern const unsigned char {blob_sym}[] __attribute__((visibility(\"hidden\")));")


# ---- the C source -----------------------------------------------------------------------------

@dataclass
class _Emit:
    """Names shared by the pieces of one library's source."""

    spec: ModelSpec
    prefix: str
    params: dict[str, str]                 # input value -> parameter name
    out_params: list[str]                  # per output position
    weights: _Weights

    @property
    def macro(self) -> str:
        return self.prefix.upper()

    def signature(self, restrict: bool) -> str:
        r = "restrict " if restrict else ""
        ps = [f"const {_ctype(self.spec.types[v])} *{r}{self.params[v]}"
              for v in self.spec.inputs]
        ps += [f"{_ctype(self.spec.types[v])} *{r}{p}"
               for v, p in zip(self.spec.outputs, self.out_params)]
        return ", ".join(ps) or "void"

    def home(self, v: str) -> str:
        """The C expression of value ``v``'s buffer during a run."""
        s = self.spec
        if v in s.inputs:
            return self.params[v]
        if v in s.weights:
            return self.weights.refs[v]
        if v in s.outputs:
            return self.out_params[s.outputs.index(v)]
        if v not in s.plan:
            raise BuildError(f"export_library: value '{v}' of model '{s.name}' is read by a "
                             "kernel but the memory plan gives it no place; the compiled "
                             "model is inconsistent (a looptune bug: please report it)")
        return f"(({_ctype(s.types[v])} *)(lt_model_arena + {s.plan[v][0]}))"


def _kernel_functions(spec: ModelSpec) -> list[CSource]:
    """Each kernel's code as a static function ``lt_model_k<i>``."""
    parts = []
    for k, kern in enumerate(spec.kernels):
        head = f"int {kern.name}("
        text = kern.code.function
        assert text.startswith(head), f"kernel {kern.name}: unexpected C text {text[:80]!r}"
        parts.append(dataclasses.replace(
            kern.code, function=f"static int lt_model_k{k}(" + text[len(head):]))
    return parts


def _run_body(e: _Emit) -> list[str]:
    s = e.spec
    lines = ["  int rc;", "  lt_model_failed = -1;"]
    for n, st in enumerate(s.steps):
        kern = s.kernels[st.kernel]
        label = c_comment(st.label or kern.name)
        args = ", ".join(e.home(v) for v in st.args)
        lines.append(f"  /* step {n}: {label} */")
        lines.append(f"  if ((rc = lt_model_k{st.kernel}({args})) != 0) {{ "
                     f"lt_model_failed = {n}; return rc; }}")
    for j, v in enumerate(s.outputs):
        written = v not in s.inputs and v not in s.weights and s.outputs.index(v) == j
        if not written:        # an output that is an input, a weight, or repeated
            lines.append(f"  memcpy({e.out_params[j]}, {e.home(v)}, "
                         f"{max(1, s.types[v].nbytes)}); /* output {j}: "
                         f"'{c_comment(s.label(j))}' */")
    return lines + ["  return 0;"]


def _source(e: _Emit, header_name: str, blob_decl: str = "") -> str:
    s = e.spec
    ptrs = [e.params[v] for v in s.inputs] + e.out_params
    null = " || ".join(f"{p} == NULL" for p in ptrs) or "0"
    call = ", ".join(ptrs)
    errors = "\n".join(f"  if (code {'>=' if k == 256 else '=='} {k}) return \"{msg}\";"
                       for k, _, msg in reversed(ERRORS))
    body = [f'#include "{header_name}"', "#include <pthread.h>", "#include <string.h>",
            translation_unit(_kernel_functions(s)),
            "/* ---- weights ---- */", *([blob_decl] if blob_decl else []),
            *e.weights.decls, "",
            "/* ---- the arena: every intermediate at its planned offset ---- */",
            f"static unsigned char lt_model_arena[{max(ALIGN, s.arena_bytes)}] "
            f"__attribute__((aligned({ALIGN})));",
            "static pthread_mutex_t lt_model_lock = PTHREAD_MUTEX_INITIALIZER;",
            "static _Thread_local int lt_model_failed = -1;   /* per calling thread */", "",
            f"static int lt_model_run({e.signature(True)}) {{", *_run_body(e), "}", "",
            f"int {e.prefix}_run({e.signature(False)}) {{",
            f"  if ({null}) return {e.macro}_ERROR_NULL_ARGUMENT;",
            "  pthread_mutex_lock(&lt_model_lock);",
            f"  int rc = lt_model_run({call});",
            "  pthread_mutex_unlock(&lt_model_lock);",
            "  return rc;", "}", "",
            f"int {e.prefix}_failed_step(void) {{ return lt_model_failed; }}", "",
            f"const char *{e.prefix}_strerror(int code) {{", errors,
            "  return \"unknown error code\";", "}", ""]
    return "\n".join(body)


def _header(e: _Emit, guard: str, link: str) -> str:
    s = e.spec
    doc = [f"/* Generated by looptune: model '{c_comment(s.name)}' as one function, "
           f"{len(s.steps)} kernel calls ({len(s.kernels)} kernels).",
           f" * {e.prefix}_run: row-major, C-contiguous buffers; returns 0 or an error code "
           f"({e.macro}_ERROR_*).",
           " * Thread-safe: calls are serialized by a mutex (one arena per library, "
           f"{s.arena_bytes} bytes, static).",
           " * Inputs and outputs must not overlap."]
    for v in s.inputs:
        doc.append(f" *   input  {e.params[v]:<14} {s.types[v].dtype:<8} shape "
                   f"{_shape(s.types[v])}  ('{c_comment(v)}')")
    for j, (v, p) in enumerate(zip(s.outputs, e.out_params)):
        doc.append(f" *   output {p:<14} {s.types[v].dtype:<8} shape {_shape(s.types[v])}  "
                   f"('{c_comment(s.label(j))}')")
    doc += [f" * Link the static library with: {link}", " */"]
    codes = [f"#define {e.macro}_{name} ({k})  /* {msg} */" for k, name, msg in ERRORS]
    return "\n".join([f"#ifndef {guard}", f"#define {guard}", "", "#include <stdint.h>",
                      "#include <stdbool.h>", "", "#ifdef __cplusplus", 'extern "C" {',
                      "#endif", "", *codes, "", *doc,
                      f"int {e.prefix}_run({e.signature(False)});", "",
                      "/* A description of an error code of the function above. */",
                      f"const char *{e.prefix}_strerror(int code);", "",
                      "/* The index of the kernel call (0, 1, ...) that failed in this thread's "
                      "last call, or -1. */",
                      f"int {e.prefix}_failed_step(void);", "", "#ifdef __cplusplus",
                      "}", "#endif", "", f"#endif /* {guard} */", ""])


# ---- building ---------------------------------------------------------------------------------

def _prefix_of(base: Path, prefix: str | None) -> str:
    if prefix is None:
        stem = base.name[3:] if base.name.startswith("lib") and len(base.name) > 3 \
            else base.name
        prefix = c_identifier(stem)
    check_function_name(f"{prefix}_run", "export_library", exported=True)
    check_function_name(f"{prefix}_strerror", "export_library", exported=True)
    check_function_name(f"{prefix}_failed_step", "export_library", exported=True)
    return prefix


def export_spec(spec: ModelSpec, path, *, prefix: str | None = None, cc: str | None = None,
                inline_limit: int = INLINE_LIMIT) -> dict[str, Path]:
    """Write and compile the library of ``spec`` (see the module docstring); the paths written
    by extension: ``c``, ``h``, ``so``, ``a`` and, when the weights are a blob, ``weights``."""
    base = library_base(path, example="libmodel")
    prefix = _prefix_of(base, prefix)
    opts = spec.kernels[0].options if spec.kernels else {}
    cc = cc or opts.get("cc", "gcc")
    compiler_version(cc)
    out = {ext: base.with_name(base.name + "." + ext) for ext in ("c", "h", "so", "a")}
    used = []
    for v in [a for st in spec.steps for a in st.args] + list(spec.outputs):
        if v in spec.weights and v not in used:
            used.append(v)
    blob_sym = "lt_model_blob"
    weights = _weights(spec, used, inline_limit, blob_sym)
    e = _Emit(spec, prefix, *_param_names(spec), weights)
    codes = [k.code for k in spec.kernels]
    parallel = any(c.uses_parallel for c in codes)
    libs = (["-lmvec"] if any(c.vector_math for c in codes) else []) + ["-lpthread", "-lm"]
    link = " ".join((["-fopenmp"] if parallel else []) + libs)
    guard = c_identifier(base.name).upper() + "_H"
    out["h"].write_text(_header(e, guard, link))
    blob_decl = ""
    if weights.mode == "blob":
        out["weights"] = base.with_name(base.name + ".weights")
        out["weights"].write_bytes(weights.blob)
        blob_decl = _blob_asm(blob_sym, out["weights"].name)
    src = _source(e, out["h"].name, blob_decl)
    out["c"].write_text(src)
    flags = flags_for({k: v for k, v in opts.items() if k in ("march", "O", "fast-math")},
                      parallel)
    obj = base.with_name(base.name + ".o")
    asm_inc = [f"-Wa,-I{base.parent.resolve()}"] if weights.mode == "blob" else []
    _run([cc, *flags, *asm_inc, "-c", str(out["c"]), "-o", str(obj)], out["c"])
    _run([cc, *flags, "-shared", str(obj), "-o", str(out["so"]), *libs], out["c"])
    ar = shutil.which("ar") or shutil.which("gcc-ar")
    if ar is None:
        raise BuildError("export_library: 'ar' was not found; install binutils")
    out["a"].unlink(missing_ok=True)
    _run([ar, "rcs", str(out["a"]), str(obj)], out["c"])
    obj.unlink()
    return out


def _run(cmd: list[str], src: Path) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"export_library: {' '.join(cmd)} failed:\n{proc.stderr.strip()}",
                         str(src), proc.stderr)


# ---- a compiled model -------------------------------------------------------------------------

def model_spec(model) -> ModelSpec:
    """The emitter's view of a model from ``lt.graph.compile``; a BuildError when a step
    cannot be in a C library (a group that runs on numpy, a kernel built for OpenCL)."""
    g, src = model.graph, model.source_graph
    for st in model.steps:
        if st.kernel is None:
            raise BuildError(f"export_library: model '{model.name}': group {st.group.index} "
                             f"({st.group.name}, {st.group.master.label}) runs on numpy: its "
                             "operator has no tensor-expression compute, so a C library cannot "
                             "hold it; give the operator a compute, or run this model from "
                             "Python (model(...))")
    kernels = []
    for k in model.kernels:
        mod = k.module
        if getattr(mod, "target", None) is None or mod.target.kind != "c" or \
                not hasattr(mod, "code"):
            raise BuildError(f"export_library: model '{model.name}': kernel {k.name} was built "
                             f"for '{k.target}'; a model library holds C kernels only: compile "
                             "the model with target='c'")
        kernels.append(KernelSpec(k.name, mod.code, dict(mod.target.options)))
    steps = [StepSpec(st.kernel, tuple(st.args),
                      f"{st.group.name} (master {st.group.master.label})")
             for st in model.steps]
    types = dict(g.types)
    types.update({v: src.types[v] for v in src.inputs})
    weights = dict(model.weights)
    weights.update({v: g.consts[v] for v in g.outputs if v in g.consts})
    return ModelSpec(model.name, tuple(src.inputs), tuple(g.outputs), types, kernels, steps,
                     dict(model.plan.offsets), weights, tuple(src.outputs))


def export_model(model, path, *, prefix: str | None = None, cc: str | None = None,
                 inline_limit: int = INLINE_LIMIT) -> dict[str, Path]:
    """``lt.export_library(model, path)`` for a model from ``lt.graph.compile``: writes
    ``path.so``, ``path.a``, ``path.h``, ``path.c`` (and ``path.weights`` when the weights
    are over ``inline_limit`` bytes); ``int <prefix>_run(inputs..., outputs...)`` where
    ``prefix`` defaults to the file name without ``lib``. Returns the paths written."""
    return export_spec(model_spec(model), path, prefix=prefix, cc=cc,
                       inline_limit=inline_limit)


def export_library(modules, path, cc: str | None = None, march=None) -> dict[str, Path]:
    """``lt.export_library``: a model from ``lt.graph.compile`` (:func:`export_model`) or
    functions from ``lt.build`` (:func:`looptune.backends.export.export_library`, whose
    docstring tells ``march``). Returns the paths written."""
    if not (hasattr(modules, "steps") and hasattr(modules, "plan")):   # not a model
        return export_functions(modules, path, cc=cc, march=march)
    if march is not None:
        raise BuildError(f"export_library: march= applies to functions from lt.build; got "
                         f"a model and march={march!r}; compile the model for its target "
                         "instead: lt.graph.compile(g, target='c -march=x86-64-v2')")
    return export_model(modules, path, cc=cc)
