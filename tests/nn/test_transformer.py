"""nn.Transformer and its layers: PyTorch's semantics against a NumPy reference in PyTorch's own
weight layout, float64 gradients of every new layer, cached decoding, mask checks."""
import math

import numpy as np
import pytest

import autograd
import nn
from autograd import Tensor, no_grad
from nn.transformer_layout import from_torch_state_dict, to_torch_state_dict
from tests.nn.gradcheck_util import check_gradients, f64


@pytest.fixture(autouse=True)
def _seed():
    autograd.manual_seed(0)


# ---- a NumPy reference of torch.nn.Transformer, on PyTorch's (out, in) weights ---------------
def layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def act_fn(name):
    if name == "relu":
        return lambda x: np.maximum(x, 0)
    erf = np.vectorize(math.erf)
    return lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2)))  # torch's F.gelu: the exact form


def additive(attn_mask, kpm, B, H, T, S):
    """PyTorch's masks as one additive (B, H, T, S) bias: bool True / float values added."""
    bias = np.zeros((B, H, T, S))
    if attn_mask is not None:
        m = np.where(attn_mask, -np.inf, 0.0) if attn_mask.dtype == bool else attn_mask
        bias = bias + (m.reshape(B, H, T, S) if m.ndim == 3 else m)
    if kpm is not None:
        bias = bias + np.where(kpm, -np.inf, 0.0)[:, None, None, :]
    return bias


def mha(q_in, kv_in, sd, p, H, bias):
    """torch.nn.MultiheadAttention on batch-first arrays: q_in (B, T, E), kv_in (B, S, E)."""
    W, b = sd[p + "in_proj_weight"], sd[p + "in_proj_bias"]
    E = W.shape[1]
    q, k, v = (x @ W[i * E:(i + 1) * E].T + b[i * E:(i + 1) * E] for i, x in enumerate((q_in, kv_in, kv_in)))
    B, T, hs = q.shape[0], q.shape[1], E // H
    out = np.zeros((B, T, E))
    for h in range(H):
        sl = slice(h * hs, (h + 1) * hs)
        s = q[..., sl] @ k[..., sl].transpose(0, 2, 1) / math.sqrt(hs) + bias[:, h]
        pr = np.exp(s - s.max(-1, keepdims=True))
        out[..., sl] = (pr / pr.sum(-1, keepdims=True)) @ v[..., sl]
    return out @ sd[p + "out_proj.weight"].T + sd[p + "out_proj.bias"]


def ff(x, sd, p, act):
    h = act(x @ sd[p + "linear1.weight"].T + sd[p + "linear1.bias"])
    return h @ sd[p + "linear2.weight"].T + sd[p + "linear2.bias"]


def norm(x, sd, name):
    return layer_norm(x, sd[name + ".weight"], sd[name + ".bias"])


def encoder_layer_ref(x, sd, p, H, norm_first, act, bias):
    sa = lambda h: mha(h, h, sd, p + "self_attn.", H, bias)  # noqa: E731
    if norm_first:
        x = x + sa(norm(x, sd, p + "norm1"))
        return x + ff(norm(x, sd, p + "norm2"), sd, p, act)
    x = norm(x + sa(x), sd, p + "norm1")
    return norm(x + ff(x, sd, p, act), sd, p + "norm2")


def decoder_layer_ref(x, mem, sd, p, H, norm_first, act, self_bias, cross_bias):
    sa = lambda h: mha(h, h, sd, p + "self_attn.", H, self_bias)  # noqa: E731
    ca = lambda h: mha(h, mem, sd, p + "multihead_attn.", H, cross_bias)  # noqa: E731
    if norm_first:
        x = x + sa(norm(x, sd, p + "norm1"))
        x = x + ca(norm(x, sd, p + "norm2"))
        return x + ff(norm(x, sd, p + "norm3"), sd, p, act)
    x = norm(x + sa(x), sd, p + "norm1")
    x = norm(x + ca(x), sd, p + "norm2")
    return norm(x + ff(x, sd, p, act), sd, p + "norm3")


def transformer_ref(src, tgt, sd, H, n_enc, n_dec, norm_first, act, masks):
    """src (S, B, E), tgt (T, B, E) as PyTorch's default layout -> (T, B, E)."""
    x, y = src.transpose(1, 0, 2), tgt.transpose(1, 0, 2)
    (B, S, _), T = x.shape, y.shape[1]
    enc_bias = additive(masks.get("src_mask"), masks.get("src_key_padding_mask"), B, H, S, S)
    for i in range(n_enc):
        x = encoder_layer_ref(x, sd, f"encoder.layers.{i}.", H, norm_first, act, enc_bias)
    mem = norm(x, sd, "encoder.norm")
    self_bias = additive(masks.get("tgt_mask"), masks.get("tgt_key_padding_mask"), B, H, T, T)
    cross_bias = additive(masks.get("memory_mask"), masks.get("memory_key_padding_mask"), B, H, T, S)
    for i in range(n_dec):
        y = decoder_layer_ref(y, mem, sd, f"decoder.layers.{i}.", H, norm_first, act, self_bias, cross_bias)
    return norm(y, sd, "decoder.norm").transpose(1, 0, 2)


