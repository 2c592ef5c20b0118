"""C host code for OpenCL functions, so that an exported library can run them from plain C.

For each OpenCL module, :func:`host_source` writes a C function with the signature a C module
would have (``int name(const float *A, ..., float *C [, int64_t n...])``) that does what
:class:`~looptune.backends.opencl.CLModule` does from Python: copy the inputs to device
buffers, launch the kernels in order with the same global and local sizes, and copy the
outputs back. :func:`runtime_source` is the part every such function shares (once per
library): it loads an OpenCL ICD loader with ``dlopen`` at the first call (no OpenCL headers
or ``-lOpenCL`` needed to build or link; :mod:`.opencl_loader` says which: the platforms
pyopencl finds, ``$LOOPTUNE_OPENCL_LIBRARY`` names another loader),
picks the device the module was built for (its target's ``-device`` and ``-platform``; GPUs
first otherwise; the first device that compiles a trivial kernel, as the Python runtime does)
and keeps one context and queue. Each function builds its program once (``pthread_once``);
calls are serialised by one lock, since kernel arguments are shared state. A function returns
0, or a negative OpenCL error code (-1 where the loader or device is missing), and
``<prefix>_opencl_error()`` then says what failed.
"""
from __future__ import annotations

import numpy as np

from ..lang import dtype as dt
from ..lang.simplify import simplify
from ..lang.tensor import PlaceholderOp
from .c_codegen import CCodegen, CSource, _dim, _factors
from .opencl_loader import LOADER_C, loader_defines
from .sanitize import c_string

_DEVICE_MASKS = {"cpu": "(1u << 1)", "gpu": "(1u << 2)", "accelerator": "(1u << 3)"}

