"""Export targets: the x86-64 micro-architecture levels and a multi-target library's dispatch.

A library exported with ``-march=native`` runs only on CPUs with the exporting machine's
features (one exported on an AVX-512 machine dies with SIGILL on an AVX2 one). The x86-64
psABI levels name portable feature sets instead:

=========== =================================================================== ==============
level       adds                                                                 CPUs (about)
=========== =================================================================== ==============
x86-64      SSE2 (every x86-64 CPU)                                              all
x86-64-v2   SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT, CMPXCHG16B, LAHF/SAHF           2009 on
x86-64-v3   AVX, AVX2, FMA, BMI1, BMI2, F16C, LZCNT, MOVBE (and the OS saving    2015 on
            the YMM registers)
x86-64-v4   AVX-512 F, BW, CD, DQ, VL (and the OS saving the ZMM registers)      servers, some
=========== =================================================================== ==============

A multi-target library (as Halide's multi-target generators) holds one variant of every
function per level, each compiled with ``-march=<level>``, and exports the plain symbol as a
dispatcher: at the first call it reads the CPU's features (cpuid, xgetbv), picks the highest
level of the library that the CPU supports (capped by ``$LOOPTUNE_MAX_MARCH``), and every call
after that goes to that level's variant.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Sequence

from ..errors import BuildError

LEVELS = {"x86-64": 1, "x86-64-v2": 2, "x86-64-v3": 3, "x86-64-v4": 4}
CHOICES = (*LEVELS, "native")
ERR_CPU = 2          # a multi-target function's return value when no variant runs here
MAX_MARCH_ENV = "LOOPTUNE_MAX_MARCH"

_WHAT = {1: "any x86-64 CPU (SSE2)", 2: "x86-64 CPUs with SSE4.2 and POPCNT (x86-64-v2 and up)",
         3: "x86-64 CPUs with AVX2, FMA and BMI2 (x86-64-v3 and up)",
         4: "x86-64 CPUs with AVX-512 F/BW/CD/DQ/VL (x86-64-v4)"}


def parse_march(march, where: str = "export_library") -> list[str] | None:
    """``march`` as a list of export targets: ``None`` (the functions' own ``-march``), one
    name (``["x86-64-v2"]``), or several levels, sorted lowest first (a multi-target export).
    Accepts a name, a comma-separated string or a sequence; BuildError for anything else."""
    if march is None:
        return None
    names = march.split(",") if isinstance(march, str) else march
    if not isinstance(names, Sequence) or not names or \
            not all(isinstance(n, str) for n in names):
        raise BuildError(f"{where}: march= takes a name or a list of names from "
                         f"{', '.join(CHOICES)}; got {march!r}")
    names = [n.strip() for n in names]
    bad = [n for n in names if n not in CHOICES]
    if bad:
        raise BuildError(f"{where}: unknown march {', '.join(repr(n) for n in bad)}; use one of "
                         f"{', '.join(CHOICES)}, or several x86-64 levels for a library that "
                         "picks the best one at run time (e.g. x86-64-v2,x86-64-v3,x86-64-v4)")
    if len(set(names)) != len(names):
        raise BuildError(f"{where}: march lists a target twice; got {march!r}; name each once")
    if len(names) > 1 and "native" in names:
        raise BuildError(f"{where}: a multi-target library dispatches among the x86-64 levels, "
                         f"and 'native' is no level; got {march!r}; list levels only (e.g. "
                         "x86-64-v2,x86-64-v3,x86-64-v4), or export -march=native alone")
    return sorted(names, key=lambda n: LEVELS.get(n, 0))


def describe(march: str, resolved: str | None = None) -> str:
    """What a library built with ``-march=<march>`` runs on, for its header."""
    if march in LEVELS:
        return f"-march={march}: runs on {_WHAT[LEVELS[march]]}"
    if march == "native":
        return (f"-march=native, resolved on the exporting host to {resolved or 'its CPU'}: it "
                "may die with SIGILL (illegal instruction) on CPUs that lack that host's "
                "features; export with march='x86-64-v2' (or a multi-target list of levels) "
                "for a library shipped to other machines")
    return f"-march={march}"


def variant_symbol(name: str, level: str) -> str:
    """The C symbol of function ``name``'s variant for ``level`` (hidden in the library)."""
    return f"{name}__lt_{level.replace('-', '_')}"


def rename_function(text: str, name: str, new: str) -> str:
    """Generated C text of function ``name`` (its declaration or definition, which starts
    with the signature) with the function called ``new``."""
    head = f"int {name}("
    assert text.startswith(head), f"generated C of {name} does not start with {head!r}"
    return f"int {new}(" + text[len(head):]


def parameter_names(declaration: str) -> list[str]:
    """The parameter names of a generated declaration ``int f(const float *restrict A, ...);``."""
    inner = declaration[declaration.index("(") + 1:declaration.rindex(")")]
    names = [re.search(r"(\w+)\s*$", p).group(1) for p in inner.split(",") if p.strip()]
    return [] if names == ["void"] else names


CPU_LEVEL_C = r"""#include <cpuid.h>
#include <stdlib.h>
#include <string.h>

/* this CPU's x86-64 psABI level (1-4): cpuid feature bits, xgetbv for the OS's register
   saving (an AVX-capable CPU whose OS does not save YMM/ZMM state must not run AVX code) */
static int lt_cpu_level(void) {
  unsigned a, b, c, d, c1, b7 = 0, c81 = 0;
  if (!__get_cpuid(1, &a, &b, &c1, &d)) return 1;
  if (!__get_cpuid(0x80000001u, &a, &b, &c81, &d)) c81 = 0;
  if (__get_cpuid_max(0, 0) >= 7) __cpuid_count(7, 0, a, b7, c, d);
  /* SSE3, SSSE3, CMPXCHG16B, SSE4.1, SSE4.2, POPCNT; LAHF/SAHF */
  const unsigned v2 = 1u | 1u << 9 | 1u << 13 | 1u << 19 | 1u << 20 | 1u << 23;
  if ((c1 & v2) != v2 || !(c81 & 1u)) return 1;
  unsigned long long xcr0 = 0;
  if (c1 & 1u << 27) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (unsigned long long)hi << 32 | lo;
  }
  /* FMA, MOVBE, OSXSAVE, AVX, F16C; BMI1, AVX2, BMI2; LZCNT; SSE and YMM state */
  const unsigned v3c = 1u << 12 | 1u << 22 | 1u << 27 | 1u << 28 | 1u << 29;
  const unsigned v3b = 1u << 3 | 1u << 5 | 1u << 8;
  if ((c1 & v3c) != v3c || (b7 & v3b) != v3b || !(c81 & 1u << 5) || (xcr0 & 6u) != 6u)
    return 2;
  /* AVX-512 F, DQ, CD, BW, VL; opmask and ZMM state */
  const unsigned v4b = 1u << 16 | 1u << 17 | 1u << 28 | 1u << 30 | 1u << 31;
  if ((b7 & v4b) != v4b || (xcr0 & 0xe6u) != 0xe6u) return 3;
  return 4;
}
"""


def dispatcher_source(stem: str, levels: list[str], decls: list[tuple[str, str]]) -> str:
    """The dispatching translation unit: ``decls`` are (name, public declaration) of each
    function; each calls ``variant_symbol(name, level)`` of the chosen level."""
    nums = sorted((LEVELS[lv] for lv in levels), reverse=True)
    caps = "\n".join(f'    else if (!strcmp(e, "{lv}")) cap = {n};' for lv, n in LEVELS.items())
    out = [CPU_LEVEL_C, f"#define LT_ERR_CPU {ERR_CPU}",
           f"static const int lt_levels[] = {{{', '.join(map(str, nums))}}};",
           "static int lt_chosen;   /* 0: not chosen yet; else the level, or -1 for none */",
           "",
           "/* the library's level that this process runs: chosen once, at the first call */",
           "static int lt_level(void) {",
           "  int v = __atomic_load_n(&lt_chosen, __ATOMIC_ACQUIRE);",
           "  if (v) return v;",
           '  int cpu = lt_cpu_level(), cap = 4, best = -1;',
           f'  const char *e = getenv("{MAX_MARCH_ENV}");',
           "  if (e) {",
           "    if (0) {}", caps, "  }",
           f"  for (int k = 0; k < {len(nums)}; ++k)",
           "    if (lt_levels[k] <= cpu && lt_levels[k] <= cap) { best = lt_levels[k]; break; }",
           "  __atomic_store_n(&lt_chosen, best, __ATOMIC_RELEASE);",
           "  return best;",
           "}", "",
           f"const char *{stem}_target(void) {{",
           "  switch (lt_level()) {"]
    out += [f'  case {LEVELS[lv]}: return "{lv}";' for lv in levels]
    out += ["  default: return NULL;", "  }", "}", ""]
    for name, decl in decls:
        args = ", ".join(parameter_names(decl))
        out += [rename_function(decl, name, variant_symbol(name, lv)) for lv in levels]
        out += [decl.rstrip(";").replace("*restrict ", "*") + " {", "  switch (lt_level()) {"]
        out += [f"  case {LEVELS[lv]}: return {variant_symbol(name, lv)}({args});"
                for lv in reversed(levels)]
        out += ["  default: return LT_ERR_CPU;", "  }", "}", ""]
    return "\n".join(out)


def query_declaration(stem: str) -> str:
    return f"const char *{stem}_target(void);"


@functools.lru_cache(maxsize=None)
def resolved_march(cc: str, march: str) -> str:
    """What ``-march=<march>`` means to compiler ``cc`` here (``native`` -> ``znver3``, ...);
    ``march`` itself when the compiler does not say."""
    try:
        out = subprocess.run([cc, f"-march={march}", "-Q", "--help=target"],
                             capture_output=True, text=True, timeout=30, check=False).stdout
        m = re.search(r"^\s*-march=\s+(\S+)", out, re.M)
        if m:
            return m.group(1)
        out = subprocess.run([cc, f"-march={march}", "-###", "-x", "c", "-c", os.devnull],
                             capture_output=True, text=True, timeout=30, check=False).stderr
        m = re.search(r'"-target-cpu" "([^"]+)"', out)       # clang
        return m.group(1) if m else march
    except (OSError, subprocess.SubprocessError):
        return march
