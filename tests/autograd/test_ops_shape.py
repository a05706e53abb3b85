"""Shape movement: reshape/view, transpose, permute, squeeze, unsqueeze, expand, flatten."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from autograd import Tensor
from tests.autograd.opcheck import check_op, keeps_float32, randn, seeds, shapes, shapes_nd


@given(shape=shapes, seed=seeds, data=st.data())
def test_reshape_to_any_factorisation(shape, seed, data):
    x = randn(shape, seed)
    n = x.size
    first = data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    target = (first, -1) if data.draw(st.booleans()) else (n // first, first)
    check_op(lambda t: t.reshape(*target), lambda a: a.reshape(target), [x])
    check_op(lambda t: t.view(target), lambda a: a.reshape(target), [x])


def test_reshape_of_a_contiguous_tensor_is_a_view():
    x = Tensor(np.arange(12.0))
    y = x.reshape(3, 4)
    assert np.shares_memory(x.data, y.data)


@given(shape=shapes_nd.filter(lambda s: len(s) >= 2), seed=seeds, data=st.data())
def test_transpose_any_two_axes(shape, seed, data):
    nd = len(shape)
    a, b = data.draw(st.integers(-nd, nd - 1)), data.draw(st.integers(-nd, nd - 1))
    check_op(lambda t: t.transpose(a, b), lambda x: np.swapaxes(x, a, b), [randn(shape, seed)])
    check_op(lambda t: t.T, lambda x: np.swapaxes(x, -1, -2), [randn(shape, seed)])


@given(shape=shapes_nd, seed=seeds, data=st.data())
def test_permute(shape, seed, data):
    axes = tuple(data.draw(st.permutations(range(len(shape)))))
    check_op(lambda t: t.permute(*axes), lambda x: np.transpose(x, axes), [randn(shape, seed)])


@given(shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=3), seed=seeds, data=st.data())
def test_squeeze_and_unsqueeze(shape, seed, data):
    x = randn(shape, seed)
    check_op(lambda t: t.squeeze(), lambda a: np.squeeze(a), [x])
    ones = [i for i, n in enumerate(shape) if n == 1]
    if ones:
        ax = data.draw(st.sampled_from(ones))
        check_op(lambda t: t.squeeze(ax), lambda a: np.squeeze(a, ax), [x])
    ax = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check_op(lambda t: t.unsqueeze(ax), lambda a: np.expand_dims(a, ax), [x])


@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=1, min_dims=0, max_dims=3, max_side=3), seed=seeds)
def test_broadcast_to_and_expand(shapes, seed):
    src, target = shapes.input_shapes[0], shapes.result_shape
    x = randn(src, seed)
    check_op(lambda t: t.broadcast_to(target), lambda a: np.broadcast_to(a, target), [x])
    lead = target[: len(target) - len(src)]
    expand_to = lead + tuple(-1 if s == t else t for s, t in zip(src, target[len(lead):]))
    check_op(lambda t: t.expand(*expand_to), lambda a: np.broadcast_to(a, target), [x])


@given(shape=shapes_nd, seed=seeds, data=st.data())
def test_flatten_a_range_of_axes(shape, seed, data):
    nd = len(shape)
    start = data.draw(st.integers(0, nd - 1))
    end = data.draw(st.integers(start, nd - 1))
    want = shape[:start] + (int(np.prod(shape[start:end + 1])),) + shape[end + 1:]
    check_op(lambda t: t.flatten(start, end), lambda a: a.reshape(want), [randn(shape, seed)])


def test_shape_ops_keep_float32():
    keeps_float32(lambda t: t.reshape(6, 2).T.unsqueeze(0).expand(3, 2, 6).flatten().squeeze(), randn((3, 4), 0))


def test_reshape_error_names_both_shapes():
    with pytest.raises(ValueError, match=r"reshape: cannot reshape a tensor of shape \(2, 3\) \(size 6\) into \(4, -1\)"):
        Tensor(np.ones((2, 3))).reshape(4, -1)


def test_bad_permutation_and_squeeze_are_named():
    x = Tensor(np.ones((2, 3)))
    with pytest.raises(ValueError, match="permute"):
        x.permute(0, 0)
    with pytest.raises(ValueError, match="squeeze: axis 0 of shape"):
        x.squeeze(0)
    with pytest.raises(ValueError, match="broadcast_to: cannot broadcast"):
        x.broadcast_to((4, 3))
