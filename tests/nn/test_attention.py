"""MultiHeadAttention and KVCache: reference values, gradients, symmetry, positions, caching."""
import math
import itertools

import numpy as np
import pytest

import autograd
import nn
from autograd import Tensor, no_grad
from tests.nn.gradcheck_util import check_gradients, f64


@pytest.fixture(autouse=True)
def _seed():
    autograd.manual_seed(0)


def rms(a, gain, eps):
    return a / np.sqrt((a * a).mean(-1, keepdims=True) + eps) * gain


def attention_reference(mha, x, causal, rope=None):
    """Per-head loops in NumPy: qkv, split, (qk-norm), (rope), softmax(q k^T / sqrt(hs)), merge, project."""
    B, T, C = x.shape
    H, hs = mha.n_head, C // mha.n_head
    qkv = x @ mha.c_attn.weight.data + (mha.c_attn.bias.data if mha.c_attn.bias is not None else 0)
    q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
    out = np.zeros((B, T, C))
    for b, h in itertools.product(range(B), range(H)):
        qh, kh, vh = (a[b, :, h * hs:(h + 1) * hs] for a in (q, k, v))
        if mha.q_norm is not None:
            qh = rms(qh, mha.q_norm.weight.data, mha.q_norm.eps)
            kh = rms(kh, mha.k_norm.weight.data, mha.k_norm.eps)
        if rope is not None:
            qh, kh = (rope.rotate(Tensor(a[None, None])).data[0, 0] for a in (qh, kh))
        s = qh @ kh.T / math.sqrt(hs)
        if causal:
            s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[b, :, h * hs:(h + 1) * hs] = p @ vh
    return out @ mha.c_proj.weight.data + (mha.c_proj.bias.data if mha.c_proj.bias is not None else 0)


def random_gains(mha):
    for norm in (mha.q_norm, mha.k_norm):
        if norm is not None:
            norm.weight.data = 1.0 + 0.3 * np.random.default_rng(7).standard_normal(norm.weight.shape)


@pytest.mark.parametrize("causal,use_rope,bias,qk_norm", [(True, False, True, False), (False, False, False, False),
                                                          (True, True, True, False), (True, True, False, True),
                                                          (False, False, True, True)])
def test_attention_matches_a_per_head_reference(causal, use_rope, bias, qk_norm):
    rope = nn.RotaryEmbedding(4, 16) if use_rope else None
    mha = nn.MultiHeadAttention(8, 2, bias=bias, causal=causal, rope=rope, qk_norm=qk_norm).double()
    random_gains(mha)
    x = f64(2, 5, 8)
    np.testing.assert_allclose(mha(x).data, attention_reference(mha, x.data, causal, rope), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal,use_rope,bias,qk_norm", [(True, False, True, False), (False, True, False, False),
                                                          (True, True, True, True), (False, False, False, True)])
def test_attention_gradients_for_parameters_and_input(causal, use_rope, bias, qk_norm):
    rope = nn.RotaryEmbedding(2, 8) if use_rope else None
    mha = nn.MultiHeadAttention(4, 2, bias=bias, causal=causal, rope=rope, qk_norm=qk_norm).double()
    random_gains(mha)
    x = f64(2, 3, 4)
    check_gradients(lambda: mha(x), list(mha.parameters()) + [x], max_elems=6)


def test_parameter_names_and_shapes_are_gpt2s():
    mha = nn.MultiHeadAttention(12, 3)
    shapes = {n: p.shape for n, p in mha.named_parameters()}
    assert shapes == {"c_attn.weight": (12, 36), "c_attn.bias": (36,), "c_proj.weight": (12, 12), "c_proj.bias": (12,)}
    with pytest.raises(ValueError, match="n_embd=10 must be divisible by n_head=3"):
        nn.MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="rope.head_dim=8 must equal n_embd / n_head = 4"):
        nn.MultiHeadAttention(12, 3, rope=nn.RotaryEmbedding(8, 4))
    with pytest.raises(ValueError, match=r"expected x \(B, T, 12\)"):
        mha(Tensor(np.ones((2, 12), np.float32)))


def test_bidirectional_attention_without_positions_is_permutation_equivariant():
    mha = nn.MultiHeadAttention(8, 2, causal=False).double()
    x = f64(2, 6, 8)
    y = mha(x).data
    rng = np.random.default_rng(0)
    for _ in range(3):
        perm = rng.permutation(6)
        np.testing.assert_allclose(mha(x[:, perm]).data, y[:, perm], rtol=1e-10, atol=1e-12)


