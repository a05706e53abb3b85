"""Causal attention by query blocks (autograd/ops/causal_attention.py) against the same attention
composed from primitive ops and against the full masked op, forward and backward, float64;
finite differences; the pool's blocks give one thread's bits; scores beyond exp's range."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from autograd import Tensor, gradcheck, ops, parallel
from autograd.ops import causal_attention as ca
from autograd.ops.attention import ScaledDotProductAttention
from autograd.ops.softmax import softmax_array
from tests.autograd.opcheck import assert_same_bits_on_one_thread_and_two
from tests.autograd.test_fused import assert_same, attention_ref

RNG = np.random.default_rng(77)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 16 rows from T = 32 on, so that small tests still cut several blocks."""
    monkeypatch.setattr(ca, "MIN_ROWS", 16)


def _blocked(q, k, v):
    return ca.causal_attention(q, k, v, 1.0 / math.sqrt(q.shape[-1]))


def _full(q, k, v):
    return ScaledDotProductAttention.apply(q, k, v, causal=True)


def _qkv(B, H, T, hs, hv=None):
    return [RNG.standard_normal((B, H, T, d)) for d in (hs, hs, hv or hs)]


@pytest.mark.parametrize("T", [32, 37, 64, 100])
def test_blocks_equal_the_attention_composed_from_primitives(T):
    assert ca.applies(np.zeros((1, 1, T, 1)), np.zeros((1, 1, T, 1)), True, None, 0.0)
    assert_same(_blocked, attention_ref, _qkv(2, 3, T, 5, hv=4))


@pytest.mark.parametrize("T", [32, 48, 256])
def test_blocks_equal_the_full_masked_op(T):
    assert_same(_blocked, _full, _qkv(2, 2, T, 8))


def test_default_blocks_with_a_shorter_last_one_equal_the_full_masked_op(monkeypatch):
    monkeypatch.setattr(ca, "MIN_ROWS", 64)
    assert [r1 - r0 for r0, r1 in ca.layout(160)] == [64, 64, 32]
    assert_same(_blocked, _full, _qkv(1, 2, 160, 8))


def test_the_public_op_takes_the_blocks_for_causal_self_attention():
    q, k, v = (Tensor(a, requires_grad=True) for a in _qkv(1, 2, 64, 4))
    assert isinstance(ops.scaled_dot_product_attention(q, k, v)._node, ca.CausalAttention)
    assert isinstance(ops.scaled_dot_product_attention(q, k, v, causal=False)._node, ScaledDotProductAttention)


def test_blocks_read_strided_views_of_a_fused_projection():
    B, T, H, hs = 2, 40, 3, 4
    qkv = RNG.standard_normal((B, T, 3 * H, hs)).transpose(0, 2, 1, 3)    # (B, 3H, T, hs) view

    def split(fn):
        return lambda x: fn(x[:, :H], x[:, H:2 * H], x[:, 2 * H:])

    assert_same(split(_blocked), split(attention_ref), [qkv])


def test_blocks_pass_a_finite_difference_check():
    q, k, v = (Tensor(a, requires_grad=True) for a in _qkv(2, 2, 33, 3))
    assert gradcheck(_blocked, [q, k, v])


def test_only_whole_causal_self_attention_is_blocked():
    q = np.zeros((2, 2, 64, 8))
    assert ca.applies(q, q, True, None, 0.0)
    assert not ca.applies(q, q, False, None, 0.0)
    assert not ca.applies(q, q, True, np.ones((64, 64), bool), 0.0)
    assert not ca.applies(q, q, True, None, 0.1)
    assert not ca.applies(q, q[:, :, :1], True, None, 0.0)          # a decode step
    assert not ca.applies(q[:, :, :16], q[:, :, :16], True, None, 0.0)  # too short for two blocks


def test_blocks_on_the_pool_give_one_threads_bits(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL", 16)
    arrays = [a.astype(np.float32) for a in _qkv(4, 2, 64, 8)]
    seed = RNG.standard_normal((4, 2, 64, 8)).astype(np.float32)

    assert_same_bits_on_one_thread_and_two(_blocked, arrays, seed)


def _offset(offset: float, dtype):
    """q, k, v (1, 2, 32, 4) whose query 20 (of the second block, in head 1) scores every key
    `offset` (the other queries' scores within about +-3)."""
    q, k, v = (a.astype(dtype) for a in _qkv(1, 2, 32, 4))
    k[..., 0] = 1.0                          # the first component offsets a query's scores
    q[..., 0] = 0.0
    q[0, 1, 20] = 0.0
    q[0, 1, 20, 0] = offset * math.sqrt(4)   # times the scale's inverse
    return q, k, v


@pytest.mark.parametrize("offset, dtype", [(1000.0, np.float64), (100.0, np.float32), (88.0, np.float32),
                                           (-1000.0, np.float64), (-100.0, np.float32)])
def test_a_query_beyond_exps_range_is_normalised_by_its_own_max(offset, dtype, monkeypatch):
    # unshifted, its exponentials or their sum (88: 21 keys of e^88) overflow (a NaN row),
    # underflow to zero (a NaN row) or to float32's subnormals (digits lost): its block, queries
    # 16..31 of head 1, is redone by the stable softmax, each query shifted by its own max
    q, k, v = _offset(offset, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # what overflows is found and redone: no warning
        got = _blocked(*(Tensor(a) for a in (q, k, v))).data
    ref = _full(*(Tensor(a.astype(np.float64)) for a in (q, k, v))).data
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(ca, "_keys_softmax", ca._stable_keys_softmax)
    stable = _blocked(*(Tensor(a) for a in (q, k, v))).data
    np.testing.assert_array_equal(got[0, 1, 16:], stable[0, 1, 16:])
    if dtype == np.float64:
        monkeypatch.undo()
        assert_same(_blocked, _full, [q, k, v])


def test_only_the_blocks_beyond_exps_range_are_redone(monkeypatch):
    q, k, v = _offset(1000.0, np.float64)
    q, k, v = (np.concatenate([a, a[:, ::-1]]) for a in (q, k, v))     # 2 entries, heads swapped
    redone = []
    monkeypatch.setattr(ca, "softmax_array", lambda p, **kw: redone.append(p.shape) or softmax_array(p, **kw))
    assert_same(_blocked, _full, [q, k, v])
    # of 8 (entry, head, query block)s, the two that hold query 20 (keys 0..31 down, queries 16..31)
    assert redone == [(32, 16), (32, 16)]
