"""matmul: 1-D, 2-D, batched and broadcasting operands, as numpy.matmul."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from autograd import Tensor, matmul
from tests.autograd.opcheck import check_op, keeps_float32, randn, seeds


@st.composite
def matmul_shapes(draw):
    m, k, n = (draw(st.integers(1, 3)) for _ in range(3))
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=2))
    a_batch, b_batch = batch.input_shapes
    a = draw(st.sampled_from([(k,), a_batch + (m, k)]))
    b = draw(st.sampled_from([(k,), b_batch + (k, n), (k, n)]))
    return a, b


@given(shapes=matmul_shapes(), seed=seeds)
def test_matmul_matches_numpy_and_gradcheck(shapes, seed):
    a, b = randn(shapes[0], seed, 0), randn(shapes[1], seed, 1)
    check_op(lambda x, y: x @ y, np.matmul, [a, b])


@given(seed=seeds, needs=st.sampled_from([(True, False), (False, True)]))
def test_matmul_with_one_input_needing_grad(seed, needs):
    a, b = randn((2, 3, 4), seed, 0), randn((4, 5), seed, 1)
    check_op(lambda x, y: x @ y, np.matmul, [a, b], grad=needs)


def test_stack_times_matrix_uses_one_product_and_is_right():
    a, w = randn((4, 5, 6), 0), randn((6, 3), 1)
    check_op(lambda x, y: matmul(x, y), np.matmul, [a, w])
    # a non-contiguous stack takes the batched path
    check_op(lambda x, y: x.transpose(0, 1) @ y, lambda x, y: np.swapaxes(x, 0, 1) @ y, [a, w])


def test_matmul_keeps_float32():
    keeps_float32(lambda x, y: x @ y, randn((2, 3, 4), 0), randn((4, 5), 1))


def test_matmul_accepts_a_numpy_operand():
    w = Tensor(randn((3, 2), 0), requires_grad=True)
    out = randn((4, 3), 1) @ w
    assert isinstance(out, Tensor) and out.shape == (4, 2)


def test_inner_size_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"matmul: shapes \(2, 3\) and \(4, 5\) do not align"):
        Tensor(np.ones((2, 3))) @ Tensor(np.ones((4, 5)))
    with pytest.raises(ValueError, match="batch shapes"):
        Tensor(np.ones((2, 2, 3))) @ Tensor(np.ones((3, 3, 5)))


@given(lead=st.sampled_from([(), (3,), (2, 3)]), k=st.integers(1, 4), n=st.integers(1, 4),
       bias=st.booleans(), seed=seeds)
def test_linear_equals_matmul_plus_bias(lead, k, n, bias, seed):
    from autograd import linear

    x, w, b = randn(lead + (k,), seed, 0), randn((k, n), seed, 1), randn((n,), seed, 2)
    if bias:
        check_op(lambda t, u, c: linear(t, u, c), lambda t, u, c: t @ u + c, [x, w, b])
    else:
        check_op(lambda t, u: linear(t, u), lambda t, u: t @ u, [x, w])


def test_linear_keeps_float32_and_names_bad_shapes():
    from autograd import linear

    keeps_float32(lambda t, u, c: linear(t, u, c), randn((2, 3, 4), 0), randn((4, 5), 1), randn((5,), 2))
    with pytest.raises(ValueError, match=r"linear: x of shape \(2, 3\) does not match weight of shape \(4, 5\)"):
        linear(Tensor(np.ones((2, 3))), Tensor(np.ones((4, 5))))
    with pytest.raises(ValueError, match=r"linear: bias must have shape \(5,\)"):
        linear(Tensor(np.ones((2, 4))), Tensor(np.ones((4, 5))), Tensor(np.ones(4)))
