"""dropout, dtype casts and device moves."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import autograd
from autograd import Tensor, dropout
from tests.autograd.opcheck import check_op, randn, seeds


@given(p=st.sampled_from([0.1, 0.5, 0.9]), seed=seeds)
def test_dropout_zeroes_and_scales_and_its_gradient_uses_the_same_mask(p, seed):
    x = Tensor(np.ones((50, 40), dtype=np.float32), requires_grad=True)
    out = dropout(x, p, generator=np.random.default_rng(seed))
    vals = out.numpy()
    kept = vals != 0
    assert out.dtype == np.float32
    np.testing.assert_allclose(vals[kept], 1 / (1 - p), rtol=1e-6)
    assert abs(kept.mean() - (1 - p)) < 0.06
    out.sum().backward()
    np.testing.assert_allclose(x.grad, vals, rtol=1e-6)


def test_dropout_gradcheck_with_a_fixed_generator():
    x = randn((4, 5), 0)
    check_op(lambda t: dropout(t, 0.3, generator=np.random.default_rng(9)), None, [x])


def test_dropout_is_reproducible_from_manual_seed():
    x = Tensor(np.ones(100, dtype=np.float32))
    autograd.manual_seed(4)
    a = dropout(x, 0.5).numpy()
    autograd.manual_seed(4)
    b = dropout(x, 0.5).numpy()
    np.testing.assert_array_equal(a, b)


def test_dropout_identity_cases_and_bad_p():
    x = Tensor(np.ones(10), requires_grad=True)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    assert np.all(x.dropout(1.0).numpy() == 0)
    with pytest.raises(ValueError, match=r"dropout: p must be in \[0, 1\]"):
        dropout(x, 1.5)


def test_astype_round_trip_and_gradient_dtype():
    x = Tensor(np.array([1.5, -2.0], dtype=np.float32), requires_grad=True)
    y = x.double()
    assert y.dtype == np.float64
    (y * y).sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad, [3.0, -4.0])
    assert x.float() is x
    assert x.half().dtype == np.float16
    assert x.astype("int32").dtype == np.int32 and not x.astype("int32").requires_grad


def test_to_cpu_is_the_same_tensor():
    x = Tensor(np.ones(3))
    assert x.to("cpu") is x and x.cpu() is x
