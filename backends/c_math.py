"""Math helpers the C backend defines itself instead of calling the C library.

``lt_expf``: float32 ``exp`` as plain, branch-free C that gcc inlines and vectorizes in any
``#pragma omp simd`` loop (no call into libmvec, no -ffast-math). The C target uses it for
float32 ``exp`` and ``sigmoid`` by default; the target option ``-libm-exp`` calls the C
library's ``expf`` (glibc's libmvec in vectorized loops) instead.

Method (Cody-Waite reduction, a minimax polynomial, exact scaling):

- x is clamped to [-104, 89.5] with integer masks and bit selects, not ``?:``: gcc 12 threads
  the branches of ``?:`` clamps through the code after them (constant results for the clamped
  path), then if-converts that into a dozen mask moves with AVX-512 and does not vectorize
  it at all with AVX2. A NaN compares false and passes through; -inf and x < -104 give 0
  (exp(-104) < 2^-150), +inf and x > 89.5 overflow to +inf;
- n = round(x / ln 2), by adding 1.5 * 2^23 + 254 in one fused multiply-add (the low bits of
  the sum hold n + 254); r = x - n ln 2 in two fused steps (ln 2 split in a 24-bit head and a
  tail), so |r| <= ln 2 / 2 + a few ulp, with no cancellation error;
- exp(r) - 1 = r + r^2 P(r), P of degree 4: a minimax fit of our own (linear programming in
  float64 on 20001 Chebyshev nodes of |r| <= ln 2 / 2, error weighted by 1 / ulp(exp(r)), then
  rounded to float32, the r^3 coefficient then raised by one float32 ulp, the best of a
  +-3 ulp search on every coefficient: 1.035 -> 1.019 ulp), by Estrin's scheme: five fused
  multiply-adds and r^2;
- exp(x) = (1 + p) * 2^n1 * 2^n2 with n1 = floor(n / 2), n2 = n - n1, both factors' bits
  made from the sum's bits by two shifts, a mask and a subtraction (n + 254 in [104, 383]:
  n1 + 127 and n2 + 127 are its halves). Both factors are normal floats for every n in
  [-150, 129], so ``fma(p, 2^n1, 2^n1)`` rounds once like ``1 + p`` and the last multiply
  rounds once into the subnormal range (no flush to zero); overflow gives +inf.

Accuracy: at most 1.02 ulp (float32 ulps of the exact value, float64 exp), measured over
every float32 bit pattern with -march=native (AVX-512) and x86-64-v3 (AVX2): 1.0192 ulp at
x = -27.3779926 (-0x1.b60c42p+4); subnormal results within 0.75 ulp (of 2^-149). The same
check with a degree-5 polynomial (one fused multiply-add fewer) gave 2.34 ulp, or 2.04 ulp
with a free linear coefficient (as many operations as degree 6). tests/backends/
test_codegen_math.py checks every 1021st float32 bit pattern of both signs (every 61st in a
slow test), the special values and NaN in every vector lane. glibc's vector ``expf``
(libmvec, what ``-libm-exp`` gives in vectorized loops) is up to 2.64 ulp off over every
float32 (at x = -16.98).

Speed: 0.247 ns per element against 0.335 for the previous version here (Cephes' degree-6
polynomial, ``?:`` clamps, ``p * 2^n1 * 2^n2`` with multiplies for the bits): 0.74x the
time, a 1024-float L1-resident ``omp simd`` loop, one Zen 4 core, AVX-512, gcc 12 -O3,
median of 300 interleaved runs; 0.296 against 2.47 ns with -march=x86-64-v3 (AVX2, where the
previous version stayed scalar). With plain -march=x86-64 (SSE2, no FMA) every
``__builtin_fmaf`` is a call into libm's ``fmaf``: correct, not vectorized (as before). The
machine was loaded by other work while measuring: the figures are indicative.
"""
from __future__ import annotations

