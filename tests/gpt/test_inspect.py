"""Hook points, run_with_cache / run_with_hooks and the analyses over a cache, checked against a
float64 NumPy forward of the same weights (built from tests/gpt/numpy_reference.py's formulas)."""
import math

import numpy as np
import pytest

from autograd import manual_seed
from gpt import GPT, GPTConfig
from gpt.inspect import analysis, hook_names
from tests.gpt import numpy_reference as ref

V, T = 61, 12
GPT2 = GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=4, n_embd=32)
LLAMA_GQA = GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, pos="rope",
                      norm="rmsnorm", mlp="swiglu", mlp_hidden=48, bias=False, tie_weights=False, norm_eps=1e-5)
IDS = np.random.default_rng(5).integers(0, V, (2, T))


def built(cfg, seed=0, double=False):
    manual_seed(seed)
    model = GPT(cfg).eval()
    rng = np.random.default_rng(seed)
    for p in model.parameters():  # off the initial values (gains of 1, zero biases) so every term counts
        p.data += rng.normal(0, 0.1, p.data.shape).astype(p.data.dtype)
    return model.double() if double else model


def reference_streams(model, idx):
    """(resid_pre per block + the last resid_post, pattern per block, logits) in float64."""
    cfg = model.config
    P = {k: np.asarray(v, np.float64) for k, v in model.state_dict().items()}
    C, H, Hkv, hs = cfg.n_embd, cfg.n_head, cfg.kv_heads, cfg.head_dim
    B, Tn = idx.shape

    def norm(prefix, x):
        if cfg.norm == "rmsnorm":
            return ref.rms_norm(x, P[prefix + ".weight"], cfg.norm_eps)
        return ref.layer_norm(x, P[prefix + ".weight"], P.get(prefix + ".bias"), cfg.norm_eps)

    def linear(prefix, x):
        return x @ P[prefix + ".weight"] + P.get(prefix + ".bias", 0.0)

    def attention(prefix, x):
        qkv = linear(prefix + ".c_attn", x)                                   # (B, T, C + 2 Hkv hs)
        q, k, v = np.split(qkv, [C, C + Hkv * hs], axis=-1)
        q = q.reshape(B, Tn, H, hs).transpose(0, 2, 1, 3)                     # (B, H, T, hs)
        k, v = (a.reshape(B, Tn, Hkv, hs).transpose(0, 2, 1, 3).repeat(H // Hkv, axis=1) for a in (k, v))
        if cfg.pos == "rope":
            q, k = ref.rope(q, cfg.rope_base), ref.rope(k, cfg.rope_base)
        att = np.where(np.tril(np.ones((Tn, Tn), bool)), q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs), -np.inf)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        return linear(prefix + ".c_proj", (att @ v).transpose(0, 2, 1, 3).reshape(B, Tn, C)), att

    def mlp(prefix, x):
        h = linear(prefix + ".c_fc", x)
        if cfg.mlp == "swiglu":
            gate, up = np.split(h, 2, axis=-1)
            return linear(prefix + ".c_proj", ref.silu(gate) * up)
        return linear(prefix + ".c_proj", ref.gelu_tanh(h))

    x = P["transformer.wte.weight"][idx]
    if cfg.pos == "learned":
        x = x + P["transformer.wpe.weight"][:Tn]
    streams, patterns = [], []
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}"
        streams.append(x)
        a, att = attention(p + ".attn", norm(p + ".ln_1", x))
        patterns.append(att)
        x = x + a
        x = x + mlp(p + ".mlp", norm(p + ".ln_2", x))
    streams.append(x)
    w_out = P["transformer.wte.weight"].T if cfg.tie_weights else P["lm_head.weight"]
    return streams, patterns, norm("transformer.ln_f", x) @ w_out


def check_against_reference(model, tol):
    logits, cache = model.run_with_cache(IDS)
    streams, patterns, ref_logits = reference_streams(model, IDS)
    L = model.config.n_layer
    for i in range(L):
        np.testing.assert_allclose(cache[f"blocks.{i}.hook_resid_pre"], streams[i], atol=tol, rtol=0)
        np.testing.assert_allclose(cache[f"blocks.{i}.attn.hook_pattern"], patterns[i], atol=tol, rtol=0)
    np.testing.assert_allclose(cache[f"blocks.{L - 1}.hook_resid_post"], streams[L], atol=tol, rtol=0)
    np.testing.assert_allclose(logits, ref_logits, atol=tol * 10, rtol=0)


