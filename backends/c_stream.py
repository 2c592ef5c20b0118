"""C for streamed loops (``ForKind.STREAMED``, from ``s[T].stream(loop)``).

A streamed loop whose body is one store (the full tiles, after tail partitioning) computes its
values in chunks of at most 1 KB (256 float32 or 128 float64 values: the tile stays in L1)
into an aligned stack tile, and hands each chunk to ``lt_stream_f32``/``lt_stream_f64``
(backends/c_math.py), which writes it with non-temporal stores::

    for x in [0, N) streamed:          {int64_t x_c = 0, x_n = 256 - <elements to the next
      B[y, x] = A[y, x] * 2.0f          64-byte boundary of &B[y*N]>;
                                  ->    while (x_c < N) {
                                          if (x_n > N - x_c) x_n = N - x_c;
                                          float B_tile[256] __attribute__((aligned(64)));
                                          #pragma omp simd
                                          for (int64_t x = x_c; x < x_c + x_n; ++x)
                                            B_tile[x - x_c] = A[y*N + x] * 2.0f;
                                          lt_stream_f32(&B[y*N + x_c], B_tile, x_n);
                                          x_c += x_n; x_n = 256; }}

The first chunk ends on a 64-byte boundary of the destination, so every later chunk starts on
one and only the row's first and last partial lines get ordinary stores. A body with guards
(the tail copy of a partitioned loop, an attached stage's guard) is emitted as a plain
``#pragma omp simd`` loop. The code generator fences (``lt_sfence()``) at the end of each
iteration of the enclosing parallel loop and before the function returns.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import BuildError
from ..lang import dtype as dt
from ..lang.expr import Expr, Var
from ..lang.simplify import linear_terms, simplify, upper_bound
from ..lang.visitor import collect_vars, substitute
from ..schedule.stmt import For, Store

if TYPE_CHECKING:
    from .c_codegen import CCodegen

CHUNK_BYTES = 1024
LINE_BYTES = 64
HELPER = {"float32": "lt_stream_f32", "float64": "lt_stream_f64"}


def streamable(s: For) -> bool:
    """Is ``s`` (a streamed loop) one store of a float dtype, which chunks can stream?"""
    return isinstance(s.body, Store) and s.body.buffer.dtype in HELPER


def check_contiguous(s: For) -> None:
    """The store of streamed loop ``s`` steps its last index by 1 and no other index."""
    st = s.body
    *outer, last = st.indices
    terms, _ = linear_terms(simplify(last))
    rest = [t for t in terms if t != s.var]
    if terms.get(s.var) != 1 or any(s.var in collect_vars(t) for t in rest) or \
            any(s.var in collect_vars(i) for i in outer):
        raise BuildError(f"streamed loop '{s.var.name}': the store to '{st.buffer.name}' "
                         f"(indices {', '.join(map(str, st.indices))}) is not contiguous in "
                         "the loop; stream a loop that steps the last index by 1")


def emit_streamed(gen: CCodegen, s: For) -> None:
    """The chunked C of streamed loop ``s`` (``streamable(s)``; see the module docstring)."""
    check_contiguous(s)
    st: Store = s.body
    dtype = st.buffer.dtype
    size = dt.itemsize(dtype)
    chunk = CHUNK_BYTES // size
    ub = upper_bound(s.extent, gen.ranges.facts)
    small = ub is not None and ub <= chunk
    chunk = max(ub, 1) if small else chunk
    gen.helpers.update({HELPER[dtype], "lt_sfence"})
    gen.streams += 1
    cvar, nvar = Var(f"{s.var.name}.c", s.var.dtype), Var(f"{s.var.name}.n", s.var.dtype)
    c, n, v = gen.var_name(cvar), gen.var_name(nvar), gen.var_name(s.var)
    tile = gen.var_name(Var(f"{st.buffer.name}.tile"))
    lo = gen.expr.visit(s.min)
    end = gen.expr.visit(simplify(s.min + s.extent, gen.ranges.facts))
    dst = gen.buf_name(st.buffer)
    gen.emit("{")
    gen.depth += 1
    with gen.ranges.loop(cvar, s.min, s.extent):
        first = f"{chunk}" if small else \
            f"{chunk} - (int64_t)((uintptr_t)&{dst}[{_flat_at(gen, st, s, s.min)}] / {size} " \
            f"% {LINE_BYTES // size})"
        gen.emit(f"int64_t {c} = {lo}, {n} = {first};")
        gen.emit(f"while ({c} < {end}) {{")
        gen.depth += 1
        gen.emit(f"if ({n} > {end} - {c}) {n} = {end} - {c};")
        gen.emit(f"{dt.c_type(dtype)} {tile}[{chunk}] __attribute__((aligned(64)));")
        gen.emit("#pragma omp simd")
        gen.emit(f"for (int64_t {v} = {c}; {v} < {c} + {n}; ++{v}) {{")
        with gen.ranges.loop(s.var, s.min, s.extent):
            gen.emit(f"  {tile}[{v} - {c}] = {gen.expr.visit(st.value)};")
        gen.emit("}")
        gen.emit(f"{HELPER[dtype]}(&{dst}[{_flat_at(gen, st, s, cvar)}], {tile}, {n});")
        gen.emit(f"{c} += {n};" + ("" if small else f" {n} = {chunk};"))
        gen.depth -= 1
        gen.emit("}")
    gen.depth -= 1
    gen.emit("}")


def _flat_at(gen: CCodegen, st: Store, s: For, at: Expr) -> str:
    """The flat index of ``st``'s destination with the loop variable at ``at``."""
    return gen.flat(st.buffer, [substitute(i, {s.var: at}) for i in st.indices])