EXPF = r"""/* float32 exp, <= 1.02 ulp everywhere; see backends/c_math.py */
static inline float lt_expf(float x) {
  const float shift = 0x1.8p23f + 254.0f;          /* z's low bits hold n + 254 */
  int32_t xi;
  __builtin_memcpy(&xi, &x, 4);
  const int32_t lo = -(int32_t)(x < -104.0f), hi = -(int32_t)(x > 89.5f);  /* NaN: 0 */
  xi = (xi & ~lo) | ((int32_t)0xc2d00000 & lo);    /* -104.0f */
  xi = (xi & ~hi) | (0x42b30000 & hi);             /* 89.5f */
  float xc;
  __builtin_memcpy(&xc, &xi, 4);
  const float z = __builtin_fmaf(xc, 0x1.715476p+0f, shift);
  const float n = z - shift;
  float r = __builtin_fmaf(n, -0x1.62e43p-1f, xc);
  r = __builtin_fmaf(n, 0x1.05c610p-29f, r);
  const float r2 = r * r;
  const float a = __builtin_fmaf(0x1.555492p-3f, r, 0x1.fffffap-2f);
  const float b = __builtin_fmaf(0x1.123afap-7f, r, 0x1.555a68p-5f);
  const float u = __builtin_fmaf(0x1.693ebep-10f, r2, b);
  const float p = __builtin_fmaf(__builtin_fmaf(u, r2, a), r2, r);   /* exp(r) - 1 */
  uint32_t zi;
  __builtin_memcpy(&zi, &z, 4);
  const uint32_t b1 = (zi << 22) & 0xff800000u, b2 = (zi << 23) - b1;   /* 2^n1, 2^n2 */
  float s1, s2;
  __builtin_memcpy(&s1, &b1, 4);
  __builtin_memcpy(&s2, &b2, 4);
  return __builtin_fmaf(p, s1, s1) * s2;
}
"""

# float32 division by a constant c (backends/c_codegen.py; the target option -ieee-div keeps
# the division). A vector division is slow next to a multiply (AVX-512 vdivps: one per 5-10
# cycles on Intel cores against two multiplies per cycle), and a 3x3 blur that divides by 3
# twice per point ran 9.1 ms at 4096^2 on a 2-core Emerald Rapids against 5.5 with x * (1/3),
# Halide's time (whose blur is not the exact quotient). x * RN(1/c) alone is up to 1.5 ulp
# off x / c; Markstein's correction makes it exact:
#   q = RN(x * rc), rc = RN(1/c);  r = x - q*c (exact, one fused multiply-add);
#   x / c = RN(q + r * rc)  (one more fused multiply-add)
# which is the correctly rounded quotient whenever q is faithful and r does not underflow.
# Where r is 0 (q is exact; a zero quotient keeps its sign) or NaN (x is inf or NaN: q is
# already the answer) the helper keeps q: one ordered compare and a blend (islessgreater;
# 0.176 ns per element for two divisions in an L1-resident AVX-512 loop, against 0.26 with
# integer bit selects, 0.52 with vdivps and 0.05 for a bare multiply; Emerald Rapids, gcc 12
# -O3; with AVX2 0.32 against 0.49 for the division). Used for 1 <= |c| <= 2^24 (c * rc never
# overflows; x / c stays a normal number for the inputs below): over every float32 x it
# equals x / c bit for bit for all |x| >= 2^-100, zeros, infinities and NaN, and is within
# 1 ulp below that (where r underflows; 0 ulp for c = 3, 7, 255, 2^24 - 1). Checked over all
# 2^32 inputs for c = 3, 7, 10, 255, 1000, sqrt 2, 6, 12.5, 2^24 - 1, 1 + 2^-23, 2 - 2^-23,
# -3 (tests/backends/test_codegen_math.py samples them; a slow test runs every input of a
# few). A c whose reciprocal is exact (a power of two) is a plain multiply, which is the
# same rounding of the same value. Without hardware FMA (__FP_FAST_FMAF undefined, e.g.
# plain -march=x86-64) __builtin_fmaf would be a libm call: the helper divides instead.
DIVF = r"""/* float32 x / c for a constant c, 1 <= |c| <= 2^24, rc = RN(1 / c); see backends/c_math.py */
static inline float lt_divf(float x, float c, float rc) {
#if defined(__FP_FAST_FMAF)
  const float q = x * rc;
  const float r = __builtin_fmaf(-q, c, x);
  const float f = __builtin_fmaf(r, rc, q);
  return __builtin_islessgreater(r, 0.0f) ? f : q;   /* r nonzero and not NaN */
#else
  (void)rc;
  return x / c;
#endif
}
"""


def divf_by_const(c: float) -> tuple[str, float] | None:
    """How the C backend divides a float32 by the constant ``c``: ("mul", 1/c) when 1/c is an
    exact float32 (a power of two), ("divf", RN(1/c)) for lt_divf (1 <= |c| <= 2^24), None to
    keep the division (any other c, zero, inf, NaN)."""
    import numpy as np
    with np.errstate(all="ignore"):
        c32 = np.float32(c)
        rc = np.float32(1) / c32
        if not (np.isfinite(c32) and c32 != 0 and np.isfinite(rc)):
            return None
        if rc != 0 and np.float64(rc) * np.float64(c32) == 1.0:
            return "mul", float(rc)
    if 1.0 <= abs(float(c32)) <= 2.0 ** 24:
        return "divf", float(rc)
    return None


