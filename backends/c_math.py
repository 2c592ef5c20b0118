"""Math helpers the C backend defines itself instead of calling the C library.

``lt_expf``: float32 ``exp`` as plain, branch-free C that gcc inlines and vectorizes in any
``#pragma omp simd`` loop (no call into libmvec, no -ffast-math). The C target uses it for
float32 ``exp`` and ``sigmoid`` by default; the target option ``-libm-exp`` calls the C
library's ``expf`` (glibc's libmvec in vectorized loops) instead.

Method (Cody-Waite reduction, Cephes' polynomial, exact scaling):

- n = round(x / ln 2), by adding 1.5 * 2^23 in one fused multiply-add (the low bits of the sum
  hold n); r = x - n ln 2 in two fused steps (ln 2 split in a 24-bit head and a tail), so
  |r| <= ln 2 / 2 + a few ulp, with no cancellation error;
- exp(r) = 1 + r + r^2 P(r), P of degree 5 (Cephes ``expf``), evaluated by Estrin's scheme
  (three independent fused multiply-adds, then three more) for throughput;
- exp(x) = exp(r) * 2^n1 * 2^n2 with n1 = floor(n / 2), n2 = n - n1: both factors are normal
  floats for every n in [-150, 129], so results in the subnormal range are rounded once
  (the last multiply) and overflow gives +inf without special cases.

Special values: x < -104 is clamped to -104 (the result is 0: exp(-104) < 2^-150; -inf gives
0); large x (and +inf) clamp n to 129, where r = x - 129 ln 2 stays large and the result
overflows to +inf; NaN propagates (the clamps compare so that a NaN passes through).

Accuracy: at most 1.03 ulp (float32 ulps of the exact value, numpy's float64 exp), measured
over every float32 input (worst: 1.028 ulp at x = -38.4547); tests/backends/test_codegen_math.py
checks every 1021st float32 bit pattern of both signs (every 61st in a slow test), the special
values and NaN in every vector lane. glibc's vector ``expf`` (libmvec, what ``-libm-exp``
gives in vectorized loops) is up to 2.64 ulp off over every float32 (at x = -16.98). The helper is also
faster: it inlines into the loop instead of calling libmvec (0.85-0.87x the time per element,
one Zen 4 core, AVX-512, L2-resident data; indicative, measured on a loaded machine).
"""
from __future__ import annotations

EXPF = r"""/* float32 exp, <= 1.03 ulp everywhere; see backends/c_math.py */
static inline float lt_expf(float x) {
  const float shift = 0x1.8p23f;
  float xc = x < -104.0f ? -104.0f : x;            /* a NaN passes through */
  float z = __builtin_fmaf(xc, 0x1.715476p+0f, shift);
  z = z < shift + 129.0f ? z : shift + 129.0f;     /* large x, +inf: n = 129, r large */
  float n = z - shift;
  float r = __builtin_fmaf(n, -0x1.62e43p-1f, xc);
  r = __builtin_fmaf(n, 0x1.05c610p-29f, r);
  float r2 = r * r;
  float p = __builtin_fmaf(1.9875691500e-4f, r, 1.3981999507e-3f);
  float q = __builtin_fmaf(8.3334519073e-3f, r, 4.1665795894e-2f);
  float o = __builtin_fmaf(1.6666665459e-1f, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p, r2, q);
  p = __builtin_fmaf(p, r2, o);
  p = __builtin_fmaf(p, r2, r) + 1.0f;
  int32_t zi, si;
  __builtin_memcpy(&zi, &z, 4);
  __builtin_memcpy(&si, &shift, 4);
  const int32_t ni = zi - si, n1 = ni >> 1, n2 = ni - n1;
  const int32_t b1 = (n1 + 127) * 8388608, b2 = (n2 + 127) * 8388608;
  float s1, s2;
  __builtin_memcpy(&s1, &b1, 4);
  __builtin_memcpy(&s2, &b2, 4);
  return p * s1 * s2;
}
"""

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


# helper name -> its C definition (helper_source emits them in this order: lt_sfence first,
# it includes <immintrin.h> for the stream helpers)
HELPERS = {"lt_expf": EXPF, "lt_sfence": SFENCE,
           "lt_stream_f32": _stream("lt_stream_f32", "float", "ps"),
           "lt_stream_f64": _stream("lt_stream_f64", "double", "pd")}


def helper_source(names) -> str:
    """The C definitions of the helpers ``names`` (in a fixed order), for a translation unit."""
    unknown = sorted(set(names) - set(HELPERS))
    assert not unknown, f"c_math: no helper called {unknown}"
    return "".join(HELPERS[n] for n in HELPERS if n in names)
