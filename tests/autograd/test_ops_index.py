"""Indexing (basic, integer arrays, boolean masks) and embedding lookup with scatter-add backward."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from autograd import Tensor, embedding
from autograd.ops import index as index_mod
from tests.autograd.opcheck import check_op, keeps_float32, randn, seeds, shapes_nd


@st.composite
def basic_index(draw, shape):
    items = []
    for n in shape:
        kind = draw(st.sampled_from(["slice", "int", "all"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            start = draw(st.integers(-n, n - 1))
            step = draw(st.sampled_from([1, 2, -1]))
            items.append(slice(start, None, step))
        else:
            items.append(slice(None))
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), None)
    return tuple(items)


@given(shape=shapes_nd, seed=seeds, data=st.data())
def test_basic_indexing(shape, seed, data):
    idx = data.draw(basic_index(shape))
    x = randn(shape, seed)
    if x[idx].size == 0:
        return
    check_op(lambda t: t[idx], lambda a: a[idx], [x])


@given(shape=shapes_nd, seed=seeds, data=st.data())
def test_integer_array_on_the_first_axis_with_repeats(shape, seed, data):
    ids = np.array(data.draw(st.lists(st.integers(-shape[0], shape[0] - 1), min_size=1, max_size=6)))
    x = randn(shape, seed)
    check_op(lambda t: t[ids], lambda a: a[ids], [x])
    check_op(lambda t: t[Tensor(ids)], lambda a: a[ids], [x])  # a Tensor index works too


@given(shape=shapes_nd, seed=seeds)
def test_boolean_mask(shape, seed):
    x = randn(shape, seed)
    mask = randn(shape, seed, 1) > 0
    if not mask.any():
        return
    check_op(lambda t: t[mask], lambda a: a[mask], [x])
    row_mask = mask.reshape(-1)[: shape[0]]
    if row_mask.any():
        check_op(lambda t: t[row_mask], lambda a: a[row_mask], [x])


@given(seed=seeds)
def test_mixed_advanced_index_with_repeats(seed):
    x = randn((3, 4, 2), seed)
    rows, cols = np.array([0, 2, 0, 0]), np.array([1, 1, 1, 3])
    check_op(lambda t: t[rows, cols], lambda a: a[rows, cols], [x])
    check_op(lambda t: t[:, cols], lambda a: a[:, cols], [x])
    check_op(lambda t: t[rows, 1:, 0], lambda a: a[rows, 1:, 0], [x])


@given(v=st.integers(1, 12), c=st.integers(1, 4), seed=seeds, data=st.data())
def test_embedding_matches_take_and_gradcheck(v, c, seed, data):
    ids_shape = data.draw(st.sampled_from([(5,), (2, 3), (1, 1, 4)]))
    ids = np.random.default_rng(seed).integers(0, v, ids_shape)
    w = randn((v, c), seed)
    check_op(lambda t: embedding(t, ids), lambda a: a[ids], [w])


@pytest.mark.parametrize("V", [50, 500])  # ids dense (n >= V) and sparse (n < V)
def test_embedding_backward_equals_add_at(V):
    rng = np.random.default_rng(0)
    C = 8
    ids = rng.integers(0, V, (4, 30))
    ids[0, :10] = 7  # many repeats of one id
    w = Tensor(rng.standard_normal((V, C)), requires_grad=True)
    g = rng.standard_normal((4, 30, C))
    embedding(w, ids).backward(g)
    want = np.zeros((V, C))
    np.add.at(want, ids.reshape(-1), g.reshape(-1, C))
    np.testing.assert_allclose(w.grad, want, rtol=1e-12, atol=1e-12)


@given(v=st.integers(1, 300), n=st.integers(1, 40), seed=seeds)
def test_scatter_rows_equals_add_at(v, n, seed):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, v, n) if seed % 2 else rng.integers(0, min(v, 3), n)  # few or many repeats
    g = rng.standard_normal((n, 3))
    want = np.zeros((v, 3))
    np.add.at(want, rows, g)
    np.testing.assert_allclose(index_mod.scatter_rows(rows, g, v), want, rtol=1e-12, atol=1e-12)


def test_embedding_keeps_float32_and_rejects_bad_ids():
    keeps_float32(lambda t: embedding(t, np.array([[0, 1], [1, 1]])), randn((3, 2), 0))
    w = Tensor(np.ones((5, 2)))
    with pytest.raises(IndexError, match=r"embedding: id 5 is outside \[0, 5\)$"):
        embedding(w, np.array([0, 5]))
    with pytest.raises(IndexError, match=r"embedding: id -1 is outside \[0, 5\)$"):
        embedding(w, np.array([[3, -1], [7, 0]]))            # the first bad id in order
    np.testing.assert_array_equal(embedding(w, np.array([4, 0]), check_range=False).numpy(), np.ones((2, 2)))
    with pytest.raises(TypeError, match="embedding: ids must be integers"):
        embedding(w, np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"weight must be \(V, C\)"):
        embedding(Tensor(np.ones(5)), np.array([0]))


def test_getitem_error_names_the_shape():
    with pytest.raises(IndexError, match=r"shape \(2, 3\)"):
        Tensor(np.ones((2, 3)))[5]


def test_getitem_keeps_float32():
    keeps_float32(lambda t: t[np.array([0, 0, 2])][:, 1:], randn((3, 4), 0))


@given(shape=shapes_nd, seed=seeds, data=st.data())
def test_gather_along_any_axis_with_repeats(shape, seed, data):
    from autograd import gather

    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    picks = data.draw(st.integers(1, 4))
    idx_shape = list(shape)
    idx_shape[axis] = picks
    index = np.random.default_rng(seed).integers(0, shape[axis], idx_shape)
    check_op(lambda t: gather(t, index, axis), lambda a: np.take_along_axis(a, index, axis), [randn(shape, seed)])


def test_gather_errors_are_named():
    from autograd import gather

    x = Tensor(np.ones((2, 3)))
    with pytest.raises(ValueError, match="gather: index of shape"):
        gather(x, np.zeros(2, dtype=int), axis=1)
    with pytest.raises(IndexError, match="gather"):
        gather(x, np.full((2, 1), 7), axis=1)