def randomise(model, seed=1):
    """Every parameter (norm gains and biases too) drawn at random, in place."""
    rng = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        gain = p.ndim == 1 and name.endswith("weight")         # a norm's gain: around 1
        p.data[...] = rng.standard_normal(p.shape) * (0.3 if p.ndim > 1 else 0.2) + gain
    return model


def masks_for(B, S, T, H, rng):
    src_kpm = np.zeros((B, S), bool)
    src_kpm[0, -2:] = True                                     # row 0's last two source tokens are padding
    tgt_kpm = np.zeros((B, T), bool)
    tgt_kpm[1, -1] = True
    src_mask = rng.random((B * H, S, S)) < 0.2                 # a per-head bool mask (True = blocked)
    src_mask[..., 0] = False                                   # every query keeps one key
    return dict(src_mask=src_mask, src_key_padding_mask=src_kpm, tgt_key_padding_mask=tgt_kpm,
                memory_key_padding_mask=src_kpm,
                tgt_mask=nn.Transformer.generate_square_subsequent_mask(T, np.float64))


@pytest.mark.parametrize("norm_first,activation,batch_first", [(False, "relu", False), (True, "relu", True),
                                                               (False, "gelu", True), (True, "gelu", False)])
def test_transformer_matches_the_pytorch_reference_on_pytorch_weights(norm_first, activation, batch_first):
    B, S, T, E, H = 2, 5, 4, 8, 2
    rng = np.random.default_rng(0)
    ours = nn.Transformer(E, H, 2, 2, 12, dropout=0.1, activation=activation, norm_first=norm_first,
                          batch_first=batch_first).double().eval()
    torch_sd = to_torch_state_dict(randomise(ours).state_dict())  # PyTorch's names and (out, in) layout
    ours.load_state_dict(from_torch_state_dict(torch_sd))
    src, tgt = rng.standard_normal((S, B, E)), rng.standard_normal((T, B, E))
    masks = masks_for(B, S, T, H, rng)
    want = transformer_ref(src, tgt, torch_sd, H, 2, 2, norm_first, act_fn(activation), masks)
    to = (lambda a: Tensor(a.transpose(1, 0, 2).copy())) if batch_first else Tensor
    got = ours(to(src), to(tgt), **masks).data
    got = got.transpose(1, 0, 2) if batch_first else got
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_layers_alone_match_the_reference_and_take_pytorchs_arguments():
    B, S, T, E, H = 3, 4, 3, 8, 4
    rng = np.random.default_rng(2)
    enc = randomise(nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, batch_first=True).double())
    dec = randomise(nn.TransformerDecoderLayer(E, H, 16, dropout=0.0, batch_first=True, norm_first=True).double())
    x, mem, y = (rng.standard_normal(s) for s in ((B, S, E), (B, S, E), (B, T, E)))
    kpm = np.zeros((B, S), bool)
    kpm[2, 1:] = True
    esd = {"l." + k: v for k, v in to_torch_state_dict(enc.state_dict()).items()}
    dsd = {"l." + k: v for k, v in to_torch_state_dict(dec.state_dict()).items()}
    want = encoder_layer_ref(x, esd, "l.", H, False, act_fn("relu"), additive(None, kpm, B, H, S, S))
    np.testing.assert_allclose(enc(Tensor(x), src_key_padding_mask=kpm).data, want, rtol=1e-10, atol=1e-10)
    causal = additive(nn.Transformer.generate_square_subsequent_mask(T, np.float64), None, B, H, T, T)
    want = decoder_layer_ref(y, mem, dsd, "l.", H, True, act_fn("relu"), causal, additive(None, kpm, B, H, T, S))
    got = dec(Tensor(y), Tensor(mem), tgt_is_causal=True, memory_key_padding_mask=kpm).data
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_defaults_and_parameter_count_are_pytorchs():
    model = nn.Transformer()
    assert model.num_params() == 44_140_544  # sum(p.numel() for p in torch.nn.Transformer().parameters())
    layer = model.encoder.layers[0]
    assert (model.d_model, model.nhead, model.encoder.num_layers, model.decoder.num_layers) == (512, 8, 6, 6)
    assert layer.linear1.weight.shape == (512, 2048) and layer.dropout.p == 0.1
    assert not layer.norm_first and not model.batch_first and isinstance(layer.activation, nn.ReLU)
    # the layers are copies, not one layer six times
    a, b = model.encoder.layers[0].linear1.weight, model.encoder.layers[1].linear1.weight
    assert a is not b and not np.shares_memory(a.data, b.data)