def sentence_outputs(mha, emb, ids, positions=None):
    x = emb(np.array([ids]))
    if positions is not None:
        x = x + positions(len(ids))
    return mha(x).data[0]


@pytest.mark.parametrize("pos", ["none", "sinusoidal", "rope"])
def test_dog_bites_man_is_man_bites_dog_only_without_positions(pos):
    dog, bites, man = 0, 1, 2
    emb = nn.Embedding(3, 8).double()
    rope = nn.RotaryEmbedding(4, 8) if pos == "rope" else None
    mha = nn.MultiHeadAttention(8, 2, causal=False, rope=rope).double()
    add = nn.SinusoidalPositions(8, 8).double() if pos == "sinusoidal" else None
    a = sentence_outputs(mha, emb, [dog, bites, man], add)
    b = sentence_outputs(mha, emb, [man, bites, dog], add)
    # what the model says about "dog" (and the whole sentence, pooled) in each sentence
    same_dog = np.allclose(a[0], b[2], rtol=1e-10, atol=1e-12)
    same_pooled = np.allclose(a.mean(0), b.mean(0), rtol=1e-10, atol=1e-12)
    if pos == "none":
        assert same_dog and same_pooled
    else:
        assert not same_dog and not same_pooled
        assert np.abs(a[0] - b[2]).max() > 1e-4


def test_causal_attention_ignores_the_future():
    mha = nn.MultiHeadAttention(8, 2).double()
    x = f64(1, 5, 8)
    y = mha(x).data
    x2 = Tensor(x.data.copy())
    x2.data[:, 3:] += 10.0
    np.testing.assert_allclose(mha(x2).data[:, :3], y[:, :3], rtol=1e-12)


@pytest.mark.parametrize("use_rope", [False, True])
def test_kv_cached_attention_equals_full_attention(use_rope):
    rope = nn.RotaryEmbedding(4, 32) if use_rope else None
    mha = nn.MultiHeadAttention(8, 2, rope=rope).double().eval()
    x = f64(2, 9, 8)
    with no_grad():
        full = mha(x).data
        cache = nn.KVCache(2, 2, 16, 4, dtype=np.float64)
        pieces = [mha(x[:, :4], kv_cache=cache)]          # prefill 4 positions
        pieces.append(mha(x[:, 4:6], kv_cache=cache))     # a chunk of 2
        for t in range(6, 9):                             # then one token at a time
            pieces.append(mha(x[:, t:t + 1], kv_cache=cache, pos_offset=t))
    assert cache.length == 9
    np.testing.assert_allclose(np.concatenate([p.data for p in pieces], axis=1), full, rtol=1e-10, atol=1e-12)


def test_kv_cache_writes_in_place_and_returns_views():
    cache = nn.KVCache(1, 2, 5, 3)
    k_buf, v_buf = cache.k, cache.v
    assert cache.nbytes == 2 * 1 * 2 * 5 * 3 * 4 and cache.length == 0
    k1 = np.ones((1, 2, 2, 3), np.float32)
    k_all, v_all = cache.append(Tensor(k1), Tensor(2 * k1))
    assert k_all.shape == (1, 2, 2, 3) and np.shares_memory(k_all.data, k_buf)
    k_all, v_all = cache.append(3 * k1[:, :, :1], 4 * k1[:, :, :1])
    assert cache.k is k_buf and cache.v is v_buf and cache.length == 3
    np.testing.assert_array_equal(k_all.data[0, 0, :, 0], [1, 1, 3])
    np.testing.assert_array_equal(v_all.data[0, 1, :, 0], [2, 2, 4])
    with pytest.raises(ValueError, match="3 cached \\+ 3 new positions exceed max_len=5"):
        cache.append(np.ones((1, 2, 3, 3)), np.ones((1, 2, 3, 3)))
    with pytest.raises(ValueError, match=r"k and v must both be \(batch=1, n_head=2, t, head_dim=3\)"):
        cache.append(np.ones((1, 3, 1, 3)), np.ones((1, 3, 1, 3)))
    cache.reset()
    assert cache.length == 0 and cache.append(k1, k1)[0].shape[2] == 2
    assert "length=2/5" in repr(cache)


