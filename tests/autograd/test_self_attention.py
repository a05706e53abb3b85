"""The fused attention sublayer (autograd/ops/self_attention.py) against the same sublayer composed
from the engine's primitive ops (projections, head reshapes, attention from primitives), forward
and every gradient, float64; finite differences; one thread's bits on the pool; where
nn.MultiHeadAttention takes it."""
from __future__ import annotations

import numpy as np
import pytest

import nn
from autograd import Tensor, gradcheck, ops, parallel
from autograd.ops import causal_attention as ca
from autograd.ops import self_attention as sa
from tests.autograd.opcheck import assert_same_bits_on_one_thread_and_two
from tests.autograd.test_fused import assert_same, attention_ref

RNG = np.random.default_rng(9)
H = 2


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Query blocks of 16 rows from T = 32 on, so that small tests cover several blocks."""
    monkeypatch.setattr(ca, "MIN_ROWS", 16)


def _composed(x, w_qkv, b_qkv, w_out, b_out):
    B, T, C = x.shape
    qkv = ops.linear(x, w_qkv, b_qkv).reshape(B, T, 3 * H, C // H).transpose(1, 2)   # (B, 3H, T, hs)
    q, k, v = ops.split(qkv, [H, H, H], axis=1)
    y = attention_ref(q, k, v, causal=True).transpose(1, 2).reshape(B, T, C)
    return ops.linear(y, w_out, b_out)


def _fused(x, w_qkv, b_qkv, w_out, b_out):
    return sa.causal_self_attention(x, w_qkv, b_qkv, w_out, b_out, H)


def _arrays(B, T, C):
    return [RNG.standard_normal((B, T, C)), 0.5 * RNG.standard_normal((C, 3 * C)), RNG.standard_normal(3 * C),
            0.5 * RNG.standard_normal((C, C)), RNG.standard_normal(C)]


@pytest.mark.parametrize("B, T", [(1, 5), (3, 9), (2, 40), (5, 33)])
def test_fused_sublayer_equals_the_composed_one(B, T):
    assert_same(_fused, _composed, _arrays(B, T, 6))


def test_fused_sublayer_without_biases_and_with_some_gradients():
    x, wq, _, wo, _ = _arrays(2, 35, 4)
    assert_same(lambda x, wq, wo: sa.causal_self_attention(x, wq, None, wo, None, H),
                lambda x, wq, wo: _composed(x, wq, None, wo, None), [x, wq, wo])
    assert_same(_fused, _composed, _arrays(2, 12, 4), grad_inputs=[1, 4])


def test_fused_sublayer_passes_a_finite_difference_check():
    ts = [Tensor(a, requires_grad=True) for a in _arrays(2, 33, 4)]
    assert gradcheck(_fused, ts)


def test_fused_sublayer_on_the_pool_gives_one_threads_bits(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL", 16)
    monkeypatch.setattr(parallel, "GEMM_MIN_FLOPS", 16)
    arrays = [a.astype(np.float32) for a in _arrays(5, 40, 8)]
    seed = RNG.standard_normal((5, 40, 8)).astype(np.float32)
    assert_same_bits_on_one_thread_and_two(_fused, arrays, seed)


def test_multi_head_attention_fuses_plain_causal_self_attention_only():
    x = Tensor(RNG.standard_normal((2, 12, 8)).astype(np.float32), requires_grad=True)
    attn = nn.MultiHeadAttention(8, 2)
    fused = attn(x)
    assert isinstance(fused._node, sa.CausalSelfAttention)
    composed = attn.c_proj(_heads_merged(attn, x))
    np.testing.assert_allclose(fused.data, composed.data, rtol=1e-5, atol=1e-6)
    rope = nn.RotaryEmbedding(4, 16)
    for other in (nn.MultiHeadAttention(8, 2, rope=rope), nn.MultiHeadAttention(8, 2, qk_norm=True),
                  nn.MultiHeadAttention(8, 2, n_kv_head=1), nn.MultiHeadAttention(8, 2, causal=False)):
        assert not isinstance(other(x)._node, sa.CausalSelfAttention)
    assert not isinstance(attn(x, attn_mask=np.ones((12, 12), bool))._node, sa.CausalSelfAttention)


def _heads_merged(attn, x):
    B, T, C = x.shape
    qkv = attn.c_attn(x).reshape(B, T, 3 * 2, C // 2).transpose(1, 2)
    q, k, v = ops.split(qkv, [2, 2, 2], axis=1)
    return ops.scaled_dot_product_attention(q, k, v, causal=True).transpose(1, 2).reshape(B, T, C)
