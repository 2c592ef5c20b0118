"""C code generation from a lowered loop nest.

Loops become ``for`` over ``int64_t``; parallel loops get ``#pragma omp parallel for``,
vectorized loops ``#pragma omp simd`` (streamed loops: chunks into an aligned tile streamed
with non-temporal stores, backends/c_stream.py; compiled with ``-fopenmp-simd`` at least, so gcc really
vectorizes them), unrolled loops of non-constant extent ``#pragma GCC unroll``. Intermediate
buffers live on the stack when small and constant-sized, else on the heap (aligned; freed on
every path). Floor division uses plain ``/`` and ``%`` where the numerator is provably
non-negative, a helper otherwise.
"""
from __future__ import annotations

import ctypes.util
import functools
import math
import platform
from dataclasses import dataclass

from ..errors import BuildError
from ..lang import dtype as dt
from ..lang.expr import BinKind, BinOp, Cast, Const, Expr, Var
from ..lang.intrinsics import INTRINSICS, render
from ..lang.simplify import const_bound, simplify, upper_bound
from ..lang.visitor import ExprVisitor
from ..schedule.lower import LoweredFunc
from ..schedule.ranges import RangeContext
from ..schedule.stmt import Buffer, For, ForKind, StmtVisitor
from .c_math import divf_by_const, helper_source
from .c_stream import emit_streamed, streamable
from .sanitize import c_identifier, is_reserved

STACK_LIMIT = 8 * 1024   # bytes; larger or symbolic buffers go to the heap (big stack arrays
# next to a register tile keep gcc from promoting the tile to registers: 4x slower)
PAGE = 4096              # stack buffers of a page or more start half a page from the output
# (mod 4 KiB) to avoid 4K aliasing; smaller ones (register tiles) stay plain arrays

# floor division and modulo with Python's semantics (shared with the OpenCL prelude)
FLOOR_HELPERS = r"""static inline int64_t lt_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t lt_floormod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
"""

PRELUDE = r"""#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <math.h>

""" + FLOOR_HELPERS + r"""/* error codes a generated function returns; the first failure is kept */
#define LT_ERR_ALLOC 1
#define LT_ERR_BOUNDS 256
static inline void lt_fail(int *status, int code) {
  int ok = 0;
  __atomic_compare_exchange_n(status, &ok, code, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
/* the bytes of an intermediate of elem * dims[0] * ..., rounded up to whole 64-byte lines
   (at least one); 0 when the size overflows size_t */
static inline size_t lt_bytes(size_t elem, int n, const int64_t *dims) {
  size_t bytes = elem;
  for (int i = 0; i < n; ++i) {
    if (dims[i] <= 0) { bytes = 0; break; }
    if (__builtin_mul_overflow(bytes, (uint64_t)dims[i], &bytes)) return 0;
  }
  if (bytes > SIZE_MAX - 63) return 0;
  return bytes ? (bytes + 63) / 64 * 64 : 64;
}
/* an intermediate, 64-byte aligned; NULL (never abort) when the size overflows size_t or
   memory is exhausted */
static inline void *lt_alloc(size_t elem, int n, const int64_t *dims) {
  size_t bytes = lt_bytes(elem, n, dims);
  return bytes ? aligned_alloc(64, bytes) : NULL;
}
/* Workspaces: the heap intermediates of a function stay allocated between its calls (fresh
   pages at every call cost a page fault per 4 KiB: 0.55 ms of a 0.72 ms Winograd conv2d whose
   3.7 MB of intermediates glibc unmapped after each call). An allocation site has
   LT_WS_SLOTS blocks; a call takes an idle one with an atomic exchange (concurrent calls and
   the threads of a parallel loop take different ones), grows it when it is too small and
   gives it back; when every block is taken it allocates its own and frees it. The library
   frees the idle blocks when unloaded (and lt_release_workspaces() where it defines it). */
#define LT_WS_SLOTS 8
typedef struct { int busy; size_t cap; void *p; } lt_ws;
static inline void *lt_ws_take(lt_ws *site, size_t elem, int n, const int64_t *dims,
                               lt_ws **slot) {
  size_t bytes = lt_bytes(elem, n, dims);
  *slot = NULL;
  if (!bytes) return NULL;
  for (int i = 0; i < LT_WS_SLOTS; ++i) {
    lt_ws *w = &site[i];
    if (__atomic_exchange_n(&w->busy, 1, __ATOMIC_ACQUIRE)) continue;
    if (w->cap < bytes) {
      free(w->p);
      w->p = aligned_alloc(64, bytes);
      w->cap = w->p ? bytes : 0;
      if (!w->p) { __atomic_store_n(&w->busy, 0, __ATOMIC_RELEASE); return NULL; }
    }
    *slot = w;
    return w->p;
  }
  return aligned_alloc(64, bytes);
}
static inline void lt_ws_give(lt_ws *slot, void *p) {
  if (slot) __atomic_store_n(&slot->busy, 0, __ATOMIC_RELEASE);
  else free(p);
}
/* frees the idle blocks of n slots (a block in use by a call stays) */
static inline void lt_ws_free(lt_ws *pool, int n) {
  for (int i = 0; i < n; ++i) {
    if (__atomic_exchange_n(&pool[i].busy, 1, __ATOMIC_ACQUIRE)) continue;
    free(pool[i].p);
    pool[i].p = NULL;
    pool[i].cap = 0;
    __atomic_store_n(&pool[i].busy, 0, __ATOMIC_RELEASE);
  }
}
/* -bounds-check: i if 0 <= i < n, else -1 and the error LT_ERR_BOUNDS + site */
static inline int64_t lt_chk(int64_t i, int64_t n, int site, int *status) {
  if (__builtin_expect(i >= 0 && i < n, 1)) return i;
  lt_fail(status, LT_ERR_BOUNDS + site);
  return -1;
}
"""