@pytest.mark.parametrize("cfg", [GPT2, LLAMA_GQA], ids=["gpt2", "llama-gqa"])
def test_patterns_and_streams_equal_the_numpy_reference(cfg):
    check_against_reference(built(cfg), 2e-5)
    check_against_reference(built(cfg, double=True), 1e-10)


def test_the_reference_is_the_shared_numpy_forward_for_gpt2():
    model = built(GPT2, double=True)
    shared, _ = ref.reference_forward(model.state_dict(), GPT2, IDS)
    np.testing.assert_allclose(reference_streams(model, IDS)[2], shared, atol=1e-10)


@pytest.mark.parametrize("cfg", [GPT2, LLAMA_GQA, GPT2.replace(mlp="none"), GPT2.replace(prenorm=False)],
                         ids=["gpt2", "llama-gqa", "attn-only", "post-norm"])
def test_patterns_are_lower_triangular_rows_summing_to_one_and_names_match_the_list(cfg):
    model = built(cfg)
    logits, cache = model.run_with_cache(IDS)
    assert sorted(cache) == sorted(hook_names(model))
    plain, _ = model(IDS)
    np.testing.assert_allclose(logits, plain.data, atol=2e-5)  # the hooked path computes the same
    for i in range(cfg.n_layer):
        pat = cache[f"blocks.{i}.attn.hook_pattern"]
        assert pat.shape == (2, cfg.n_head, T, T)
        np.testing.assert_allclose(pat.sum(-1), 1.0, atol=1e-6)
        assert np.all(np.triu(pat, 1) == 0)
        assert cache[f"blocks.{i}.attn.hook_k"].shape == (2, cfg.kv_heads, T, cfg.head_dim)
        assert cache[f"blocks.{i}.attn.hook_z"].shape == (2, cfg.n_head, T, cfg.head_dim)


def test_cached_resid_pre_is_the_embedding_output():
    model = built(GPT2)
    _, cache = model.run_with_cache(IDS, names=["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre"])
    assert set(cache) == {"hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre"}
    t = model.transformer
    expected = t.wte.weight.data[IDS] + t.wpe.weight.data[:T]
    np.testing.assert_array_equal(cache["blocks.0.hook_resid_pre"], expected)
    np.testing.assert_array_equal(cache["hook_embed"], t.wte.weight.data[IDS])


def test_unknown_hook_names_are_refused_with_a_suggestion():
    with pytest.raises(ValueError, match="unknown hook point 'blocks.0.attn.hook_patern'.*hook_pattern"):
        built(GPT2).run_with_cache(IDS, names=["blocks.0.attn.hook_patern"])


def test_zero_ablating_a_head_changes_the_output_and_hooks_leave_with_an_error():
    model = built(GPT2)
    plain = model.run_with_hooks(IDS)

    def ablate(z, name):
        z[:, 1] = 0.0  # head 1, every position

    ablated = model.run_with_hooks(IDS, hooks=[("blocks.0.attn.hook_z", ablate)])
    assert np.abs(ablated - plain).max() > 1e-3

    def fail(act, name):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        model.run_with_hooks(IDS, hooks=[("blocks.1.hook_resid_mid", fail)])
    assert all(m.hook is None for m in model.modules() if hasattr(m, "HOOKS"))
    assert all(not m.__dict__.get("hook") for m in model.modules())
    np.testing.assert_array_equal(model.run_with_hooks(IDS), plain)
    assert model.transformer.h[0]._fuses(model.transformer.wte(IDS))  # the fast path is back


def test_a_replacing_hook_is_used_and_a_wrong_shape_refused():
    model = built(GPT2)
    _, cache = model.run_with_cache(IDS[:1])
    other = model.run_with_hooks(IDS[1:], hooks=[("blocks.1.hook_resid_post", lambda a, n: cache[n])])
    np.testing.assert_allclose(other, model.run_with_hooks(IDS[:1]), atol=1e-5)
    with pytest.raises(ValueError, match="returned shape"):
        model.run_with_hooks(IDS, hooks=[("blocks.0.hook_resid_pre", lambda a, n: a[:, :1])])


