"""Arithmetic with broadcasting: + - * / pow, tensor and scalar on both sides."""
from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from autograd import Tensor
from tests.autograd.opcheck import check_op, keeps_float32, randn, seeds

broadcast_pairs = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3)

BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(shapes=broadcast_pairs, seed=seeds)
def test_binary_broadcasting_matches_numpy_and_gradcheck(name, shapes, seed):
    op = BINARY[name]
    a, b = randn(shapes.input_shapes[0], seed, 0), randn(shapes.input_shapes[1], seed, 1)
    if name == "div":
        b = np.sign(b) * (np.abs(b) + 0.5)
    check_op(op, op, [a, b])


@given(shapes=broadcast_pairs, seed=seeds)
def test_pow_of_two_tensors(shapes, seed):
    a = np.abs(randn(shapes.input_shapes[0], seed, 0)) + 0.5
    b = randn(shapes.input_shapes[1], seed, 1)
    check_op(lambda x, y: x ** y, lambda x, y: x ** y, [a, b])


@pytest.mark.parametrize("name", sorted(BINARY) + ["pow"])
@pytest.mark.parametrize("scalar_left", [False, True])
@given(seed=seeds, c=st.sampled_from([2, 0.5, -1.5, 3]))
def test_scalar_operands_on_either_side(name, scalar_left, seed, c):
    op = operator.pow if name == "pow" else BINARY[name]
    x = np.abs(randn((2, 3), seed)) + 0.5
    if scalar_left:
        c = abs(c) if name == "pow" else c  # a negative base to a real power is NaN
        check_op(lambda t: op(c, t), lambda a: op(c, a), [x])
    else:
        check_op(lambda t: op(t, c), lambda a: op(a, c), [x])


@pytest.mark.parametrize("name", sorted(BINARY))
def test_python_scalars_keep_float32(name):
    keeps_float32(lambda t: BINARY[name](BINARY[name](t, 2.5), t), randn((3,), 0) + 5)


def test_neg():
    check_op(lambda t: -t, lambda a: -a, [randn((2, 3), 0)])


def test_shape_mismatch_names_the_op_and_both_shapes():
    with pytest.raises(ValueError, match=r"mul: shapes \(2, 3\) and \(4,\)"):
        Tensor(np.ones((2, 3))) * Tensor(np.ones(4))


def test_numpy_array_on_the_left_defers_to_the_tensor():
    t = Tensor(np.ones(3), requires_grad=True)
    out = np.full(3, 2.0) * t
    assert isinstance(out, Tensor)
    out.sum().backward()
    np.testing.assert_allclose(t.grad, 2.0)


def test_numpy_scalars_do_not_upcast_float32():
    t = Tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    for out in (t * np.float64(2), np.float64(2) * t, t + np.int64(1), t ** np.float64(2),
                t / np.float64(3), np.float64(1) - t):
        assert out.dtype == np.float32