_WRAP_OPS = (BinKind.ADD, BinKind.SUB, BinKind.MUL)
_PREFETCH_UNROLLED_BYTES = 512   # a prefetched row up to 8 lines: no loop (visit_Prefetch)


class _ReadsMemory(ExprVisitor):
    found = False

    def visit_BufferLoad(self, e):
        self.found = True


def _reads_memory(e: Expr) -> bool:
    """Is ``e`` data arithmetic (it loads values) rather than index arithmetic?"""
    v = _ReadsMemory()
    v.visit(e)
    return v.found


class _CExpr(ExprVisitor):
    def __init__(self, gen: CCodegen):
        self.gen = gen

    def visit_Const(self, e):
        if e.dtype == "bool":
            return "true" if e.value else "false"
        if dt.is_float(e.dtype):
            v = e.value
            suffix = "f" if e.dtype == "float32" else ""
            if math.isnan(v):
                return "NAN"
            if math.isinf(v):
                return ("-" if v < 0 else "") + "INFINITY"
            return f"{v!r}{suffix}" if e.dtype != "float16" else f"((_Float16){v!r})"
        if e.dtype == "int64" and e.value == -(2**63):
            return "INT64_MIN"
        if e.dtype.startswith("uint"):
            return f"{e.value}u" if e.dtype != "uint64" else f"{e.value}ull"
        return f"{e.value}" if -(2**31) < e.value < 2**31 else f"{e.value}ll"

    def visit_Var(self, e):
        return self.gen.var_name(e)

    def visit_BinOp(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        op, d = e.op, e.a.dtype
        if op is BinKind.FLOORDIV:
            if dt.is_float(d):
                return f"{INTRINSICS['floor'].c_name(d)}({a} / {b})"
            return self.gen.int_div(e, a, b, "/", "lt_floordiv")
        if op is BinKind.FLOORMOD:
            if dt.is_float(d):
                return f"({a} - {INTRINSICS['floor'].c_name(d)}({a} / {b}) * {b})"
            return self.gen.int_div(e, a, b, "%", "lt_floormod")
        if op in (BinKind.MIN, BinKind.MAX):
            d = "int64" if d == "int32" else d  # index arithmetic runs in int64_t
            self.gen.minmax.add(d)
            return f"lt_{op.value}_{dt.c_type(d)}({a}, {b})"
        if op is BinKind.DIV and d == "float32" and isinstance(e.b, Const):
            fast = self.gen.div_by_const(a, e.b.value)
            if fast is not None:
                return fast
        text = f"({a} {op.value} {b})"
        if d in ("int8", "int16", "uint8", "uint16") and not (op.is_compare or op.is_logical):
            return f"(({dt.c_type(d)}){text})"  # wrap around as numpy does
        if d in ("int32", "int64") and op in _WRAP_OPS and _reads_memory(e):
            # data arithmetic wraps as in numpy; signed overflow would be undefined in C
            u = "uint32_t" if d == "int32" else "uint64_t"
            return f"(({dt.c_type(d)})(({u}){a} {op.value} ({u}){b}))"
        return text

    def visit_Not(self, e):
        return f"(!{self.visit(e.a)})"

    def visit_Select(self, e):
        return f"({self.visit(e.cond)} ? {self.visit(e.t)} : {self.visit(e.f)})"

    def visit_Cast(self, e):
        v = self.visit(e.value)
        if e.dtype == "bool":
            return f"(({v}) != 0)"
        return f"(({dt.c_type(e.dtype)})({v}))"

    def visit_Call(self, e):
        row = INTRINSICS[e.name]
        args = [self.visit(a) for a in e.args]
        fn = functools.partial(self.gen.math_function, dtype=e.dtype)
        return render(row, args, e.dtype, None if row.c is None else fn(row.name), fn)

    def visit_BufferLoad(self, e):
        if self.gen.bounds_check and any(_reads_memory(i) for i in e.indices):
            return self.gen.checked_load(e)
        return f"{self.gen.buf_name(e.buffer)}[{self.gen.flat(e.buffer, e.indices)}]"

    def visit_Load(self, e):
        raise AssertionError(f"unlowered load of {e.tensor.name} reached the C backend")

    def visit_Reduce(self, e):
        raise AssertionError("a Reduce reached the C backend")


class CCodegen(StmtVisitor):
    """Turns a LoweredFunc into a C translation unit with one exported function."""

    def __init__(self, threads: int | None = None, bounds_check: bool = False,
                 libm_exp: bool = False, ieee_div: bool = False, fast_math: bool = False,
                 alloc_per_call: bool = False):
        self.lines: list[str] = []
        self.alloc_per_call = alloc_per_call
        self.pool = "lt_ws_pool"         # the function's workspaces (named in function())
        self.workspaces = 0              # heap allocation sites with a kept workspace
        self.bounds_check = bounds_check
        self.libm_exp = libm_exp
        self.ieee_div = ieee_div
        self.fast_math = fast_math
        self.helpers: set[str] = set()
        self.checks: list[BoundsCheck] = []
        self.depth = 1
        self.names: dict[tuple, str] = {}
        self.used: set[str] = set()
        self.ranges = RangeContext()     # facts of the loops and lets around the statement
        self.minmax: set[str] = set()
        self.math: set[str] = set()
        self.threads = threads
        self.in_parallel = 0
        self.uses_parallel = False
        self.streams = 0                 # streamed loops emitted (each needs a fence after)
        self.page_ref: str | None = None   # the output that page-sized stack buffers avoid
        self.expr = _CExpr(self)

    # ---- naming ------------------------------------------------------------------------

    def _unique(self, key: tuple, name: str) -> str:
        if key not in self.names:
            base, n = c_identifier(name), 1
            out = base
            while out in self.used or is_reserved(out):
                out, n = f"{base}_{n}", n + 1
            self.used.add(out)
            self.names[key] = out
        return self.names[key]

    def var_name(self, v: Var) -> str:
        return self._unique(("v", v.uid), v.name)

    def buf_name(self, b: Buffer) -> str:
        return self._unique(("b", b.uid), b.name)

    def math_function(self, name: str, dtype: str) -> str:
        """The C function computing the intrinsic ``name`` in ``dtype``: its inline float32
        helper (``lt_expf``, unless -libm-exp), else the C library's."""
        row = INTRINSICS[name]
        if row.c_fast_f32 is not None and dtype == "float32" and not self.libm_exp:
            self.helpers.add(row.c_fast_f32)
            return row.c_fast_f32
        fn = row.c_name(dtype)
        self.math.add(fn)
        return fn

    # ---- expressions -------------------------------------------------------------------

    def div_by_const(self, a: str, c: float) -> str | None:
        """float32 ``a / c`` for a constant ``c`` without a division (backends/c_math.py:
        a multiply when 1/c is exact, else lt_divf; with -fast-math a multiply by RN(1/c),
        what gcc's -ffast-math makes of a division, within 1.5 ulp), or None to divide
        (-ieee-div, or a c outside lt_divf's range)."""
        plan = None if self.ieee_div else divf_by_const(c)
        if plan is None:
            return None
        kind, rc = plan
        rc_text = self.expr.visit(Const(rc, "float32"))
        if kind == "mul" or self.fast_math:
            return f"({a} * {rc_text})"
        self.helpers.add("lt_divf")
        return f"lt_divf({a}, {self.expr.visit(Const(c, 'float32'))}, {rc_text})"

    def int_div(self, e, a: str, b: str, cop: str, helper: str) -> str:
        lo, _ = const_bound(e.a, self.ranges.facts)
        if isinstance(e.b, Const) and e.b.value > 0 and lo is not None and lo >= 0:
            return f"({a} {cop} {b})"
        return f"{helper}({a}, {b})"

    def flat(self, buf: Buffer, indices) -> str:
        idx: Expr | None = None
        for d, i in enumerate(indices):
            idx = i if idx is None else idx * _dim(buf.shape[d]) + i
        return self.expr.visit(simplify(idx if idx is not None else Const(0, "int32"),
                                        self.ranges.facts))

    def checked_load(self, e) -> str:
        """``buf[...]`` whose data-dependent indices are checked against their dimension at
        run time (-bounds-check): an index out of range records the error LT_ERR_BOUNDS + site
        and the load yields 0 instead of reading outside the buffer."""
        buf = e.buffer
        name = self.buf_name(buf)
        idx, decls = [], []
        for d, i in enumerate(e.indices):
            if _reads_memory(i):
                while isinstance(i, Cast) and dt.is_int(i.dtype) and dt.is_int(i.value.dtype):
                    i = i.value             # check the index before it narrows to int32
            text = self.expr.visit(simplify(i, self.ranges.facts))
            if _reads_memory(i):
                site = len(self.checks)
                self.checks.append(BoundsCheck(buf.name, d, str(i), str(buf.shape[d])))
                ext = self.expr.visit(simplify(_dim(buf.shape[d])))
                text = f"lt_chk({text}, {ext}, {site}, &lt_status)"
            decls.append(f"lt_i{d} = {text}")
            idx.append(f"lt_i{d}")
        flat = idx[0]
        for d in range(1, len(idx)):
            flat = f"({flat} * {self.expr.visit(simplify(_dim(buf.shape[d])))} + {idx[d]})"
        bad = " | ".join(idx)
        return (f"(__extension__ ({{ const int64_t {', '.join(decls)}; "
                f"({bad}) < 0 ? ({dt.c_type(buf.dtype)})0 : {name}[{flat}]; }}))")

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    # ---- statements --------------------------------------------------------------------

    def visit_For(self, s: For):
        if s.kind is ForKind.THREAD:
            raise BuildError(f"loop '{s.var.name}' is bound to {s.tag}, which only the opencl "
                             "target supports; build with target='opencl' or drop the bind")
        if s.kind is ForKind.STREAMED and streamable(s):
            return emit_streamed(self, s)
        v = self.var_name(s.var)
        lo, ext = self.expr.visit(s.min), self.expr.visit(s.extent)
        ub = upper_bound(s.extent, self.ranges.facts)
        self.ranges.push_loop(s.var, s.min, s.extent)
        streams = self.streams
        if s.kind is ForKind.PARALLEL:
            if self.in_parallel == 0:
                nt = f" num_threads({self.threads})" if self.threads else ""
                self.emit(f"#pragma omp parallel for schedule(static){nt}")
                self.uses_parallel = True
            self.in_parallel += 1
        elif s.kind in (ForKind.VECTORIZED, ForKind.STREAMED):  # streamed with guards: SIMD
            self.emit("#pragma omp simd")
        elif s.kind is ForKind.UNROLLED:
            self.emit(f"#pragma GCC unroll {min(ub or 8, 64)}")
        end = ext if lo == "0" else f"{lo} + {ext}"
        self.emit(f"for (int64_t {v} = {lo}; {v} < {end}; ++{v}) {{")
        self.depth += 1
        self.visit(s.body)
        if s.kind is ForKind.PARALLEL and self.in_parallel == 1 and self.streams > streams:
            self.emit("lt_sfence();")   # this thread's streaming stores, before the barrier
        self.depth -= 1
        self.emit("}")
        if s.kind is ForKind.PARALLEL:
            self.in_parallel -= 1
        self.ranges.pop()

    def visit_IfThenElse(self, s):
        self.emit(f"if ({self.expr.visit(s.cond)}) {{")
        self.depth += 1
        self.visit(s.then)
        self.depth -= 1
        if s.orelse is not None:
            self.emit("} else {")
            self.depth += 1
            self.visit(s.orelse)
            self.depth -= 1
        self.emit("}")

    def visit_Store(self, s):
        self.emit(f"{self.buf_name(s.buffer)}[{self.flat(s.buffer, s.indices)}] = "
                  f"{self.expr.visit(s.value)};")

    def visit_Prefetch(self, s):
        """Every 64-byte line of the row: a row of a few lines (a constant count) as that many
        ``__builtin_prefetch`` and one for its last byte (the row may start inside a line),
        no loop and no compare; else the helper's loop (c_math.PREFETCH)."""
        n = simplify(s.count, self.ranges.facts)
        item = dt.itemsize(s.buffer.dtype)
        base = f"(uintptr_t){self.buf_name(s.buffer)}"
        off = f"(int64_t)({self.flat(s.buffer, s.indices)}) * {item}"
        if isinstance(n, Const) and 0 < n.value * item <= _PREFETCH_UNROLLED_BYTES:
            nbytes = int(n.value) * item
            at = [f"{64 * i}" for i in range(-(-nbytes // 64))] + [f"{nbytes - 1}"]
            self.emit(f"{{ const uintptr_t lt_pf = {base} + (uintptr_t)({off});")
            for a in dict.fromkeys(at):
                self.emit(f"  __builtin_prefetch((const void *)(lt_pf + {a}), 0, 3);")
            self.emit("}")
            return
        if isinstance(n, Const) and n.value <= 0:
            return
        self.helpers.add("lt_prefetch")
        self.emit(f"lt_prefetch({base}, {off}, (int64_t)({self.expr.visit(n)}) * {item});")

    def visit_LetStmt(self, s):
        self.emit(f"const int64_t {self.var_name(s.var)} = {self.expr.visit(s.value)};")
        with self.ranges.let(s.var, s.value):
            self.visit(s.body)

    def visit_Allocate(self, s):
        b = s.buffer
        name, ctype = self.buf_name(b), dt.c_type(b.dtype)
        size: Expr = Const(1, "int32")
        for d in b.shape:
            size = size * _dim(d)
        size = simplify(size)
        item = dt.itemsize(b.dtype)
        if isinstance(size, Const) and self.page_ref is not None and \
                PAGE <= size.value * item <= STACK_LIMIT - PAGE:
            # a page or more: placed half a page from the output, modulo 4 KiB (c_math.py)
            self.helpers.add("lt_page_skew")
            store = self._unique(("page", id(b)), f"{name}_page")
            self.emit("{")
            self.emit(f"{ctype} {store}[{size.value + PAGE // item}] "
                      "__attribute__((aligned(64)));")
            self.emit(f"{ctype} *restrict {name} = ({ctype} *)__builtin_assume_aligned("
                      f"{store} + lt_page_skew({store}, {self.page_ref}, {item}), 64);")
            self.visit(s.body)
            self.emit("}")
            return
        if isinstance(size, Const) and size.value * item <= STACK_LIMIT:
            self.emit("{")
            self.emit(f"{ctype} {name}[{size.value}] __attribute__((aligned(64)));")
            self.visit(s.body)
            self.emit("}")
            return
        # the size in 64 bits, checked for overflow by lt_bytes; no buffer: LT_ERR_ALLOC and
        # the statements that use it are skipped (inside parallel loops too)
        dims = [self.expr.visit(x) for d in b.shape for x in _factors(simplify(_dim(d)))]
        shape = f"sizeof({ctype}), {len(dims)}, (const int64_t[]){{{', '.join(dims)}}}"
        self.emit("{")
        if self.alloc_per_call:
            self.emit(f"{ctype} *restrict {name} = ({ctype} *)lt_alloc({shape});")
            release = f"free({name});"
        else:
            # a workspace kept between calls (lt_ws_take in the prelude)
            slot = self._unique(("ws", id(b)), f"{name}_ws")
            site = f"&{self.pool}[{self.workspaces} * LT_WS_SLOTS]"
            self.workspaces += 1
            self.emit(f"lt_ws *{slot};")
            self.emit(f"{ctype} *restrict {name} = ({ctype} *)lt_ws_take({site}, {shape}, "
                      f"&{slot});")
            release = f"lt_ws_give({slot}, {name});"
        self.emit(f"if (!{name}) {{")
        self.emit("  lt_fail(&lt_status, LT_ERR_ALLOC);")
        self.emit("} else {")
        self.depth += 1
        self.visit(s.body)
        self.emit(release)
        self.depth -= 1
        self.emit("}")
        self.emit("}")

    def visit_Barrier(self, s):
        raise BuildError("barriers are only meaningful for the opencl target")

    # ---- the function ------------------------------------------------------------------

    def function(self, f: LoweredFunc, inputs: set[int],
                 may_alias: frozenset[int] = frozenset()) -> CSource:
        """The C text of ``f``; ``inputs`` are ids of read-only tensors; the parameters at the
        positions ``may_alias`` are not ``restrict`` (they may point to the same buffer)."""
        params = []
        for j, (t, b) in enumerate(zip(f.args, f.buffers)):
            const = "const " if id(t) in inputs else ""
            restrict = "" if j in may_alias else "restrict "
            params.append(f"{const}{dt.c_type(b.dtype)} *{restrict}{self.buf_name(b)}")
        for v in f.size_vars:
            params.append(f"int64_t {self.var_name(v)}")
        outs = [self.buf_name(b) for t, b in zip(f.args, f.buffers) if id(t) not in inputs]
        self.page_ref = outs[0] if outs else None
        self.pool = f"lt_ws_{f.name}"
        self.visit(f.body)
        if self.streams:
            self.emit("lt_sfence();")
        body = "\n".join(self.lines)
        sig = f"int {f.name}({', '.join(params)})"
        return CSource(f"{sig} {{\n  int lt_status = 0;\n{body}\n  return lt_status;\n}}\n",
                       sig + ";", frozenset(self.minmax), self.uses_parallel,
                       frozenset(self.math & vector_math_functions()), tuple(self.checks),
                       frozenset(self.helpers), (self.pool, self.workspaces))


@dataclass(frozen=True)
class BoundsCheck:
    """One run-time index check of -bounds-check: error code LT_ERR_BOUNDS + its position."""

    tensor: str
    dim: int
    index: str
    extent: str

    def message(self, fname: str, code: int) -> str:
        return (f"{fname}(): the index {self.index} of tensor '{self.tensor}' (dimension "
                f"{self.dim}) is outside [0, {self.extent}); got error code {code} from "
                "-bounds-check; give index arrays values inside the tensor's shape (or clamp "
                "them, e.g. lt.min(lt.max(i, 0), n - 1))")


@dataclass(frozen=True)
class CSource:
    """One generated function: its text, declaration, helper dtypes and OpenMP use."""

    function: str
    declaration: str
    minmax_dtypes: frozenset
    uses_parallel: bool
    vector_math: frozenset = frozenset()   # libm functions declared SIMD (glibc libmvec)
    checks: tuple = ()                     # BoundsCheck of each -bounds-check site, in order
    helpers: frozenset = frozenset()       # math helpers of backends/c_math.py it calls
    workspaces: tuple = ("", 0)            # its workspace pool's name, allocation sites

    @property
    def source(self) -> str:
        """A complete translation unit for this function alone, with
        ``lt_release_workspaces()`` (build.py's modules call it to free the kept workspaces)."""
        return translation_unit([self], release=RELEASE_SYMBOL)


RELEASE_SYMBOL = "lt_release_workspaces"


def _workspace_source(parts: list[CSource], release: str | None) -> str:
    """The workspace pools of ``parts`` (a heap intermediate kept between calls: lt_ws_take),
    a destructor that frees them when the library is unloaded and, with ``release``, a
    function of that name that frees the idle ones."""
    pools = [(name, n) for name, n in (p.workspaces for p in parts) if n]
    if not pools:
        return (f"void {release}(void) {{}}\n" if release else "")
    out = [f"static lt_ws {name}[{n} * LT_WS_SLOTS];" for name, n in pools]
    frees = "".join(f"  lt_ws_free({name}, {n} * LT_WS_SLOTS);\n" for name, n in pools)
    out.append(f"static void lt_ws_release_all(void) {{\n{frees}}}")
    out.append("__attribute__((destructor)) static void lt_ws_unload(void) "
               "{ lt_ws_release_all(); }")
    if release:
        out.append(f"void {release}(void) {{ lt_ws_release_all(); }}")
    return "\n".join(out) + "\n"


def translation_unit(parts: list[CSource], release: str | None = None) -> str:
    """The prelude, the helpers every part needs (once), the workspace pools, then each
    function; ``release``: also a function of that name that frees the kept workspaces."""
    dtypes = sorted(set().union(*(p.minmax_dtypes for p in parts)))
    helpers = "".join(_minmax_helpers(d) for d in dtypes)
    vm = sorted(set().union(*(p.vector_math for p in parts)))
    # let gcc call glibc's vector math (libmvec) from vectorized loops, as -ffast-math would,
    # without -ffast-math's other effects on exactness
    decls = "".join(f"#pragma omp declare simd notinbranch\n{_proto(fn)}\n" for fn in vm)
    helpers += helper_source(set().union(*(p.helpers for p in parts)))
    return (PRELUDE + decls + helpers + _workspace_source(parts, release)
            + "".join("\n" + p.function for p in parts))


# each C library function of an intrinsic -> (its C type, its arity)
_LIBM = {r.c_name(d): (t, r.arity) for r in INTRINSICS.values() if r.c is not None
         for d, t in (("float64", "double"), ("float32", "float"))}


def _proto(fn: str) -> str:
    t, arity = _LIBM[fn]
    return f"{t} {fn}({', '.join([t] * arity)});"


@functools.lru_cache(maxsize=None)
def vector_math_functions() -> frozenset:
    """The libm functions with SIMD variants here (glibc >= 2.35 libmvec on x86_64)."""
    if platform.machine() != "x86_64" or ctypes.util.find_library("mvec") is None:
        return frozenset()
    return frozenset(r.c_name(d) for r in INTRINSICS.values() if r.libmvec
                     for d in ("float64", "float32"))


def _factors(e: Expr) -> list[Expr]:
    """The factors of a product ``a * b * ...`` (``e`` itself when it is no product)."""
    if isinstance(e, BinOp) and e.op is BinKind.MUL:
        return _factors(e.a) + _factors(e.b)
    return [e]


def _dim(d) -> Expr:
    return d if isinstance(d, Expr) else Const(d, "int32")


def _minmax_helpers(d: str) -> str:
    c = dt.c_type(d)
    n = c.replace(" ", "_")
    return (f"static inline {c} lt_min_{n}({c} a, {c} b) {{ return a < b ? a : b; }}\n"
            f"static inline {c} lt_max_{n}({c} a, {c} b) {{ return a > b ? a : b; }}\n")


def generate_c(f: LoweredFunc, threads: int | None = None, bounds_check: bool = False,
               may_alias: frozenset[int] = frozenset(), libm_exp: bool = False,
               ieee_div: bool = False, fast_math: bool = False,
               alloc_per_call: bool = False) -> CSource:
    """C code for one lowered function; ``bounds_check``: data-dependent indices are checked at
    run time (the target option -bounds-check). Every pointer parameter is ``restrict`` but
    those at the argument positions ``may_alias``: the caller may pass them one buffer (an
    in-place elementwise update; see ``build(may_alias=...)``). float32 ``exp`` (and
    ``sigmoid``) inline the vectorizable ``lt_expf`` of backends/c_math.py unless ``libm_exp``
    (the target option -libm-exp), which calls the C library's ``expf``. A float32 division
    by a constant is a multiply by its reciprocal with a correction (``lt_divf``: x / c bit for
    bit but for 0 < |x| < 2^-100, within 1 ulp there) unless ``ieee_div`` (-ieee-div), or a
    plain multiply by it with ``fast_math`` (-fast-math: what gcc's -ffast-math makes of it).
    Heap intermediates are workspaces kept between calls (``lt_ws_take``) unless
    ``alloc_per_call`` (-alloc-per-call, and the sanitizers): then allocated at every call."""
    from ..lang.tensor import PlaceholderOp
    gen = CCodegen(threads, bounds_check, libm_exp, ieee_div, fast_math, alloc_per_call)
    inputs = {id(t) for t in f.args if isinstance(t.op, PlaceholderOp)}
    return gen.function(f, inputs, frozenset(may_alias))