# Streaming (non-temporal) stores for ForKind.STREAMED loops (backends/c_stream.py): the loop
# computes a chunk of values into an aligned stack tile, then lt_stream_f32/f64 copies it to
# the destination with stores that bypass the caches (no read-for-ownership of the lines).
# numpy arrays are only 16-byte aligned: a scalar peel reaches the vector width's alignment,
# a scalar tail ends it. x86 only (AVX-512F, AVX, SSE2: the widest the -march has); a plain
# copy elsewhere. The stores are weakly ordered: lt_sfence() (a no-op off x86) orders them
# before the worker's barrier at the end of a parallel iteration, and before the return.
SFENCE = r"""/* streaming stores; see backends/c_math.py */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
static inline void lt_sfence(void) {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}
"""


def _stream(name: str, ctype: str, sfx: str) -> str:
    size = 4 if ctype == "float" else 8
    vec = [("__AVX512F__", "_mm512", 64), ("__AVX__", "_mm256", 32), ("__SSE2__", "_mm", 16)]
    text = [f"static inline void {name}({ctype} *restrict dst, const {ctype} *restrict src, "
            + "int64_t n) {", "  int64_t i = 0;"]
    for k, (macro, pre, width) in enumerate(vec):
        text += [f"#{'el' if k else ''}if defined({macro})",
                 f"  for (; i < n && ((uintptr_t)(dst + i) & {width - 1}); ++i) dst[i] = src[i];",
                 f"  for (; i + {width // size} <= n; i += {width // size})",
                 f"    {pre}_stream_{sfx}(dst + i, {pre}_loadu_{sfx}(src + i));"]
    return "\n".join(text + ["#endif", "  for (; i < n; ++i) dst[i] = src[i];", "}", ""])


# s[T].prefetch (schedule/prefetch.py): every 64-byte line of [p, p + bytes) asked for, read
# intent, all cache levels, p = base + off bytes. A hint: no fault, no result depends on it (a
# no-op where the compiler's target has no prefetch instruction). The address is an integer:
# a "nonfaulting" prefetch may reach past its buffer, which a C pointer may not.
PREFETCH = r"""/* s[T].prefetch; see backends/c_math.py */
static inline void lt_prefetch(uintptr_t base, int64_t off, int64_t bytes) {
  if (bytes <= 0) return;
  const uintptr_t p = base + (uintptr_t)off, e = p + (uintptr_t)bytes;
  for (uintptr_t a = p & ~(uintptr_t)63; a < e; a += 64)
    __builtin_prefetch((const void *)a, 0, 3);
}
"""


# A stack buffer of a page or more (a row of exponentials, say) sits where the stack puts it;
# when its address and the output's agree modulo 4 KiB, a load from the buffer right after a
# store to the output's same offset looks dependent to the CPU ("4K aliasing") and waits. Row
# softmax 4096 x 1024 ran 1.06-1.09 ms with the output at a page boundary and 0.93-0.95 with it
# half a page further (2 threads, 2-core Intel Xeon VM, model 167): which one a run got depended
# on the stack and on numpy's allocator, so the same kernel timed 15% apart in the tuner, the
# benchmark and a plain loop. The buffer is allocated a page larger and starts half a page
# away from the output, modulo 4 KiB, 64-byte aligned (backends/c_codegen.py, visit_Allocate).
PAGE_SKEW = r"""/* elements to skip so that a stack buffer starts half a page from ref
   (mod 4 KiB); see backends/c_math.py */
static inline int64_t lt_page_skew(const void *buf, const void *ref, int64_t item) {
  const uintptr_t want = ((uintptr_t)ref + 2048u) & 4095u, have = (uintptr_t)buf & 4095u;
  return (int64_t)(((want - have) & 4095u) & ~(uintptr_t)63) / item;
}
"""

# helper name -> its C definition (helper_source emits them in this order: lt_sfence first,
# it includes <immintrin.h> for the stream helpers)
HELPERS = {"lt_expf": EXPF, "lt_divf": DIVF, "lt_sfence": SFENCE,
           "lt_stream_f32": _stream("lt_stream_f32", "float", "ps"),
           "lt_stream_f64": _stream("lt_stream_f64", "double", "pd"), "lt_prefetch": PREFETCH,
           "lt_page_skew": PAGE_SKEW}


def helper_source(names) -> str:
    """The C definitions of the helpers ``names`` (in a fixed order), for a translation unit."""
    unknown = sorted(set(names) - set(HELPERS))
    assert not unknown, f"c_math: no helper called {unknown}"
    return "".join(HELPERS[n] for n in HELPERS if n in names)
