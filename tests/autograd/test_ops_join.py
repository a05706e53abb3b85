"""concat, stack, split, chunk."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from autograd import Tensor, chunk, concat, split, stack
from tests.autograd.opcheck import check_op, keeps_float32, randn, seeds, shapes_nd


@given(shape=shapes_nd, seed=seeds, data=st.data())
def test_concat_along_any_axis(shape, seed, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    arrays = []
    for i, n in enumerate(sizes):
        s = list(shape)
        s[axis] = n
        arrays.append(randn(tuple(s), seed, i))
    check_op(lambda *ts: concat(list(ts), axis=axis), lambda *a: np.concatenate(a, axis=axis), arrays)


@given(shape=shapes_nd, seed=seeds, data=st.data())
def test_stack_along_any_axis(shape, seed, data):
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    n = data.draw(st.integers(1, 3))
    arrays = [randn(shape, seed, i) for i in range(n)]
    check_op(lambda *ts: stack(list(ts), axis=axis), lambda *a: np.stack(a, axis=axis), arrays)


@given(shape=shapes_nd, seed=seeds, data=st.data())
def test_split_and_chunk_pieces_and_gradients(shape, seed, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    length = shape[axis]
    size = data.draw(st.integers(1, length))
    n_chunks = data.draw(st.integers(1, length))
    weights = [float(i + 1) for i in range(length + 1)]
    x = randn(shape, seed)

    pieces = split(Tensor(x), size, axis=axis)
    want = np.split(x, range(size, length, size), axis=axis)
    assert [p.shape for p in pieces] == [w.shape for w in want]
    for p, w in zip(pieces, want):
        np.testing.assert_array_equal(p.numpy(), w)

    # each piece used with its own weight; some pieces unused
    def f(t):
        parts = split(t, size, axis=axis)
        return sum((p * weights[i]).sum() for i, p in enumerate(parts) if i % 2 == 0)
    check_op(lambda t: f(t).reshape(1), None, [x])

    def g(t):
        parts = chunk(t, n_chunks, axis=axis)
        return concat([p * weights[i] for i, p in enumerate(parts)], axis=axis)
    check_op(g, None, [x])


def test_split_by_sections_and_reuse_with_retain_graph():
    x = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    a, b = split(x, [1, 2], axis=1)
    assert a.shape == (2, 1) and b.shape == (2, 2)
    loss = (a * 3).sum() + (b * b).sum()
    loss.backward(retain_graph=True)
    first = x.grad.copy()
    loss.backward()
    np.testing.assert_allclose(x.grad, 2 * first)
    np.testing.assert_allclose(first, [[3, 2, 4], [3, 8, 10]])


def test_join_ops_keep_float32():
    keeps_float32(lambda t: concat(split(t, 2, axis=1)[::-1], axis=1), randn((3, 4), 0))
    keeps_float32(lambda t: stack(chunk(t, 3), axis=1), randn((3, 4), 0))


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match=r"concat: shapes \(2, 3\) and \(3, 3\) differ outside axis 1"):
        concat([Tensor(np.ones((2, 3))), Tensor(np.ones((3, 3)))], axis=1)
    with pytest.raises(ValueError, match="stack: all tensors must have one shape"):
        stack([Tensor(np.ones(2)), Tensor(np.ones(3))])
    with pytest.raises(ValueError, match="do not add up"):
        split(Tensor(np.ones(5)), [2, 2])
    with pytest.raises(ValueError, match="non-empty list"):
        concat([])
