"""autograd.functional: vjp and jacobian by reverse mode."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from autograd import Tensor
from autograd import ops
from autograd.functional import jacobian, vjp

RNG = np.random.default_rng(7)


@given(n_in=st.integers(1, 5), n_out=st.integers(1, 5), vectorize=st.booleans())
def test_jacobian_of_a_linear_map_is_its_matrix(n_in, n_out, vectorize):
    A = RNG.standard_normal((n_out, n_in))
    x = RNG.standard_normal(n_in)
    J = jacobian(lambda t: t @ Tensor(A.T), x, vectorize=vectorize)   # works for (n,) and (k, n)
    assert J.shape == (n_out, n_in)
    np.testing.assert_allclose(J, A, rtol=1e-12, atol=1e-12)


def test_jacobian_shape_is_output_shape_then_input_shape():
    x = RNG.standard_normal((2, 3))
    J = jacobian(lambda t: ops.softmax(t, axis=-1), x)
    assert J.shape == (2, 3, 2, 3)
    # rows of a softmax are independent: blocks across rows are zero; within a row it is
    # diag(p) - p p^T
    p = np.exp(x) / np.exp(x).sum(-1, keepdims=True)
    for r in range(2):
        np.testing.assert_allclose(J[r, :, r, :], np.diag(p[r]) - np.outer(p[r], p[r]), atol=1e-12)
        np.testing.assert_allclose(J[r, :, 1 - r, :], 0, atol=0)


def test_jacobian_of_a_residual_layer_is_identity_plus_branch():
    n = 4
    W = RNG.standard_normal((n, n)) * 0.5
    x = RNG.standard_normal(n)

    def branch(t):
        return (t @ Tensor(W)).tanh()

    J_branch = jacobian(branch, x)
    J_res = jacobian(lambda t: t + branch(t), x, vectorize=True)
    np.testing.assert_allclose(J_res, np.eye(n) + J_branch, rtol=1e-12, atol=1e-12)
    analytic = (1 - np.tanh(x @ W) ** 2)[:, None] * W.T     # d tanh(xW)_i / dx_j
    np.testing.assert_allclose(J_branch, analytic, rtol=1e-12, atol=1e-12)


def test_vjp_matches_v_times_jacobian():
    W = RNG.standard_normal((3, 5))
    x = RNG.standard_normal((2, 3))
    v = RNG.standard_normal((2, 5))

    def f(t):
        return ops.layer_norm((t @ Tensor(W)).tanh())

    out, g = vjp(f, x, v)
    J = jacobian(f, x)
    np.testing.assert_allclose(out.numpy(), f(Tensor(x)).numpy(), rtol=1e-12)
    np.testing.assert_allclose(g, np.tensordot(v, J, axes=2), rtol=1e-10, atol=1e-12)
    assert not out.requires_grad


def test_jacobian_runs_the_forward_once():
    calls = []

    def f(t):
        calls.append(t.shape)
        return (t * t).exp()

    J = jacobian(f, np.array([0.1, 0.2, 0.3]))
    assert len(calls) == 1
    np.testing.assert_allclose(np.diag(J), 2 * np.array([0.1, 0.2, 0.3]) * np.exp([0.01, 0.04, 0.09]))


def test_vectorize_refuses_a_function_that_mixes_the_batch():
    x = RNG.standard_normal(3)
    with pytest.raises(ValueError, match="batch"):
        jacobian(lambda t: ops.softmax(t, axis=0), x, vectorize=True)   # axis 0 is the batch
    with pytest.raises(ValueError, match="batch-polymorphic"):
        jacobian(lambda t: t.sum(), x, vectorize=True)


def test_output_independent_of_input_gives_zeros():
    const = Tensor(np.ones(2))
    out, g = vjp(lambda t: const * 2.0, np.ones(3), np.ones(2))
    np.testing.assert_array_equal(g, np.zeros(3))
    np.testing.assert_array_equal(jacobian(lambda t: const * 2.0, np.ones(3)), np.zeros((2, 3)))


def test_vjp_checks_the_shape_of_v():
    with pytest.raises(ValueError, match=r"v of shape \(2,\) does not match fn\(x\) of shape \(3,\)"):
        vjp(lambda t: t * 2.0, np.ones(3), np.ones(2))


def test_float32_stays_float32():
    x = np.ones(3, dtype=np.float32)
    assert jacobian(lambda t: t * 3.0, x).dtype == np.float32
    assert vjp(lambda t: t * 3.0, x, np.ones(3, dtype=np.float32))[1].dtype == np.float32