# ---- gradients in float64 ------------------------------------------------------------------
def test_cross_attention_gradients_with_a_padding_mask():
    ca = nn.CrossAttention(4, 2).double()
    x, mem = f64(2, 3, 4), f64(2, 5, 4, seed=1)
    allowed = ~np.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]], bool)[:, None, None, :]
    check_gradients(lambda: ca(x, mem, attn_mask=allowed), list(ca.parameters()) + [x, mem], max_elems=6)


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_encoder_layer_gradients(norm_first, activation):
    layer = nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, activation=activation, norm_first=norm_first,
                                       batch_first=True).double()
    x = f64(2, 3, 4)
    kpm = np.array([[False, False, True], [False, False, False]])
    check_gradients(lambda: layer(x, src_key_padding_mask=kpm), list(layer.parameters()) + [x], max_elems=4)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_gradients(norm_first):
    layer = nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0, norm_first=norm_first).double()
    y, mem = f64(3, 2, 4), f64(4, 2, 4, seed=1)   # (T, B, E), (S, B, E): PyTorch's default layout
    check_gradients(lambda: layer(y, mem, tgt_is_causal=True), list(layer.parameters()) + [y, mem], max_elems=4)


def test_whole_transformer_gradients_through_both_stacks():
    model = nn.Transformer(4, 2, 1, 1, 6, dropout=0.0, batch_first=True).double()
    src, tgt = f64(2, 3, 4), f64(2, 2, 4, seed=1)
    params = [p for n, p in model.named_parameters() if n.endswith(("c_attn.weight", "c_kv.weight", "norm.weight"))]
    check_gradients(lambda: model(src, tgt, tgt_is_causal=True), params + [src, tgt], max_elems=4)


