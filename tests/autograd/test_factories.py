"""Factories, dtypes and devices, and seeded random numbers."""
from __future__ import annotations

import numpy as np
import pytest

import autograd
from autograd import Tensor


@pytest.mark.parametrize("name", ["zeros", "ones"])
def test_zeros_and_ones_take_ints_or_a_tuple(name):
    fill = 0.0 if name == "zeros" else 1.0
    for t in (getattr(autograd, name)(2, 3), getattr(autograd, name)((2, 3)), getattr(Tensor, name)([2, 3])):
        assert t.shape == (2, 3) and t.dtype == np.float32 and t.device == "cpu"
        assert np.all(t.numpy() == fill) and not t.requires_grad and t.is_leaf
    t = getattr(autograd, name)(4, dtype="float64", requires_grad=True)
    assert t.dtype == np.float64 and t.requires_grad


def test_full_and_its_dtype_rules():
    assert autograd.full((2,), 1.5).dtype == np.float32
    assert autograd.full(3, 7).dtype == np.int64
    assert autograd.full((1,), True).dtype == bool
    np.testing.assert_array_equal(autograd.full((2, 2), 3.0, dtype=np.float64).numpy(), np.full((2, 2), 3.0))


def test_arange_like_numpy():
    assert autograd.arange(5).tolist() == [0, 1, 2, 3, 4] and autograd.arange(5).dtype == np.int64
    np.testing.assert_allclose(autograd.arange(0, 1, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    assert autograd.arange(0, 1, 0.25).dtype == np.float32
    assert autograd.arange(2, 8, 3, dtype="float64").tolist() == [2.0, 5.0]
    with pytest.raises(ValueError, match="step"):
        autograd.arange(0, 5, 0)


def test_like_factories_copy_shape_dtype_and_device():
    ref = Tensor(np.ones((3, 2), dtype=np.float64))
    for name in ["zeros_like", "ones_like", "randn_like", "rand_like"]:
        t = getattr(autograd, name)(ref)
        assert t.shape == (3, 2) and t.dtype == np.float64 and t.device == "cpu"
    t = autograd.full_like(ref, 4.0, dtype="float32", requires_grad=True)
    assert t.dtype == np.float32 and t.requires_grad and np.all(t.numpy() == 4)


def test_manual_seed_makes_randn_and_rand_reproducible():
    autograd.manual_seed(123)
    a, b = autograd.randn(3, 4), autograd.rand(5)
    autograd.manual_seed(123)
    c, d = autograd.randn(3, 4), autograd.rand(5)
    np.testing.assert_array_equal(a.numpy(), c.numpy())
    np.testing.assert_array_equal(b.numpy(), d.numpy())
    assert a.dtype == np.float32 and not np.array_equal(a.numpy(), autograd.randn(3, 4).numpy())
    assert np.all((b.numpy() >= 0) & (b.numpy() < 1))


def test_an_explicit_generator_is_independent_of_the_global_one():
    x = autograd.randn(1000, generator=np.random.default_rng(5), dtype="float64")
    y = autograd.randn(1000, generator=np.random.default_rng(5), dtype="float64")
    np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert abs(x.numpy().mean()) < 0.15 and abs(x.numpy().std() - 1) < 0.1


def test_random_factories_refuse_integer_dtypes_and_bad_seeds():
    with pytest.raises(TypeError, match="randn: needs a floating-point dtype"):
        autograd.randn(2, dtype="int32")
    with pytest.raises(ValueError, match="seed"):
        autograd.manual_seed(-1)


def test_randn_float16_is_drawn_then_cast():
    t = autograd.randn(4, dtype="float16")
    assert t.dtype == np.float16


def test_bad_shape_and_dtype_are_named():
    with pytest.raises(TypeError, match="zeros: shape must be ints"):
        autograd.zeros("a")
    with pytest.raises(TypeError, match="unknown dtype"):
        autograd.ones(2, dtype="float33")


def test_cuda_device_without_a_gpu_says_so():
    if autograd.cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="CuPy"):
        autograd.zeros(2, device="cuda")


def test_factories_are_static_methods_of_tensor():
    for name in ["zeros", "ones", "full", "randn", "rand", "arange", "zeros_like", "ones_like",
                 "full_like", "randn_like", "rand_like"]:
        assert getattr(Tensor, name) is getattr(autograd, name)
    assert Tensor.randn(2, 3, requires_grad=True).requires_grad


def test_legacy_random_state_generators_work_too():
    a = autograd.randn(3, generator=np.random.RandomState(1))
    b = autograd.randn(3, generator=np.random.RandomState(1))
    assert a.dtype == np.float32
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("data", [None, "x", ["a", "b"], np.array([1, "a"], dtype=object)])
def test_a_tensor_of_no_numbers_is_refused(data):
    with pytest.raises(TypeError, match="a Tensor holds numbers"):
        Tensor(data)
    assert Tensor([1, 2]).data.dtype == np.int64 and Tensor(True).data.dtype == np.bool_