# The OpenCL 1.2 entry points the host code calls; every handle is an opaque pointer, so one
# handle type serves platforms, devices, contexts, queues, programs, kernels and buffers.
_RUNTIME = r"""
/* ---- OpenCL host runtime (looptune): the ICD loader is opened at run time ---- */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <ctype.h>

typedef int32_t lt_cl_int;
typedef uint32_t lt_cl_uint;
typedef uint64_t lt_cl_bits;
typedef struct lt_cl_object *lt_cl_h;

#define LT_CL_MEM_READ_WRITE (1u << 0)
#define LT_CL_MEM_READ_ONLY (1u << 2)
#define LT_CL_MEM_COPY_HOST_PTR (1u << 5)
#define LT_CL_DEVICE_TYPE_ALL 0xFFFFFFFFu
#define LT_CL_PLATFORM_VERSION 0x0901u
#define LT_CL_PLATFORM_NAME 0x0902u
#define LT_CL_DEVICE_NAME 0x102Bu
#define LT_CL_PROGRAM_BUILD_LOG 0x1183u

static struct {
  pthread_once_t once;
  pthread_mutex_t lock;
  int ready;
  char why[1024];
  void *lib;
  lt_cl_h device, context, queue;
  lt_cl_int (*GetPlatformIDs)(lt_cl_uint, lt_cl_h *, lt_cl_uint *);
  lt_cl_int (*GetPlatformInfo)(lt_cl_h, lt_cl_uint, size_t, void *, size_t *);
  lt_cl_int (*GetDeviceIDs)(lt_cl_h, lt_cl_bits, lt_cl_uint, lt_cl_h *, lt_cl_uint *);
  lt_cl_int (*GetDeviceInfo)(lt_cl_h, lt_cl_uint, size_t, void *, size_t *);
  lt_cl_h (*CreateContext)(const intptr_t *, lt_cl_uint, const lt_cl_h *, void *, void *,
                           lt_cl_int *);
  lt_cl_h (*CreateCommandQueue)(lt_cl_h, lt_cl_h, lt_cl_bits, lt_cl_int *);
  lt_cl_h (*CreateProgramWithSource)(lt_cl_h, lt_cl_uint, const char **, const size_t *,
                                     lt_cl_int *);
  lt_cl_int (*BuildProgram)(lt_cl_h, lt_cl_uint, const lt_cl_h *, const char *, void *, void *);
  lt_cl_int (*GetProgramBuildInfo)(lt_cl_h, lt_cl_h, lt_cl_uint, size_t, void *, size_t *);
  lt_cl_h (*CreateKernel)(lt_cl_h, const char *, lt_cl_int *);
  lt_cl_h (*CreateBuffer)(lt_cl_h, lt_cl_bits, size_t, void *, lt_cl_int *);
  lt_cl_int (*SetKernelArg)(lt_cl_h, lt_cl_uint, size_t, const void *);
  lt_cl_int (*EnqueueNDRangeKernel)(lt_cl_h, lt_cl_h, lt_cl_uint, const size_t *, const size_t *,
                                    const size_t *, lt_cl_uint, const void *, void *);
  lt_cl_int (*EnqueueReadBuffer)(lt_cl_h, lt_cl_h, lt_cl_uint, size_t, size_t, void *,
                                 lt_cl_uint, const void *, void *);
  lt_cl_int (*ReleaseMemObject)(lt_cl_h);
  lt_cl_int (*ReleaseProgram)(lt_cl_h);
  lt_cl_int (*ReleaseContext)(lt_cl_h);
  lt_cl_int (*Finish)(lt_cl_h);
} lt_cl = {PTHREAD_ONCE_INIT, PTHREAD_MUTEX_INITIALIZER};

static __thread char lt_cl_msg[2048];

__attribute__((format(printf, 2, 3)))
static int lt_cl_fail(lt_cl_int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lt_cl_msg, sizeof lt_cl_msg, fmt, ap);
  va_end(ap);
  return code ? code : -1;
}

__attribute__((format(printf, 1, 2)))
static void lt_cl_why(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(lt_cl.why, sizeof lt_cl.why, fmt, ap);
  va_end(ap);
}

static const char lt_cl_probe_src[] =
    "__kernel void looptune_probe(__global float *x) { x[get_global_id(0)] = 1.0f; }";

static int lt_cl_contains(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; ++hay) {
    size_t k = 0;
    while (k < n && hay[k] && tolower((unsigned char)hay[k]) == tolower((unsigned char)needle[k]))
      ++k;
    if (k == n) return 1;
  }
  return n == 0;
}

/* A context and queue on `dev` if it compiles a trivial kernel. */
static int lt_cl_try_device(lt_cl_h dev) {
  lt_cl_int err = 0;
  lt_cl_h ctx = lt_cl.CreateContext(NULL, 1, &dev, NULL, NULL, &err);
  if (err || !ctx) return 0;
  const char *src = lt_cl_probe_src;
  lt_cl_h prg = lt_cl.CreateProgramWithSource(ctx, 1, &src, NULL, &err);
  if (!err && prg) err = lt_cl.BuildProgram(prg, 1, &dev, "", NULL, NULL);
  if (prg) lt_cl.ReleaseProgram(prg);
  lt_cl_h queue = err ? NULL : lt_cl.CreateCommandQueue(ctx, dev, 0, &err);
  if (err || !queue) { lt_cl.ReleaseContext(ctx); return 0; }
  lt_cl.device = dev; lt_cl.context = ctx; lt_cl.queue = queue;
  return 1;
}

/* LT_CL_LOADER */
static void lt_cl_setup(void) {
  if (!lt_cl_find_loader()) return;
  lt_cl_h platforms[16];
  lt_cl_uint np = 0;
  if (lt_cl.GetPlatformIDs(16, platforms, &np) != 0) np = 0;
  if (np > 16) np = 16;
  /* the type the module was built for, else GPUs first and then any device */
  lt_cl_bits passes[2] = {LT_CL_DEVICE_MASK, LT_CL_DEVICE_TYPE_ALL};
  int n_pass = LT_CL_DEVICE_MASK == LT_CL_DEVICE_TYPE_ALL ? 1 : (LT_CL_DEVICE_ANY ? 2 : 1);
  for (int pass = 0; pass < n_pass; ++pass) {
    for (lt_cl_uint p = 0; p < np; ++p) {
      char name[256] = "", version[256] = "", both[520];
      lt_cl.GetPlatformInfo(platforms[p], LT_CL_PLATFORM_NAME, sizeof name - 1, name, NULL);
      lt_cl.GetPlatformInfo(platforms[p], LT_CL_PLATFORM_VERSION, sizeof version - 1, version,
                            NULL);
      snprintf(both, sizeof both, "%s (%s)", name, version);
      if (!lt_cl_contains(both, LT_CL_PLATFORM)) continue;
      lt_cl_h devices[16];
      lt_cl_uint nd = 0;
      if (lt_cl.GetDeviceIDs(platforms[p], passes[pass], 16, devices, &nd) != 0) continue;
      if (nd > 16) nd = 16;
      for (lt_cl_uint d = 0; d < nd; ++d)
        if (lt_cl_try_device(devices[d])) { lt_cl.ready = 1; return; }
    }
  }
  lt_cl_why("no usable OpenCL device (%u platform(s); wanted device type mask 0x%llx%s%s)", np,
            (unsigned long long)LT_CL_DEVICE_MASK, *LT_CL_PLATFORM ? ", platform " : "",
            LT_CL_PLATFORM);
}

/* Build `src` for the library's device and create its kernels; 0 or an error code. */
static int lt_cl_build(const char *fn, const char *src, int n, const char *const *names,
                       lt_cl_h *kernels) {
  pthread_once(&lt_cl.once, lt_cl_setup);
  if (!lt_cl.ready) return lt_cl_fail(-1, "%s: %s", fn, lt_cl.why);
  lt_cl_int err = 0;
  lt_cl_h prg = lt_cl.CreateProgramWithSource(lt_cl.context, 1, &src, NULL, &err);
  if (err || !prg) return lt_cl_fail(err, "%s: clCreateProgramWithSource failed (%d)", fn, err);
  err = lt_cl.BuildProgram(prg, 1, &lt_cl.device, "", NULL, NULL);
  if (err) {
    char log[1536] = "";
    lt_cl.GetProgramBuildInfo(prg, lt_cl.device, LT_CL_PROGRAM_BUILD_LOG, sizeof log - 1, log,
                              NULL);
    return lt_cl_fail(err, "%s: the OpenCL compiler failed (%d): %s", fn, err, log);
  }
  for (int i = 0; i < n; ++i) {
    kernels[i] = lt_cl.CreateKernel(prg, names[i], &err);
    if (err || !kernels[i])
      return lt_cl_fail(err, "%s: clCreateKernel(%s) failed (%d)", fn, names[i], err);
  }
  return 0;
}

/* elem * dims[0] * ... bytes; SIZE_MAX when that overflows (no device takes such a buffer:
   its creation fails with an OpenCL error code) */
static size_t lt_cl_bytes(size_t elem, int n, const int64_t *dims) {
  size_t bytes = elem;
  for (int i = 0; i < n; ++i) {
    if (dims[i] <= 0) return 0;
    if (__builtin_mul_overflow(bytes, (uint64_t)dims[i], &bytes)) return SIZE_MAX;
  }
  return bytes;
}

static lt_cl_h lt_cl_buffer(const void *host, size_t bytes, lt_cl_int *err) {
  if (bytes == SIZE_MAX) {
    *err = -61;   /* CL_INVALID_BUFFER_SIZE */
    return NULL;
  }
  if (host && bytes)
    return lt_cl.CreateBuffer(lt_cl.context, LT_CL_MEM_READ_ONLY | LT_CL_MEM_COPY_HOST_PTR,
                              bytes, (void *)host, err);
  return lt_cl.CreateBuffer(lt_cl.context, LT_CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, err);
}

"""