# ---- cached decoding -----------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_the_full_causal_forward(norm_first):
    B, S, T, E = 2, 5, 6, 8
    model = randomise(nn.Transformer(E, 2, 2, 2, 16, dropout=0.0, batch_first=True, norm_first=norm_first)).double().eval()
    rng = np.random.default_rng(3)
    src, tgt = Tensor(rng.standard_normal((B, S, E))), Tensor(rng.standard_normal((B, T, E)))
    kpm = np.zeros((B, S), bool)
    kpm[1, -2:] = True
    with no_grad():
        memory = model.encoder(src, src_key_padding_mask=kpm)
        full = model.decoder(tgt, memory, tgt_is_causal=True, memory_key_padding_mask=kpm).data
        caches = [nn.KVCache(B, 2, T, E // 2, np.float64) for _ in range(2)]
        mkv = model.decoder.memory_kv(memory)
        first = model.decoder(tgt[:, :2], None, tgt_is_causal=True, memory_key_padding_mask=kpm,
                              kv_caches=caches, memory_kv=mkv).data   # a two-position prefill
        steps = [model.decoder(tgt[:, t:t + 1], None, memory_key_padding_mask=kpm, kv_caches=caches,
                               memory_kv=mkv).data for t in range(2, T)]
    np.testing.assert_allclose(np.concatenate([first] + steps, axis=1), full, rtol=1e-10, atol=1e-12)
    assert caches[0].length == T


# ---- masks and errors ----------------------------------------------------------------------
def test_bool_and_float_masks_agree_and_bad_masks_are_named():
    model = nn.Transformer(8, 2, 1, 1, 8, dropout=0.0, batch_first=True).double().eval()
    src, tgt = Tensor(np.ones((2, 3, 8))), Tensor(np.random.default_rng(0).standard_normal((2, 4, 8)))
    float_mask = nn.Transformer.generate_square_subsequent_mask(4)
    a = model(src, tgt, tgt_mask=float_mask).data
    np.testing.assert_array_equal(a, model(src, tgt, tgt_mask=np.isneginf(float_mask)).data)
    np.testing.assert_array_equal(a, model(src, tgt, tgt_is_causal=True).data)
    with pytest.raises(ValueError, match=r"tgt_mask must have shape \(T, S\) = \(4, 4\)"):
        model(src, tgt, tgt_mask=np.zeros((3, 4), bool))
    with pytest.raises(ValueError, match=r"src_key_padding_mask must have shape \(B, S\) = \(2, 3\)"):
        model(src, tgt, src_key_padding_mask=np.zeros((3, 2), bool))
    with pytest.raises(ValueError, match="only 0 .* and -inf"):
        model(src, tgt, memory_mask=np.full((4, 3), 0.5))
    with pytest.raises(ValueError, match="batch number of src and tgt must be equal"):
        model(src, Tensor(np.ones((3, 4, 8))))
    with pytest.raises(ValueError, match="feature number of src and tgt must be d_model=8"):
        model(src, Tensor(np.ones((2, 4, 6))))
    with pytest.raises(ValueError, match=r"expected src of shape \(B, L, C\)"):
        model.encoder(Tensor(np.ones((3, 8))))


def test_a_fully_padded_source_row_gives_zeros_from_cross_attention_not_nan():
    ca = nn.CrossAttention(4, 2).double()
    out = ca(f64(1, 2, 4), f64(1, 3, 4), attn_mask=np.zeros((1, 1, 1, 3), bool))
    np.testing.assert_allclose(out.data, np.broadcast_to(ca.c_proj.bias.data, (1, 2, 4)))


def test_layout_round_trip_is_exact():
    model = randomise(nn.Transformer(8, 2, 1, 2, 8))
    torch_sd = to_torch_state_dict(model.state_dict())
    assert torch_sd["decoder.layers.1.multihead_attn.in_proj_weight"].shape == (24, 8)
    assert torch_sd["encoder.layers.0.linear1.weight"].shape == (8, 8)
    back = from_torch_state_dict(torch_sd)
    assert list(back) != [] and set(back) == set(model.state_dict())
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(back[k], v)


# ---- the same model composed from the engine's primitive ops ---------------------------------
def _p_norm(x, sd, name):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return xc / (var + 1e-5).sqrt() * Tensor(sd[name + ".weight"]) + Tensor(sd[name + ".bias"])


def _p_linear(x, W, b):
    return x @ Tensor(np.ascontiguousarray(W.T)) + Tensor(b)   # PyTorch's (out, in) weight


def _p_mha(q_in, kv_in, sd, p, H, bias):
    W, b = sd[p + "in_proj_weight"], sd[p + "in_proj_bias"]
    E = W.shape[1]
    (B, T, _), S, hs = q_in.shape, kv_in.shape[1], E // H
    q, k, v = (_p_linear(x, W[i * E:(i + 1) * E], b[i * E:(i + 1) * E]).reshape(B, -1, H, hs).transpose(1, 2)
               for i, x in enumerate((q_in, kv_in, kv_in)))                      # (B, H, L, hs)
    s = q @ k.transpose(2, 3) * (1.0 / math.sqrt(hs)) + Tensor(bias)            # (B, H, T, S)
    e = (s - s.max(axis=-1, keepdims=True)).exp()
    y = (e / e.sum(axis=-1, keepdims=True)) @ v                                   # (B, H, T, hs)
    return _p_linear(y.transpose(1, 2).reshape(B, T, E), sd[p + "out_proj.weight"], sd[p + "out_proj.bias"])


def _p_ff(x, sd, p):
    return _p_linear(_p_linear(x, sd[p + "linear1.weight"], sd[p + "linear1.bias"]).relu(),
                     sd[p + "linear2.weight"], sd[p + "linear2.bias"])


def test_outputs_equal_the_same_model_composed_from_primitive_ops():
    """nn.Transformer (fused attention, layer_norm and linear ops) against the 2017 post-norm
    model written with the engine's primitive ops only (matmul, +, *, /, exp, max, sum, mean,
    sqrt, relu, reshape, transpose), on the same weights and masks, in float64."""
    B, S, T, E, H = 2, 5, 4, 8, 2
    rng = np.random.default_rng(3)
    ours = randomise(nn.Transformer(E, H, 2, 2, 12, dropout=0.0, batch_first=True).double().eval(), seed=3)
    sd = to_torch_state_dict(ours.state_dict())
    src, tgt = rng.standard_normal((B, S, E)), rng.standard_normal((B, T, E))
    kpm = np.zeros((B, S), bool)
    kpm[0, -2:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(T, np.float64)
    got = ours(Tensor(src), Tensor(tgt), tgt_mask=causal, src_key_padding_mask=kpm,
               memory_key_padding_mask=kpm).data
    pad = np.where(kpm, -np.inf, 0.0)[:, None, None, :]                           # (B, 1, 1, S)
    x, y = Tensor(src), Tensor(tgt)
    for i in range(2):
        p = f"encoder.layers.{i}."
        x = _p_norm(x + _p_mha(x, x, sd, p + "self_attn.", H, pad), sd, p + "norm1")
        x = _p_norm(x + _p_ff(x, sd, p), sd, p + "norm2")
    mem = _p_norm(x, sd, "encoder.norm")
    for i in range(2):
        p = f"decoder.layers.{i}."
        y = _p_norm(y + _p_mha(y, y, sd, p + "self_attn.", H, causal), sd, p + "norm1")
        y = _p_norm(y + _p_mha(y, mem, sd, p + "multihead_attn.", H, pad), sd, p + "norm2")
        y = _p_norm(y + _p_ff(y, sd, p), sd, p + "norm3")
    want = _p_norm(y, sd, "decoder.norm").data
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