@pytest.mark.parametrize("cfg", [GPT2, LLAMA_GQA], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("token", [7, (7, 3)], ids=["logit", "logit-diff"])
def test_direct_logit_attribution_adds_up_to_the_logit_in_float64(cfg, token):
    model = built(cfg, double=True)
    logits, cache = model.run_with_cache(IDS)
    parts = analysis.direct_logit_attribution(model, cache, token, batch=1, pos=5)
    a, b = (token, None) if np.ndim(token) == 0 else token
    want = logits[1, 5, a] - (0.0 if b is None else logits[1, 5, b])
    assert abs(sum(parts.values()) - want) < 1e-5
    assert {f"L{i}H{h}" for i in range(2) for h in range(4)} <= set(parts)


def test_direct_logit_attribution_refuses_post_norm_and_says_why():
    model = built(GPT2.replace(prenorm=False))
    _, cache = model.run_with_cache(IDS)
    with pytest.raises(ValueError, match="pre-norm.*post-norm blocks normalise the stream"):
        analysis.direct_logit_attribution(model, cache, 7)


@pytest.mark.parametrize("cfg", [GPT2, LLAMA_GQA], ids=["gpt2", "llama-gqa"])
def test_qk_and_ov_circuits_have_rank_at_most_d_head(cfg):
    model = built(cfg, double=True)
    for layer, head in ((0, 0), (1, 3)):
        c = analysis.circuits(model, layer, head)
        assert c["qk"].shape == c["ov"].shape == (32, 32)
        for key in ("qk", "ov"):
            assert np.linalg.matrix_rank(c[key]) <= cfg.head_dim
            assert np.all(c[key + "_singular"][cfg.head_dim:] < 1e-10 * c[key + "_singular"][0])
    for layer, head in ((0, cfg.n_head), (0, -1), (cfg.n_layer, 0)):
        with pytest.raises(ValueError, match=rf"layer {layer}, head {head}: the model has layers"):
            analysis.circuits(model, layer, head)


def test_patching_recovers_everything_at_the_last_layer_and_nothing_when_patching_nothing():
    model = built(GPT2, double=True)
    clean, corrupt = IDS[:1], IDS[:1].copy()
    corrupt[0, 3] = (corrupt[0, 3] + 1) % V
    res = analysis.patch_residual(model, clean, corrupt, answer=7, wrong=3)
    assert res["recovered"].shape == (3, T)
    np.testing.assert_allclose(res["recovered"][:, :3], 0.0, atol=1e-9)   # before the change, nothing differs
    _, cache = model.run_with_cache(clean)
    everything = analysis.patch(model, corrupt, cache, "blocks.1.hook_resid_post")
    nothing = analysis.patch(model, corrupt, cache, "blocks.1.hook_resid_post", (slice(None), slice(0, 0)))
    diff = [analysis.logit_diff(x, 7, 3) for x in (everything, nothing)]
    assert diff[0] == pytest.approx(res["clean"], abs=1e-9) and diff[1] == pytest.approx(res["corrupt"], abs=1e-9)
    assert res["recovered"][-1, -1] == pytest.approx(1.0, abs=1e-9)
    assert res["recovered"][0, 3] == pytest.approx(1.0, abs=1e-9)         # the changed token itself
    heads = analysis.patch_heads(model, clean, corrupt, 7, 3)["recovered"]
    assert heads.shape == (2, 4) and np.all(np.isfinite(heads))


def test_the_logit_lens_ends_at_the_models_own_prediction():
    model = built(GPT2)
    logits, cache = model.run_with_cache(IDS)
    lens = analysis.logit_lens(model, cache, IDS, k=3)
    assert lens["rank"].shape == lens["prob"].shape == (3, 2, T - 1)
    np.testing.assert_array_equal(lens["top_ids"][-1, ..., 0], logits.argmax(-1))
    z = logits - logits.max(-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    np.testing.assert_allclose(lens["prob"][-1], np.take_along_axis(p[:, :-1], IDS[:, 1:, None], -1)[..., 0], atol=1e-5)


def test_hf_folders_give_the_reference_patterns_and_streams(tmp_path):
    pytest.importorskip("safetensors.numpy")
    from tests.gpt.test_pretrained import random_hf_tensors, write_folder

    for cfg, family in ((GPT2, "gpt2"), (LLAMA_GQA, "llama")):
        folder = write_folder(tmp_path / family, cfg, random_hf_tensors(cfg, family))
        check_against_reference(GPT.from_pretrained(folder), 2e-5)
