"""The fused attention sublayer (autograd/ops/self_attention.py) against the same sublayer composed
from the engine's primitive ops (projections, head reshapes, RoPE, attention from primitives),
forward and every gradient, float64; finite differences; one thread's bits on the pool; where
nn.MultiHeadAttention takes it."""
from __future__ import annotations

import numpy as np
import pytest

import autograd
import nn
from autograd import Tensor, gradcheck, ops, parallel
from autograd.ops import causal_attention as ca
from autograd.ops import self_attention as sa
from tests.autograd.opcheck import assert_same_bits_on_one_thread_and_two
from tests.autograd.test_fused import assert_same, attention_ref, layer_norm_ref, rms_norm_ref

RNG = np.random.default_rng(9)
H = 2


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Query blocks of 16 rows from T = 32 on, so that small tests cover several blocks."""
    monkeypatch.setattr(ca, "MIN_ROWS", 16)


def _composed(x, w_qkv, b_qkv, w_out, b_out, rope=None):
    """rope: None or (cos, sin) (T, hs / 2), the rope op on q and k (B, H, T, hs)."""
    B, T, C = x.shape
    qkv = ops.linear(x, w_qkv, b_qkv).reshape(B, T, 3 * H, C // H).transpose(1, 2)   # (B, 3H, T, hs)
    q, k, v = ops.split(qkv, [H, H, H], axis=1)
    if rope is not None:
        q, k = ops.rope(q, *rope), ops.rope(k, *rope)
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


def test_multi_head_attention_fuses_causal_self_attention_with_or_without_rope_only():
    x = Tensor(RNG.standard_normal((2, 12, 8)).astype(np.float32), requires_grad=True)
    attn = nn.MultiHeadAttention(8, 2)
    fused = attn(x)
    assert isinstance(fused._node, sa.CausalSelfAttention)
    composed = attn.c_proj(_heads_merged(attn, x))
    np.testing.assert_allclose(fused.data, composed.data, rtol=1e-5, atol=1e-6)
    rope = nn.RotaryEmbedding(4, 16)
    assert isinstance(nn.MultiHeadAttention(8, 2, rope=rope)(x)._node, sa.CausalSelfAttention)
    for other in (nn.MultiHeadAttention(8, 2, rope=rope, qk_norm=True), nn.MultiHeadAttention(8, 2, qk_norm=True),
                  nn.MultiHeadAttention(8, 2, n_kv_head=1), nn.MultiHeadAttention(8, 2, causal=False)):
        assert not isinstance(other(x)._node, sa.CausalSelfAttention)
    assert not isinstance(attn(x, attn_mask=np.ones((12, 12), bool))._node, sa.CausalSelfAttention)


def _heads_merged(attn, x):
    B, T, C = x.shape
    qkv = attn.c_attn(x).reshape(B, T, 3 * 2, C // 2).transpose(1, 2)
    q, k, v = ops.split(qkv, [2, 2, 2], axis=1)
    return ops.scaled_dot_product_attention(q, k, v, causal=True).transpose(1, 2).reshape(B, T, C)


# ---- with RoPE: q and k rotated in place after the projection, their gradients rotated back ----
def rope_tables(T, hs, dtype=np.float64):
    """cos, sin (T, hs / 2) of random angles over the whole turn (every pair rotates a lot)."""
    theta = RNG.uniform(-np.pi, np.pi, (T, hs // 2))
    return np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)


def _with_rope(rope, norm=None, residual=False):
    """(fused, composed) over (x, nw, nb, w_qkv, b_qkv, w_out, b_out); norm None, "layer" or
    "rms" (nw, nb unused without it; nb unused by an RMSNorm)."""
    eps = 1e-5

    def normed(x, nw, nb):
        return x if norm is None else layer_norm_ref(x, nw, nb, eps) if norm == "layer" else rms_norm_ref(x, nw, eps)

    def fused(x, nw, nb, wq, bq, wo, bo):
        spec = None if norm is None else (norm == "layer", nw, nb if norm == "layer" else None, eps)
        return sa.causal_self_attention(x, wq, bq, wo, bo, H, norm=spec, residual=residual, rope=rope)

    def composed(x, nw, nb, wq, bq, wo, bo):
        out = _composed(normed(x, nw, nb), wq, bq, wo, bo, rope=rope)
        return x + out if residual else out
    return fused, composed


def _norm_arrays(B, T, C):
    """(x, nw, nb, w_qkv, b_qkv, w_out, b_out)."""
    x, wq, bq, wo, bo = _arrays(B, T, C)
    return [x, 1 + 0.3 * RNG.standard_normal(C), RNG.standard_normal(C), wq, bq, wo, bo]


@pytest.mark.parametrize("B, T", [(1, 5), (3, 9), (2, 40), (5, 33), (1, 64)])
def test_fused_sublayer_with_rope_equals_the_composed_one(B, T):
    fused, composed = _with_rope(rope_tables(T, 4))
    assert_same(fused, composed, _norm_arrays(B, T, 8), grad_inputs=[0, 3, 4, 5, 6])


def test_fused_sublayer_with_rope_without_biases():
    fused, composed = _with_rope(rope_tables(35, 2))
    arrays = _norm_arrays(2, 35, 4)
    arrays[4] = arrays[6] = None
    assert_same(lambda x, wq, wo: fused(x, None, None, wq, None, wo, None),
                lambda x, wq, wo: composed(x, None, None, wq, None, wo, None), [arrays[i] for i in (0, 3, 5)])


@pytest.mark.parametrize("norm", ["layer", "rms"])
@pytest.mark.parametrize("residual", [True, False])
def test_prenorm_sublayer_with_rope_equals_the_composed_one(norm, residual):
    fused, composed = _with_rope(rope_tables(33, 4), norm, residual)
    grads = range(7) if norm == "layer" else [0, 1, 3, 4, 5, 6]      # an RMSNorm has no shift
    assert_same(fused, composed, _norm_arrays(3, 33, 8), rtol=1e-9, atol=1e-11, grad_inputs=grads)


def test_fused_sublayer_with_rope_passes_a_finite_difference_check():
    fused, _ = _with_rope(rope_tables(33, 4), "rms", residual=True)
    arrays = _norm_arrays(2, 33, 8)
    ts = [Tensor(a, requires_grad=i != 2) for i, a in enumerate(arrays)]
    assert gradcheck(fused, ts)


def test_fused_sublayer_with_rope_on_the_pool_gives_one_threads_bits(monkeypatch):
    monkeypatch.setattr(parallel, "MIN_PARALLEL", 16)
    monkeypatch.setattr(parallel, "GEMM_MIN_FLOPS", 16)
    arrays = [a.astype(np.float32) for a in _arrays(5, 40, 8)]
    rope = rope_tables(40, 4, np.float32)
    seed = RNG.standard_normal((5, 40, 8)).astype(np.float32)
    assert_same_bits_on_one_thread_and_two(lambda *ts: sa.causal_self_attention(*ts, H, rope=rope), arrays, seed)


@pytest.mark.parametrize("cos_shape, sin_shape", [((9, 2), (9, 2)), ((8, 1), (8, 1)), ((8, 2), (8, 1)),
                                                  ((8,), (8,))])
def test_fused_sublayer_rejects_rope_tables_of_the_wrong_shape(cos_shape, sin_shape):
    x, wq, bq, wo, bo = (Tensor(a) for a in _arrays(2, 8, 8))      # T = 8, hs = 4: tables (8, 2)
    with pytest.raises(ValueError, match=r"\(T, hs / 2\) = \(8, 2\).*got cos"):
        sa.causal_self_attention(x, wq, bq, wo, bo, H, rope=(np.ones(cos_shape), np.ones(sin_shape)))
    x, wq, bq, wo, bo = (Tensor(a) for a in _arrays(2, 8, 6))      # hs = 3: odd, no halves
    with pytest.raises(ValueError, match="hs=3"):
        sa.causal_self_attention(x, wq, bq, wo, bo, H, rope=(np.ones((8, 1)), np.ones((8, 1))))


def test_multi_head_attention_with_rope_takes_the_fused_op_and_equals_its_composed_path():
    B, T, C, offset = 2, 40, 8, 3
    attn = nn.MultiHeadAttention(C, H, rope=nn.RotaryEmbedding(C // H, 64)).to(dtype=np.float64)
    x = RNG.standard_normal((B, T, C))
    seed = RNG.standard_normal((B, T, C))

    def run(hook, pos_offset):
        attn.hook = hook
        xt = Tensor(x, requires_grad=True)
        out = attn(xt, pos_offset=pos_offset)
        node = out._node
        attn.zero_grad()
        out.backward(seed)
        return node, out.data, [xt.grad] + [p.grad.copy() for p in attn.parameters()]

    for pos in (None, offset):
        node, fused, fused_grads = run(None, pos)
        assert isinstance(node, sa.CausalSelfAttention)
        node, composed, grads = run(lambda name, t: t, pos)  # a hook spells the attention out
        assert not isinstance(node, sa.CausalSelfAttention)
        np.testing.assert_allclose(fused, composed, rtol=1e-10, atol=1e-12)
        for a, b in zip(fused_grads, grads):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    attn.hook = None
    cache = nn.KVCache(B, H, T, C // H, dtype=np.float64)
    with autograd.no_grad():
        uncached = attn(Tensor(x)).data
        first = attn(Tensor(x[:, :7]), kv_cache=cache).data    # a prefill, then the rest on the cache
        rest = attn(Tensor(x[:, 7:]), kv_cache=cache).data
    np.testing.assert_allclose(np.concatenate([first, rest], axis=1), uncached, rtol=1e-10, atol=1e-12)