def _c_lines(text: str) -> str:
    """``text`` as a C string literal, one source line per line."""
    lines = text.splitlines(keepends=True)
    return "\n".join(f"    {c_string(line)}" for line in lines) if lines else '    ""'


def runtime_source(prefix: str, target) -> CSource:
    """The shared runtime for the OpenCL functions of one library, with ``<prefix>_opencl_error``
    (the message of the calling thread's last failure); ``prefix`` is an identifier."""
    device = target.options.get("device")
    platform = target.options.get("platform")
    mask = _DEVICE_MASKS.get(device, "0xFFFFFFFFu")
    first = "(1u << 2)" if device is None else mask     # no -device: GPUs first
    plat = "" if platform in (None, True) else str(platform)
    text = (f"#define LT_CL_DEVICE_MASK {first}\n"
            f"#define LT_CL_DEVICE_ANY {1 if device is None else 0}\n"
            f"#define LT_CL_PLATFORM {c_string(plat)}\n" + loader_defines() +
            _RUNTIME.replace("/* LT_CL_LOADER */", LOADER_C) +
            f"const char *{prefix}_opencl_error(void) {{ return lt_cl_msg; }}\n")
    return CSource(text, f"const char *{prefix}_opencl_error(void);", frozenset(), False)


def _bytes(gen: CCodegen, dtype: str, shape) -> str:
    """The byte size of a buffer, in 64 bits with an overflow check (lt_cl_bytes)."""
    dims = [gen.expr.visit(x) for d in shape for x in _factors(simplify(_dim(d)))]
    return (f"lt_cl_bytes({np.dtype(dtype).itemsize}, {len(dims)}, "
            f"(const int64_t[]){{{', '.join(dims) or '1'}}})")


