"""Arrays from any framework: built functions and compiled models take torch tensors, numpy
views, DLPack-only objects and buffers without a copy (outputs written in place), with the
same checks and errors as numpy arrays."""
from __future__ import annotations

import array

import numpy as np
import pytest

import looptune as lt
from looptune.backends.arrays import host_arrays

from built_kernels import built_axpy, built_matmul

rng = np.random.default_rng(0)


@pytest.fixture(scope="module")
def saxpy():
    """Z = 3 X + Y over a symbolic n, vectorized with a tail."""
    return built_axpy("saxpy", 3.0, parallel=False)


@pytest.fixture(scope="module")
def mm():
    return built_matmul(vectorize=False)


class OnlyDLPack:
    """An array that exposes nothing but DLPack (as a minimal framework would)."""

    def __init__(self, a: np.ndarray, device=(1, 0)):
        self._a, self._device = a, device

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._device


# ---- numpy views, DLPack-only objects, buffers ---------------------------------------------

def test_numpy_views_in_place(saxpy):
    base = rng.standard_normal(60).astype(np.float32)
    out = np.zeros(80, np.float32)
    x, y, z = base[3:40], base[20:57], out[5:42]          # offset views, n = 37, overlapping ins
    saxpy(x, y, z)
    np.testing.assert_allclose(out[5:42], 3 * x + y, rtol=1e-6)
    assert not out[:5].any() and not out[42:].any()        # nothing written outside the view


@pytest.mark.parametrize("bad, match", [
    (lambda x: x[::2], r"argument 'X' must be C-contiguous"),
    (lambda x: x.astype(np.float64), r"argument 'X' must have dtype float32; got float64"),
])
def test_numpy_views_checked_as_arrays(saxpy, bad, match):
    x = np.ones(74, np.float32)
    xs = bad(x)
    with pytest.raises((TypeError, ValueError), match=match):
        saxpy(xs, np.ones(xs.shape[0], np.float32), np.zeros(xs.shape[0], np.float32))


def test_read_only_output_view_is_refused(saxpy):
    z = np.zeros(9, np.float32)
    z.flags.writeable = False
    with pytest.raises(ValueError, match="output 'Z' is read-only"):
        saxpy(np.ones(9, np.float32), np.ones(9, np.float32), z)
    with pytest.raises(ValueError, match="output 'Z' is read-only"):
        saxpy(np.ones(9, np.float32), np.ones(9, np.float32), OnlyDLPack(z))


def test_dlpack_only_object_in_place_without_copy(mm, saxpy):
    a = rng.standard_normal((13, 7)).astype(np.float32)
    b = rng.standard_normal((7, 21)).astype(np.float32)
    c = np.zeros((13, 21), np.float32)
    mm(OnlyDLPack(a), OnlyDLPack(b), OnlyDLPack(c))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    views, finish = host_arrays(mm._checker, [OnlyDLPack(a), b, OnlyDLPack(c)])
    assert finish is None and views[1] is b
    assert np.shares_memory(views[0], a) and np.shares_memory(views[2], c)
    # and the symbolic size is bound from a DLPack argument's shape
    x, y, z = (np.arange(37, dtype=np.float32), np.ones(37, np.float32),
               np.zeros(37, np.float32))
    saxpy(OnlyDLPack(x), y, OnlyDLPack(z))
    np.testing.assert_array_equal(z, 3 * x + y)


def test_dlpack_on_another_device_is_refused(saxpy):
    x = np.ones(5, np.float32)
    with pytest.raises(ValueError, match=r"saxpy\(\): argument 'X' is in CUDA memory \(device "
                                         r"1\); .*pass a CPU array"):
        saxpy(OnlyDLPack(x, device=(2, 1)), x, np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="argument 'Z' is in DLPack device type 99 memory"):
        saxpy(x, x, OnlyDLPack(np.zeros(5, np.float32), device=(99, 0)))


def test_buffer_protocol_and_array_interface(saxpy):
    x = array.array("f", [1.0, 2.0, 3.5])
    z = array.array("f", [0.0] * 3)
    saxpy(x, memoryview(array.array("f", [1.0, 1.0, 1.0])), z)
    assert list(z) == [4.0, 7.0, 11.5]                     # written into the array.array
    with pytest.raises(TypeError, match="argument 'X' must have dtype float32; got float64"):
        saxpy(array.array("d", [1.0]), np.ones(1, np.float32), np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="output 'Z' is read-only"):
        saxpy(x, x, memoryview(bytes(12)).cast("f"))

    class Iface:                        # only __array_interface__ (as older libraries do)
        def __init__(self, a):
            self.__array_interface__ = a.__array_interface__
            self._keep = a
    out = np.zeros(3, np.float32)
    saxpy(Iface(np.ones(3, np.float32)), np.ones(3, np.float32), Iface(out))
    np.testing.assert_array_equal(out, [4, 4, 4])


def test_objects_without_memory_are_refused_naming_the_argument(saxpy):
    with pytest.raises(TypeError, match=r"saxpy\(\): argument 'Y' must be a numpy.ndarray; "
                                        r"got list; pass a numpy array, or an array that "
                                        r"exposes its CPU memory through DLPack"):
        saxpy(np.ones(2, np.float32), [1.0, 2.0], np.zeros(2, np.float32))


def test_a_dlpack_output_sharing_an_input_is_refused(saxpy):
    x = np.ones(6, np.float32)
    with pytest.raises(ValueError, match="output 'Z' shares memory with argument 'X'"):
        saxpy(OnlyDLPack(x), np.ones(6, np.float32), OnlyDLPack(x))


