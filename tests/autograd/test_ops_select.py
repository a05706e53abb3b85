"""where, masked_fill, tril/triu, comparisons."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from autograd import Tensor, masked_fill, where
from tests.autograd.opcheck import check_op, keeps_float32, randn, seeds, shapes_nd


@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, max_side=3), seed=seeds)
def test_where_broadcasts_all_three(shapes, seed):
    cs, as_, bs = shapes.input_shapes
    cond = randn(cs, seed, 2) > 0
    check_op(lambda a, b: where(cond, a, b), lambda a, b: np.where(cond, a, b),
             [randn(as_, seed, 0), randn(bs, seed, 1)])


def test_where_with_a_scalar_branch():
    cond = np.array([True, False, True])
    check_op(lambda a: where(cond, a, 0.0), lambda a: np.where(cond, a, 0.0), [randn(3, 0)])
    check_op(lambda a: where(Tensor(cond), -1.0, a), lambda a: np.where(cond, -1.0, a), [randn(3, 0)])


@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=1, min_dims=0, max_dims=3, max_side=3), seed=seeds,
       value=st.sampled_from([0.0, -1e9, float("-inf"), 2.5]))
def test_masked_fill_with_a_broadcast_mask(shapes, seed, value):
    mask = randn(shapes.input_shapes[0], seed, 1) > 0
    x = randn(shapes.result_shape, seed)
    if np.isinf(value):  # -inf (attention masks) is checked through exp, which maps it to 0
        check_op(lambda t: t.masked_fill(mask, value).exp(), lambda a: np.exp(np.where(mask, value, a)), [x])
    else:
        check_op(lambda t: t.masked_fill(mask, value), lambda a: np.where(mask, value, a), [x])


@given(shape=shapes_nd.filter(lambda s: len(s) >= 2), k=st.integers(-2, 2), seed=seeds)
def test_tril_and_triu(shape, k, seed):
    x = randn(shape, seed)
    check_op(lambda t: t.tril(k), lambda a: np.tril(a, k), [x])
    check_op(lambda t: t.triu(k), lambda a: np.triu(a, k), [x])


def test_comparisons_give_boolean_tensors_outside_the_graph():
    x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    for got, want in [(x < 2, [True, False, False]), (x <= 2, [True, True, False]),
                      (x > 2.0, [False, False, True]), (x >= x, [True, True, True])]:
        assert got.dtype == bool and not got.requires_grad
        np.testing.assert_array_equal(got.numpy(), want)
    assert (3 > x).numpy().tolist() == [True, True, False]


def test_equality_is_elementwise_like_the_other_comparisons():
    ids = Tensor(np.array([[5, 0, 7], [0, 0, 5]]))
    eot = 5
    np.testing.assert_array_equal((ids == eot).numpy(), [[True, False, False], [False, False, True]])
    np.testing.assert_array_equal((ids != eot).numpy(), [[False, True, True], [True, True, False]])
    np.testing.assert_array_equal((eot == ids).numpy(), (ids == eot).numpy())   # reflected
    np.testing.assert_array_equal((np.int64(5) == ids).numpy(), (ids == eot).numpy())
    x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    same = x == Tensor(np.array([1.0, 0.0, 3.0]))
    assert same.dtype == bool and not same.requires_grad and same.is_leaf
    np.testing.assert_array_equal(same.numpy(), [True, False, True])
    np.testing.assert_array_equal((x != x).numpy(), [False, False, False])
    np.testing.assert_array_equal((x == np.array([[1.0], [2.0]])).numpy(),
                                  [[True, False, False], [False, True, False]])   # broadcasts
    assert bool(Tensor(np.array(3)) == 3) and not bool(Tensor(np.array(3)) != 3)
    assert (x == None) is False and (x != None) is True and (x == "x") is False   # noqa: E711


def test_equality_of_unbroadcastable_shapes_is_named():
    with pytest.raises(ValueError, match=r"eq: shapes \(2,\) and \(3,\) cannot be broadcast"):
        Tensor(np.ones(2)) == Tensor(np.ones(3))


def test_tensors_hash_by_identity_so_dicts_and_sets_still_work():
    a, b = Tensor(np.ones(3)), Tensor(np.ones(3))
    assert hash(a) == object.__hash__(a) and hash(a) != hash(b)
    table = {a: "a", b: "b"}
    assert table[a] == "a" and table[b] == "b"
    assert len({a, b, a}) == 2 and a in {a} and b not in {a}


def test_masking_keeps_float32():
    mask = np.array([[True, False], [False, False]])
    keeps_float32(lambda t: where(mask, t, 0.0).masked_fill(~mask, 1.0).tril(), randn((2, 2), 0))


def test_bad_masks_are_named():
    x = Tensor(np.ones((2, 3)))
    with pytest.raises(TypeError, match="masked_fill: mask must be boolean"):
        x.masked_fill(np.ones((2, 3)), 0.0)
    with pytest.raises(ValueError, match=r"masked_fill: mask of shape \(4,\) does not broadcast"):
        x.masked_fill(np.ones(4, dtype=bool), 0.0)
    with pytest.raises(ValueError, match="where: shapes"):
        where(np.ones(2, dtype=bool), x, Tensor(np.ones(4)))