def _fail(code: str, what: str, *args: str) -> str:
    """``if (code) {...}``: record ``what`` (a printf format of our own; user text only among
    ``args``, as ``%s`` arguments) and jump to the cleanup."""
    extra = "".join(f", {a}" for a in args)
    return (f"if ({code}) {{ lt_err = lt_cl_fail(lt_err, {c_string(what)}{extra}, lt_err); "
            "goto lt_done; }")


def _launch(gen: CCodegen, fn: str, n: int, info, slot: dict) -> list[str]:
    """Set the arguments of kernel ``n`` and enqueue it."""
    dims = len(info.global_size)
    glob = ", ".join(f"(size_t)({gen.expr.visit(x)})" for x in info.global_size)
    body = ["  {", f"    size_t lt_global[{dims}] = {{{glob}}};"]
    if info.local_size is not None:
        loc = ", ".join(f"(size_t)({gen.expr.visit(x)})" for x in info.local_size)
        body.append(f"    size_t lt_local[{dims}] = {{{loc}}};")
    nonzero = " && ".join(f"lt_global[{d}]" for d in range(dims)) or "1"
    body.append(f"    if ({nonzero}) {{")
    knl = f"lt_cl_{fn}_kernels[{n}]"
    arg = 0
    for b in info.buffers:
        body.append(f"      if (!lt_err) lt_err = lt_cl.SetKernelArg({knl}, {arg}, "
                    f"sizeof(lt_cl_h), &lt_mem[{slot[b.uid]}]);")
        arg += 1
    for v in info.size_vars:
        body.append(f"      int64_t lt_arg{arg} = {gen.var_name(v)};")
        body.append(f"      if (!lt_err) lt_err = lt_cl.SetKernelArg({knl}, {arg}, "
                    f"sizeof(int64_t), &lt_arg{arg});")
        arg += 1
    local = "lt_local" if info.local_size is not None else "NULL"
    body += [f"      if (!lt_err) lt_err = lt_cl.EnqueueNDRangeKernel(lt_cl.queue, {knl}, "
             f"{dims}, NULL, lt_global, {local}, 0, NULL, NULL);",
             "      " + _fail("lt_err", "%s: launching kernel %s failed (%d)", c_string(fn),
                              c_string(info.name)),
             "    }", "  }"]
    return body


