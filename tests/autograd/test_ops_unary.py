"""Elementwise math and activations: forward against NumPy formulas, backward by gradcheck."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from autograd import Tensor, ops
from autograd.ops.activation import erf
from tests.autograd.opcheck import check_op, keeps_float32, randn, seeds, shapes


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


_ERF = np.vectorize(math.erf)

# name -> (autograd call, NumPy formula, input transform keeping the domain valid)
UNARY = {
    "exp": (lambda t: t.exp(), np.exp, None),
    "log": (lambda t: t.log(), np.log, lambda a: np.abs(a) + 0.1),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, lambda a: np.abs(a) + 0.1),
    "abs": (lambda t: t.abs(), np.abs, None),
    "tanh": (lambda t: t.tanh(), np.tanh, None),
    "sigmoid": (lambda t: t.sigmoid(), _sigmoid, None),
    "relu": (lambda t: t.relu(), lambda a: np.maximum(a, 0), None),
    "silu": (lambda t: t.silu(), lambda a: a * _sigmoid(a), None),
    "gelu_tanh": (lambda t: t.gelu(), lambda a: 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a**3))), None),
    "gelu_erf": (lambda t: t.gelu(approximate="none"), lambda a: 0.5 * a * (1 + _ERF(a / np.sqrt(2))), None),
    "clip": (lambda t: t.clip(-0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7), None),
    "clip_lo": (lambda t: ops.clip(t, lo=0.2), lambda a: np.maximum(a, 0.2), None),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@given(shape=shapes, seed=seeds, scale=st.sampled_from([0.5, 1.0, 3.0]))
def test_unary_matches_formula_and_gradcheck(name, shape, seed, scale):
    call, ref, domain = UNARY[name]
    x = randn(shape, seed) * scale
    if domain is not None:
        x = domain(x)
    check_op(call, ref, [x])


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_keeps_float32(name):
    call, _, domain = UNARY[name]
    x = randn((4, 5), 3)
    keeps_float32(call, domain(x) if domain else x)


def test_erf_matches_math_erf_to_double_precision():
    x = np.concatenate([np.linspace(-8, 8, 4001), [0.0, 1e-300, -1e-8, 1.999999, 2.0, 2.000001]])
    np.testing.assert_allclose(erf(x), _ERF(x), rtol=5e-15, atol=1e-300)


def test_erf_float32_is_accurate_to_float32():
    x = np.linspace(-6, 6, 2001).astype(np.float32)
    out = erf(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, _ERF(x.astype(np.float64)), rtol=2e-6, atol=1e-7)


def test_sigmoid_does_not_overflow_for_large_inputs():
    x = Tensor(np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], dtype=np.float32))
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        out = x.sigmoid().numpy()
    np.testing.assert_allclose(out, [0, _sigmoid(-50.0), 0.5, 1, 1], rtol=1e-6)


def test_relu_and_abs_have_zero_gradient_at_zero():
    x = Tensor(np.array([0.0, 1.0, -1.0]), requires_grad=True)
    (x.relu() + x.abs()).sum().backward()
    np.testing.assert_allclose(x.grad, [0.0, 2.0, -1.0])


def test_clip_passes_gradient_at_the_bounds():
    x = Tensor(np.array([-1.0, -0.5, 0.0, 0.5, 1.0]), requires_grad=True)
    x.clip(-0.5, 0.5).sum().backward()
    np.testing.assert_allclose(x.grad, [0, 1, 1, 1, 0])


def test_gelu_rejects_an_unknown_approximation():
    with pytest.raises(ValueError, match="approximate"):
        Tensor(np.ones(2)).gelu(approximate="fast")


def test_log_of_an_integer_tensor_is_refused():
    with pytest.raises(TypeError, match="log: needs a floating-point tensor"):
        Tensor(np.arange(3)).log()
