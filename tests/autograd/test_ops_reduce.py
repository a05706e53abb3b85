"""Reductions: sum, mean, max, min, var over any axes, with keepdims."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from autograd import Tensor
from tests.autograd.opcheck import check_op, keeps_float32, randn, seeds, shapes


@st.composite
def shape_and_axis(draw, min_dims=0):
    shape = draw(shapes.filter(lambda s: len(s) >= min_dims))
    ndim = len(shape)
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none" or ndim == 0:
        axis = None
    elif kind == "int":
        axis = draw(st.integers(-ndim, ndim - 1))
    else:
        axis = tuple(draw(st.sets(st.integers(0, ndim - 1), min_size=1)))
    return shape, axis


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@given(sa=shape_and_axis(), keepdims=st.booleans(), seed=seeds)
def test_reduction_matches_numpy_and_gradcheck(name, sa, keepdims, seed):
    shape, axis = sa
    x = randn(shape, seed)
    check_op(lambda t: getattr(t, name)(axis=axis, keepdims=keepdims),
             lambda a: getattr(np, name)(a, axis=axis, keepdims=keepdims), [x])


@given(sa=shape_and_axis(min_dims=1), keepdims=st.booleans(), ddof=st.integers(0, 1), seed=seeds)
def test_var_matches_numpy_and_gradcheck(sa, keepdims, ddof, seed):
    shape, axis = sa
    n = int(np.prod([shape[a] for a in (range(len(shape)) if axis is None else np.atleast_1d(axis))]))
    if n - ddof <= 0:
        return
    x = randn(shape, seed)
    check_op(lambda t: t.var(axis=axis, keepdims=keepdims, ddof=ddof),
             lambda a: np.var(a, axis=axis, keepdims=keepdims, ddof=ddof), [x])


def test_max_splits_the_gradient_evenly_between_ties():
    x = Tensor(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]), requires_grad=True)
    x.max(axis=1).sum().backward()
    np.testing.assert_allclose(x.grad, [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])


def test_min_of_everything_with_a_tie():
    x = Tensor(np.array([0.0, -1.0, 5.0, -1.0]), requires_grad=True)
    x.min().backward()
    np.testing.assert_allclose(x.grad, [0, 0.5, 0, 0.5])


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "var"])
def test_reductions_keep_float32(name):
    keeps_float32(lambda t: getattr(t, name)(axis=-1), randn((3, 4), 1))


def test_sum_of_all_gives_a_zero_dim_array_tensor():
    out = Tensor(np.ones((2, 3))).sum()
    assert isinstance(out.data, np.ndarray) and out.shape == () and out.item() == 6.0


def test_axis_out_of_range_is_named():
    with pytest.raises(ValueError, match="sum: axis 2 is out of range"):
        Tensor(np.ones((2, 3))).sum(axis=2)


def test_var_without_degrees_of_freedom_raises():
    with pytest.raises(ValueError, match="ddof=1"):
        Tensor(np.ones((1,))).var(ddof=1)


@given(sa=shape_and_axis(), keepdims=st.booleans(), seed=seeds)
def test_argmax_and_argmin_match_numpy_outside_the_graph(sa, keepdims, seed):
    shape, axis = sa
    if isinstance(axis, tuple):
        axis = axis[0]
    x = randn(shape, seed)
    t = Tensor(x, requires_grad=True)
    for name in ("argmax", "argmin"):
        out = getattr(t, name)(axis=axis, keepdims=keepdims)
        assert not out.requires_grad and out.dtype.kind == "i"
        np.testing.assert_array_equal(out.numpy(), getattr(np, name)(x, axis=axis, keepdims=keepdims))