def test_a_cache_refuses_keys_that_carry_a_graph():
    mha = nn.MultiHeadAttention(8, 2)
    cache = nn.KVCache(1, 2, 8, 4)
    with pytest.raises(RuntimeError, match="no_grad"):
        mha(Tensor(np.ones((1, 2, 8), np.float32)), kv_cache=cache)


def test_pos_offset_must_agree_with_the_cache():
    mha = nn.MultiHeadAttention(8, 2)
    cache = nn.KVCache(1, 2, 8, 4)
    with no_grad():
        mha(Tensor(np.ones((1, 2, 8), np.float32)), kv_cache=cache)
        with pytest.raises(ValueError, match="pos_offset=5 but the KV cache holds 2 positions"):
            mha(Tensor(np.ones((1, 1, 8), np.float32)), kv_cache=cache, pos_offset=5)


def test_attention_dropout_acts_in_training_only():
    mha = nn.MultiHeadAttention(8, 2, dropout=0.5)
    x = Tensor(np.random.default_rng(0).standard_normal((2, 6, 8)).astype(np.float32))
    a, b = mha(x).data, mha(x).data
    assert not np.allclose(a, b)
    mha.eval()
    np.testing.assert_array_equal(mha(x).data, mha(x).data)


def test_grouped_query_attention_shares_each_kv_head_among_its_query_heads():
    gqa = nn.MultiHeadAttention(8, 4, n_kv_head=2).double()
    assert gqa.c_attn.weight.shape == (8, 8 + 2 * 2 * 2)  # q of 4 heads, k and v of 2 heads of size 2
    mha = nn.MultiHeadAttention(8, 4).double()
    w, b = gqa.c_attn.weight.data, gqa.c_attn.bias.data
    def widen(a):  # each kv head repeated for its 2 query heads
        q, k, v = np.split(a, [8, 12], axis=-1)
        rep = [np.repeat(t.reshape(t.shape[:-1] + (2, 2)), 2, axis=-2).reshape(t.shape[:-1] + (8,)) for t in (k, v)]
        return np.concatenate([q] + rep, axis=-1)
    mha.c_attn.weight.data, mha.c_attn.bias.data = widen(w), widen(b)
    mha.c_proj.weight.data, mha.c_proj.bias.data = gqa.c_proj.weight.data, gqa.c_proj.bias.data
    x = f64(2, 5, 8)
    np.testing.assert_allclose(gqa(x).data, mha(x).data, rtol=1e-12, atol=1e-13)
    check_gradients(lambda: gqa(x), list(gqa.parameters()) + [x], max_elems=6)
    with pytest.raises(ValueError, match="n_kv_head=3 must divide n_head=4"):
        nn.MultiHeadAttention(8, 4, n_kv_head=3)


def test_qk_norm_adds_one_gain_per_head_dim_for_q_and_k_and_bounds_the_scores():
    mha = nn.MultiHeadAttention(8, 2, qk_norm=True)
    shapes = {n: tuple(p.shape) for n, p in mha.named_parameters()}
    assert shapes["q_norm.weight"] == (4,) and shapes["k_norm.weight"] == (4,)
    # normalised q and k have norm sqrt(hs) per head, so |score| <= sqrt(hs) whatever the weights
    mha.c_attn.weight.data *= 1e3
    q = mha.q_norm(Tensor(np.random.default_rng(0).standard_normal((1, 2, 3, 4)) * 1e3))
    np.testing.assert_allclose(np.linalg.norm(q.data, axis=-1), 2.0, rtol=1e-5)


@pytest.mark.parametrize("use_rope,qk_norm,n_kv_head", [(False, False, 2), (True, True, 2), (True, False, 1)])
def test_the_array_step_equals_the_cached_forward(use_rope, qk_norm, n_kv_head):
    rope = nn.RotaryEmbedding(4, 16) if use_rope else None
    mha = nn.MultiHeadAttention(8, 2, rope=rope, qk_norm=qk_norm, n_kv_head=n_kv_head).double().eval()
    random_gains(mha)
    x = f64(2, 6, 8)
    a, b = (nn.KVCache(2, n_kv_head, 6, 4, np.float64) for _ in range(2))
    with no_grad():
        mha(x[:, :3], kv_cache=a)
        mha(x[:, :3], kv_cache=b)
        for t in range(3, 6):
            want = mha(x[:, t:t + 1], kv_cache=a).data[:, 0]
            np.testing.assert_allclose(mha.step(x.data[:, t], b, t), want, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="position 2 but the KV cache holds 6"):
        mha.step(x.data[:, 0], b, 2)
