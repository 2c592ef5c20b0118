"""bfloat16 as a storage dtype (ml_dtypes, the bf16 extra): float32 arguments take bfloat16
arrays, widened exactly; bfloat16 outputs get the float32 results rounded to nearest even."""
from __future__ import annotations

import numpy as np
import pytest

import looptune as lt

ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 needs ml_dtypes (pip install "
                                                    "looptune[bf16])")
BF16 = np.dtype(ml_dtypes.bfloat16)
rng = np.random.default_rng(0)


def _copy(dtype_in="float32", dtype_out="float32", n=None):
    n = lt.var("n") if n is None else n
    A = lt.placeholder((n,), dtype_in, name="A")
    B = lt.compute((n,), lambda i: A[i].astype(dtype_out), name="B")
    s = lt.create_schedule(B)
    _, bi = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(bi)
    return lt.build(s, [A, B], name=f"copy_{dtype_in}_{dtype_out}")


def _saxpy():
    n = lt.var("n")
    X = lt.placeholder((n,), name="X")
    Y = lt.placeholder((n,), name="Y")
    Z = lt.compute((n,), lambda i: X[i] * 3.0 + Y[i], name="Z")
    return lt.build(lt.create_schedule(Z), [X, Y, Z], name="saxpy_bf")


def _special_f32() -> np.ndarray:
    """float32 values that stress rounding to bfloat16: ties to even either way, carries into
    the exponent, overflow to inf, subnormals, signed zeros, inf, NaN; and random bits."""
    bits = [0x3F808000, 0x3F818000, 0x3F80_7FFF, 0x3F80_8001, 0x3FFF_8000, 0x7F7F_FFFF,
            0x7F7F_7FFF, 0x0000_8000, 0x0001_8000, 0x8000_0001, 0x0000_0000, 0x8000_0000,
            0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0x7F80_0001, 0xFFC1_2345]
    rand = rng.integers(0, 2**32, 4093, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([np.array(bits, np.uint32), rand]).view(np.float32)


def _rne_bits(f: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest, ties to even (computed on the bits)."""
    u = f.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_bfloat16_output_is_rounded_to_nearest_even_bit_exactly():
    f = _copy()
    a = _special_f32()
    out = np.zeros(a.shape, BF16)
    f(a, out)
    got, nan = out.view(np.uint16), np.isnan(a)
    np.testing.assert_array_equal(got[~nan], _rne_bits(a)[~nan])
    assert np.isnan(out[nan].astype(np.float32)).all()
    np.testing.assert_array_equal(got[~nan], a[~nan].astype(BF16).view(np.uint16))


def test_bfloat16_input_is_widened_exactly():
    f = _copy()
    bits = rng.integers(0, 2**16, 4099, dtype=np.uint32).astype(np.uint16)
    a = bits.view(BF16)
    out = np.zeros(a.shape, np.float32)
    f(a, out)
    nan = np.isnan(out)
    np.testing.assert_array_equal(out.view(np.uint32)[~nan],
                                  bits.astype(np.uint32)[~nan] << 16)
    assert np.isnan(a[nan].astype(np.float32)).all()


def test_computed_in_float32_then_rounded_once():
    f = _saxpy()
    x = rng.standard_normal(37).astype(BF16)              # odd size
    y = rng.standard_normal(37).astype(BF16)
    z = np.zeros(37, BF16)
    f(x, y, z)
    want = (3 * x.astype(np.float32) + y.astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(z.view(np.uint16), want.view(np.uint16))
    z32 = np.zeros(37, np.float32)                          # bfloat16 in, float32 out
    f(x, y.astype(np.float32), z32)
    np.testing.assert_array_equal(z32, 3 * x.astype(np.float32) + y.astype(np.float32))


def test_bfloat16_matmul_accumulates_in_float32():
    N, M, K = 11, 17, 9
    A = lt.placeholder((N, K), name="A")
    B = lt.placeholder((K, M), name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    f = lt.build(lt.create_schedule(C), [A, B, C], name="mm_bf")
    # small integers: every product and partial sum is exact in float32, in any order
    a = rng.integers(-8, 9, (N, K)).astype(BF16)
    b = rng.integers(-8, 9, (K, M)).astype(BF16)
    c = np.zeros((N, M), BF16)
    f(a, b, c)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(c.view(np.uint16), want.view(np.uint16))


def test_a_strided_bfloat16_input_is_converted():
    f = _saxpy()
    x = rng.standard_normal(74).astype(BF16)[::2]
    y, z = np.zeros(37, np.float32), np.zeros(37, np.float32)
    f(x, y, z)
    np.testing.assert_array_equal(z, 3 * x.astype(np.float32))


def test_bfloat16_errors_name_the_argument():
    f = _saxpy()
    x = np.ones(5, BF16)
    with pytest.raises(TypeError, match="argument 'A' must have dtype float64; got bfloat16"):
        _copy("float64", "float64")(x, np.zeros(5))
    ro = np.zeros(5, BF16)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="output 'Z' is read-only"):
        f(x, x, ro)
    with pytest.raises(ValueError, match="output 'Z' shares memory with argument 'Y'"):
        f(x.copy(), x, x)
    with pytest.raises(ValueError, match="size 'n' is 5 from an earlier argument but "
                                         "argument 'Z' gives 6"):
        f(x, x, np.zeros(6, BF16))
    with pytest.raises(ValueError, match=r"argument 'B' must have shape \(4,\); got \(3,\)"):
        _copy(n=4)(np.zeros(4, BF16), np.zeros(3, BF16))
    with pytest.raises(lt.LangError, match="for bfloat16 declare the tensor float32"):
        lt.placeholder((4,), "bfloat16", name="A")
    with pytest.raises(lt.LangError, match="for bfloat16 declare the tensor float32"):
        lt.placeholder((4,), ml_dtypes.bfloat16, name="A")


def test_torch_bfloat16_through_an_int16_view():
    torch = pytest.importorskip("torch", reason="torch is not installed (the CPU build is "
                                                "enough)")
    f = _saxpy()
    x, y = torch.randn(37, dtype=torch.bfloat16), torch.randn(37, dtype=torch.bfloat16)
    z = torch.zeros(37, dtype=torch.bfloat16)

    def view(t):
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    f(view(x), view(y), view(z))                       # z is written through the view
    want = (3 * x.float() + y.float()).to(torch.bfloat16)
    assert torch.equal(z, want)
