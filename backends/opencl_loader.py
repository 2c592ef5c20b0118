"""Finding the OpenCL platforms from exported C code: the ones pyopencl finds.

The host code of an exported OpenCL function (:mod:`.opencl_host`) opens an OpenCL ICD loader
with ``dlopen``. pyopencl's wheel brings its own loader (``pyopencl/.libs/libOpenCL-*.so``)
and PoCL (``libpocl-*.so`` and ``pocl.icd`` beside it), which a plain C program does not find:

* the wheel's loader (a fork of ocl-icd) reads ``$PYOPENCL_HOME/.libs`` besides
  ``/etc/OpenCL/vendors`` (or ``$OCL_ICD_VENDORS``) and crashes in ``clGetPlatformIDs`` when
  ``PYOPENCL_HOME`` is unset (pyopencl sets it when imported);
* ``pocl.icd`` names its driver without a directory, which every ICD loader resolves through
  the library search path only, not next to the ``.icd`` file.

So the runtime (:data:`LOADER_C`) tries, in order, the loader in ``$LOOPTUNE_OPENCL_LIBRARY``
alone when that is set; else pyopencl's bundled loader, as recorded when the library was
exported (:func:`pyopencl_bundle`; skipped when it is gone), then the system's
``libOpenCL.so.1`` / ``libOpenCL.so``. It uses the first that lists at least one platform.
Before asking a loader, it loads every driver that an ``.icd`` file in ``$OCL_ICD_VENDORS``
(a directory or one file) or in the bundle's directory names without a directory, from beside
that ``.icd`` file: the loader's own ``dlopen`` of the bare name then finds it loaded. And it
sets ``PYOPENCL_HOME`` (when unset) to the recorded pyopencl folder. A machine without
pyopencl needs an installed loader and driver (Debian: ``pocl-opencl-icd``) or
``LOOPTUNE_OPENCL_LIBRARY``.
"""
from __future__ import annotations

import glob
import importlib.util
import os

from .sanitize import c_string


def pyopencl_bundle() -> tuple[str, str]:
    """(pyopencl's package folder, the ICD loader its wheel bundles), or empty strings when
    pyopencl is not installed or brings no loader of its own."""
    spec = importlib.util.find_spec("pyopencl")
    if spec is None or not spec.submodule_search_locations:
        return "", ""
    home = os.path.abspath(list(spec.submodule_search_locations)[0])
    loaders = sorted(glob.glob(os.path.join(home, ".libs", "libOpenCL*.so*")))
    return (home, loaders[0]) if loaders else ("", "")


def loader_defines() -> str:
    """The ``#define``s that record this machine's pyopencl bundle for :data:`LOADER_C`."""
    home, loader = pyopencl_bundle()
    return (f"#define LT_CL_BUNDLE_HOME {c_string(home)}\n"
            f"#define LT_CL_BUNDLE_LOADER {c_string(loader)}\n")