def test_compiled_model_and_reference_take_dlpack_inputs():
    g = lt.graph.Graph("tiny")
    x = g.input("x", (3, 5))
    g.output(g.op("Relu", g.op("Add", x, x)))
    model = lt.graph.compile(g)
    xin = rng.standard_normal((3, 5)).astype(np.float32)
    want = np.maximum(2 * xin, 0)
    np.testing.assert_array_equal(model(OnlyDLPack(xin))[0], want)
    np.testing.assert_array_equal(model(x=OnlyDLPack(xin))[0], want)
    np.testing.assert_array_equal(g.run_reference([OnlyDLPack(xin)])[0], want)
    with pytest.raises(lt.GraphError, match="model 'tiny': input 'x' is in CUDA memory"):
        model(OnlyDLPack(xin, device=(2, 0)))
    with pytest.raises(lt.GraphError, match="input 'x' has dtype float64"):
        model(OnlyDLPack(xin.astype(np.float64)))


# ---- torch (CPU) ----------------------------------------------------------------------------

def _torch():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch: the "
                                                "CPU build is enough)")
    torch.manual_seed(0)                                    # the tests' tensors are seeded
    return torch


def test_torch_tensors_in_place(mm, saxpy):
    torch = _torch()
    a, b = torch.randn(13, 7), torch.randn(7, 21)
    c = torch.zeros(13, 21)
    ptr = c.data_ptr()
    mm(a, b, c)
    assert c.data_ptr() == ptr
    np.testing.assert_allclose(c.numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)
    x, y, z = torch.randn(37), torch.randn(37), torch.zeros(37)
    saxpy(x, y.numpy(), z)                                  # torch and numpy mixed
    # the kernel may fuse 3*x + y into one FMA (one rounding), numpy rounds twice: a last-bit
    # difference, relative to the terms' size where they cancel
    np.testing.assert_allclose(z.numpy(), 3 * x.numpy() + y.numpy(), rtol=1e-6,
                               atol=1e-6 * float(np.abs(3 * x.numpy()).max()))
    views, finish = host_arrays(saxpy._checker, [x, y, z])
    assert finish is None and all(np.shares_memory(v, t.numpy()) for v, t in
                                  zip(views, (x, y, z)))
    t = saxpy.time(x, y, z, number=2, repeat=2)
    assert len(t.results) == 2


def test_torch_strided_and_offset_views(saxpy, mm):
    torch = _torch()
    base = torch.randn(50)
    out = torch.zeros(50)
    saxpy(base[1:38], base[10:47], out[3:40])               # contiguous views with offsets
    np.testing.assert_allclose(out[3:40].numpy(), 3 * base[1:38].numpy() +
                               base[10:47].numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="argument 'A' must be C-contiguous"):
        mm(torch.randn(7, 13).t(), torch.randn(7, 21), torch.zeros(13, 21))
    with pytest.raises(ValueError, match="argument 'C' must be C-contiguous"):
        mm(torch.randn(13, 7), torch.randn(7, 21), torch.zeros(13, 42)[:, ::2])


@pytest.mark.parametrize("make, exc, match", [
    (lambda t: t.randn(13, 7, dtype=t.float64), TypeError,
     "argument 'A' must have dtype float32; got float64"),
    (lambda t: t.randn(13, 8), ValueError,
     r"argument 'A' must have shape \(13, 7\); got \(13, 8\)"),
    (lambda t: t.randn(13, 7, requires_grad=True), TypeError,
     r"argument 'A': numpy cannot view this Tensor through DLPack \(.*detach"),
    (lambda t: t.randn(13, 7).to(t.bfloat16), TypeError,
     r"argument 'A': numpy cannot view .* t.view\(torch.int16\).numpy\(\).view\(ml_dtypes"),
])
def test_torch_errors_name_the_argument(mm, make, exc, match):
    torch = _torch()
    with pytest.raises(exc, match=match):
        mm(make(torch), torch.randn(7, 21), torch.zeros(13, 21))


def test_torch_output_overlapping_an_input(saxpy):
    torch = _torch()
    x = torch.ones(8)
    with pytest.raises(ValueError, match="output 'Z' shares memory with argument 'Y'"):
        saxpy(torch.ones(8), x, x)


def test_torch_into_a_compiled_model():
    torch = _torch()
    g = lt.graph.Graph("mlp")
    x = g.input("x", (4, 9))
    w = g.const(rng.standard_normal((9, 5)).astype(np.float32), name="w")
    g.output(g.op("Relu", g.op("MatMul", x, w)))
    model = lt.graph.compile(g)
    xt = torch.randn(4, 9)
    np.testing.assert_allclose(model(xt)[0], np.maximum(xt.numpy() @ g.consts["w"], 0),
                               rtol=1e-5, atol=1e-5)
    xt_grad = torch.randn(4, 9, requires_grad=True)
    with pytest.raises(lt.GraphError, match="input 'x': numpy cannot view this Tensor"):
        model(xt_grad)


@pytest.mark.opencl
def test_torch_tensors_into_an_opencl_function(opencl):
    torch = _torch()
    A = lt.placeholder((11,), name="A")
    B = lt.compute((11,), lambda i: A[i] * 2.0 + 1.0, name="B")
    f = lt.build(lt.create_schedule(B), [A, B], target=opencl)
    a, b = torch.randn(11), torch.zeros(11)
    f(a, b)
    np.testing.assert_allclose(b.numpy(), 2 * a.numpy() + 1, rtol=1e-6)