def _statics(module, fn: str) -> list[str]:
    """The program text, kernel names and build-once state of function ``fn``."""
    kernels = module.kernels
    k = max(1, len(kernels))
    names = ", ".join(c_string(info.name) for info in kernels)
    pre = f"lt_cl_{fn}"
    return [f"static const char {pre}_source[] =", _c_lines(module.source) + ";",
            f"static const char *const {pre}_names[{k}] = {{{names}}};",
            f"static lt_cl_h {pre}_kernels[{k}];",
            f"static int {pre}_err;",
            f"static char {pre}_why[2048];",
            f"static void {pre}_build(void) {{",
            f"  {pre}_err = lt_cl_build({c_string(fn)}, {pre}_source, {len(kernels)}, "
            f"{pre}_names, {pre}_kernels);",
            f"  if ({pre}_err) snprintf({pre}_why, sizeof {pre}_why, \"%s\", lt_cl_msg);",
            "}", ""]


def host_source(module) -> CSource:
    """The C host function of an OpenCL module (see the module docstring). User names reach
    the C text only as sanitized identifiers (parameters) and ``%s`` arguments; the host's own
    names start with ``lt_``, which no sanitized identifier does."""
    f = module.lowered
    gen = CCodegen()
    inputs = {k for k, t in enumerate(f.args) if isinstance(t.op, PlaceholderOp)}
    params = []
    for k, (t, b) in enumerate(zip(f.args, f.buffers)):
        const = "const " if k in inputs else ""
        params.append(f"{const}{dt.c_type(b.dtype)} *{gen.buf_name(b)}")
    for v in f.size_vars:
        params.append(f"int64_t {gen.var_name(v)}")
    fn, pre = f.name, f"lt_cl_{f.name}"
    bufs = list(f.buffers) + list(module.temporaries)
    slot = {b.uid: k for k, b in enumerate(bufs)}
    body = [f"int {fn}({', '.join(params)}) {{",
            "  static pthread_once_t lt_once = PTHREAD_ONCE_INIT;",
            f"  pthread_once(&lt_once, {pre}_build);",
            f"  if ({pre}_err) return lt_cl_fail({pre}_err, \"%s\", {pre}_why);",
            "  lt_cl_int lt_err = 0;",
            f"  lt_cl_h lt_mem[{len(bufs)}] = {{0}};",
            "  pthread_mutex_lock(&lt_cl.lock);"]
    for k, b in enumerate(bufs):
        host = gen.buf_name(b) if k in inputs else "NULL"
        body += [f"  lt_mem[{k}] = lt_cl_buffer({host}, {_bytes(gen, b.dtype, b.shape)}, "
                 "&lt_err);",
                 "  " + _fail("lt_err", "%s: clCreateBuffer failed (%d)", c_string(fn))]
    for n, info in enumerate(module.kernels):
        body += _launch(gen, fn, n, info, slot)
    for k, (t, b) in enumerate(zip(f.args, f.buffers)):
        if k in inputs:
            continue
        bytes_ = _bytes(gen, b.dtype, b.shape)
        body += [f"  if ({bytes_}) lt_err = lt_cl.EnqueueReadBuffer(lt_cl.queue, lt_mem[{k}], "
                 f"1, 0, {bytes_}, {gen.buf_name(b)}, 0, NULL, NULL);",
                 "  " + _fail("lt_err", "%s: reading %s back failed (%d)", c_string(fn),
                              c_string(t.name))]
    body += ["lt_done:",
             f"  for (int lt_i = 0; lt_i < {len(bufs)}; ++lt_i)",
             "    if (lt_mem[lt_i]) lt_cl.ReleaseMemObject(lt_mem[lt_i]);",
             "  pthread_mutex_unlock(&lt_cl.lock);",
             "  return lt_err;", "}", ""]
    sig = f"int {fn}({', '.join(params)})"
    return CSource("\n".join(_statics(module, fn) + body), sig + ";", frozenset(gen.minmax),
                   False)