LOADER_C = r"""
#include <dirent.h>
#include <unistd.h>

/* Load the driver that the .icd file dir/file names without a directory, from dir. */
static void lt_cl_preload_icd(const char *dir, const char *file) {
  char path[4096], lib[1024] = "";
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (!fgets(lib, sizeof lib, f)) lib[0] = 0;
  fclose(f);
  size_t n = strcspn(lib, "\r\n");
  while (n && isspace((unsigned char)lib[n - 1])) --n;
  lib[n] = 0;
  if (!lib[0] || strchr(lib, '/')) return;
  snprintf(path, sizeof path, "%s/%s", dir, lib);
  if (access(path, R_OK) == 0) dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* The same for every .icd file of a directory, or for one .icd file. */
static void lt_cl_preload(const char *where) {
  if (!where || !*where) return;
  size_t n = strlen(where);
  if (n > 4 && strcmp(where + n - 4, ".icd") == 0) {
    const char *slash = strrchr(where, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - where) : 1, slash ? where : ".");
    lt_cl_preload_icd(dir, slash ? slash + 1 : where);
    return;
  }
  DIR *d = opendir(where);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    size_t m = strlen(e->d_name);
    if (m > 4 && strcmp(e->d_name + m - 4, ".icd") == 0) lt_cl_preload_icd(where, e->d_name);
  }
  closedir(d);
}

/* Open the loader `name`; its number of platforms (0: unusable, said in `tried`). */
static lt_cl_uint lt_cl_open(const char *name, char *tried, size_t cap) {
  size_t used = strlen(tried);
  const char *sep = used ? "; " : "";
  void *lib = dlopen(name, RTLD_NOW);
  if (!lib) {
    snprintf(tried + used, cap - used, "%scannot load the OpenCL loader %s (%s)", sep, name,
             dlerror());
    return 0;
  }
#define LT_CL_SYM(fn)                                                                    \
  if (!(*(void **)&lt_cl.fn = dlsym(lib, "cl" #fn))) {                                  \
    snprintf(tried + used, cap - used, "%sthe OpenCL loader %s has no cl" #fn, sep, name); \
    return 0;                                                                            \
  }
  LT_CL_SYM(GetPlatformIDs) LT_CL_SYM(GetPlatformInfo) LT_CL_SYM(GetDeviceIDs)
  LT_CL_SYM(GetDeviceInfo) LT_CL_SYM(CreateContext) LT_CL_SYM(CreateCommandQueue)
  LT_CL_SYM(CreateProgramWithSource) LT_CL_SYM(BuildProgram) LT_CL_SYM(GetProgramBuildInfo)
  LT_CL_SYM(CreateKernel) LT_CL_SYM(CreateBuffer) LT_CL_SYM(SetKernelArg)
  LT_CL_SYM(EnqueueNDRangeKernel) LT_CL_SYM(EnqueueReadBuffer) LT_CL_SYM(ReleaseMemObject)
  LT_CL_SYM(ReleaseProgram) LT_CL_SYM(ReleaseContext) LT_CL_SYM(Finish)
#undef LT_CL_SYM
  lt_cl_uint np = 0;
  if (lt_cl.GetPlatformIDs(0, NULL, &np) != 0) np = 0;
  snprintf(tried + used, cap - used, "%s%u platform(s) from %s", sep, np, name);
  if (np) lt_cl.lib = lib;
  return np;
}

/* pyopencl's bundled loader as recorded at export: it needs PYOPENCL_HOME (and reads its .libs,
   whose drivers the loader would not find by their bare names) */
static lt_cl_uint lt_cl_open_bundle(const char *name, char *tried, size_t cap) {
  if (*LT_CL_BUNDLE_HOME) setenv("PYOPENCL_HOME", LT_CL_BUNDLE_HOME, 0);
  const char *home = getenv("PYOPENCL_HOME");
  if (home) {
    char libs[4096];
    snprintf(libs, sizeof libs, "%s/.libs", home);
    lt_cl_preload(libs);
  }
  return lt_cl_open(name, tried, cap);
}

/* The first loader that lists a platform (see looptune/backends/opencl_loader.py); 0 and the
   reason in lt_cl.why if none does. */
static int lt_cl_find_loader(void) {
  char tried[1024] = "";
  const char *env = getenv("LOOPTUNE_OPENCL_LIBRARY");
  lt_cl_preload(getenv("OCL_ICD_VENDORS"));
  if (env) {
    lt_cl_open_bundle(env, tried, sizeof tried);
  } else {
    if (*LT_CL_BUNDLE_LOADER && access(LT_CL_BUNDLE_LOADER, R_OK) == 0)
      lt_cl_open_bundle(LT_CL_BUNDLE_LOADER, tried, sizeof tried);
    if (!lt_cl.lib) lt_cl_open("libOpenCL.so.1", tried, sizeof tried);
    if (!lt_cl.lib) lt_cl_open("libOpenCL.so", tried, sizeof tried);
  }
  if (lt_cl.lib) return 1;
  lt_cl_why("no OpenCL platform: %s; install an OpenCL ICD loader and driver (pip install "
            "pyopencl brings PoCL; Debian: apt-get install pocl-opencl-icd), set "
            "OCL_ICD_VENDORS to a directory of .icd files, or set LOOPTUNE_OPENCL_LIBRARY to "
            "the path of libOpenCL.so", tried);
  return 0;
}
"""
