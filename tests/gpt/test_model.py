"""GPT: names, counts, init, the whole model's gradients and values against references, errors."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import autograd
from autograd import Tensor, no_grad
from gpt import GPT, GPTConfig
from nn.optim import AdamW
from gpt.model.config import MLP_CHOICES as MLP, NORM_CHOICES as NORM, POS_CHOICES as POS
from tests.gpt.numpy_reference import reference_forward

VARIANTS = list(itertools.product(POS, NORM, MLP, (True, False), (True, False)))  # + prenorm, residual


def small_cfg(**kw) -> GPTConfig:
    base = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8, mlp_hidden=12, n_experts=3)
    return GPTConfig(**{**base, **kw})


def build(cfg: GPTConfig, seed: int = 0, dtype=np.float64, spread: float | None = None) -> GPT:
    """A model in `dtype`; `spread` replaces the tiny GPT-2 init by N(0, spread) weights and
    gains near 1, so that finite differences see every path with a healthy signal."""
    autograd.manual_seed(seed)
    model = GPT(cfg).to(dtype=dtype)  # buffers too (the sinusoidal table), not only the weights
    rng = np.random.default_rng(seed)
    for name, p in model.named_parameters():
        data = p.data.astype(dtype)
        if spread is not None:
            noise = rng.normal(0.0, spread, size=data.shape)
            gain = (".ln_" in name or "_norm." in name) and name.endswith("weight")
            data = (1.0 + 0.3 * noise) if gain else noise
        p.data = np.ascontiguousarray(data, dtype=dtype)
    return model


def batch(cfg, B=2, T=None, seed=1):
    rng = np.random.default_rng(seed)
    T = cfg.block_size if T is None else T
    return rng.integers(0, cfg.vocab_size, (B, T)), rng.integers(0, cfg.vocab_size, (B, T))


# ---- structure ------------------------------------------------------------------------------
def test_parameter_names_follow_gpt2():
    names = [n for n, _ in GPT(small_cfg(n_layer=1)).named_parameters()]
    block = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
             "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
             "mlp.c_proj.weight", "mlp.c_proj.bias"]
    expected = ["transformer.wte.weight", "transformer.wpe.weight"] + [f"transformer.h.0.{b}" for b in block]
    assert sorted(names) == sorted(expected + ["transformer.ln_f.weight", "transformer.ln_f.bias"])


def test_untied_model_has_an_lm_head_of_shape_c_by_v():
    sd = GPT(small_cfg(tie_weights=False)).state_dict()
    assert sd["lm_head.weight"].shape == (8, 11)


@pytest.mark.parametrize("pos, norm, mlp", list(itertools.product(POS, NORM, MLP)))
def test_count_formula_equals_built_parameters_for_every_variant(pos, norm, mlp):
    for prenorm, bias, tied, qk_norm in itertools.product((True, False), repeat=4):
        cfg = small_cfg(pos=pos, norm=norm, mlp=mlp, prenorm=prenorm, bias=bias, tie_weights=tied,
                        qk_norm=qk_norm)
        model = GPT(cfg)
        assert model.num_params() == cfg.count_params(), cfg
        assert sum(p.size for p in model.parameters()) == cfg.count_params()


@given(
    n_layer=st.integers(1, 3), n_head=st.integers(1, 3), head_dim=st.sampled_from([2, 4, 6]),
    vocab=st.integers(1, 40), block=st.integers(1, 20), hidden=st.one_of(st.none(), st.integers(1, 30)),
    pos=st.sampled_from(POS), norm=st.sampled_from(NORM), mlp=st.sampled_from(MLP), experts=st.integers(1, 3),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans()),
)
def test_count_formula_equals_built_parameters_for_random_shapes(n_layer, n_head, head_dim, vocab, block,
                                                                  hidden, pos, norm, mlp, experts, flags):
    prenorm, residual, bias, tied, qk_norm = flags
    cfg = GPTConfig(vocab_size=vocab, block_size=block, n_layer=n_layer, n_head=n_head,
                    n_embd=n_head * head_dim, mlp_hidden=hidden, pos=pos, norm=norm, mlp=mlp,
                    n_experts=experts, moe_top_k=1, prenorm=prenorm, residual=residual, bias=bias,
                    tie_weights=tied, qk_norm=qk_norm)
    model = GPT(cfg)
    assert model.num_params() == cfg.count_params()
    assert sum(cfg.breakdown().values()) == cfg.count_params()


def test_init_is_gpt2s_scaled_normal_with_zero_biases():
    cfg = GPTConfig(vocab_size=64, block_size=16, n_layer=4, n_head=4, n_embd=128)
    autograd.manual_seed(0)
    sd = GPT(cfg).state_dict()
    assert np.std(sd["transformer.wte.weight"]) == pytest.approx(0.02, rel=0.05)
    assert np.std(sd["transformer.h.0.mlp.c_fc.weight"]) == pytest.approx(0.02, rel=0.05)
    assert np.std(sd["transformer.h.0.mlp.c_proj.weight"]) == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
    assert np.std(sd["transformer.h.3.attn.c_proj.weight"]) == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
    assert not np.any(sd["transformer.h.1.attn.c_attn.bias"])
    assert np.all(sd["transformer.ln_f.weight"] == 1) and not np.any(sd["transformer.ln_f.bias"])


@pytest.mark.parametrize("variant", [dict(), dict(pos="rope", mlp="moe", tie_weights=False)])
def test_state_dict_round_trip_reproduces_logits_bit_for_bit(variant):
    cfg = small_cfg(**variant)
    a, b = build(cfg, seed=1, dtype=np.float32), build(cfg, seed=2, dtype=np.float32)
    sd = {k: v.copy() for k, v in a.state_dict().items()}
    assert sorted(sd) == sorted(n for n, _ in a.named_parameters())  # rope/sinusoid tables are not saved
    b.load_state_dict(sd)
    idx, _ = batch(cfg, T=6)
    with no_grad():
        np.testing.assert_array_equal(a(idx)[0].numpy(), b(idx)[0].numpy())


def test_report_counts_the_built_model():
    model = GPT(small_cfg())
    text = model.report()
    assert f"{small_cfg().count_params():,}" in text and "KV cache" in text and "WARNING" not in text


# ---- values ---------------------------------------------------------------------------------
def test_loss_at_init_is_close_to_ln_vocab():
    cfg = GPTConfig.preset("tiny")
    autograd.manual_seed(0)
    idx, tgt = batch(cfg, B=4)
    with no_grad():
        _, loss = GPT(cfg)(idx, tgt)
    assert abs(loss.item() - math.log(cfg.vocab_size)) < 0.05


@pytest.mark.parametrize(
    "variant",
    [dict(), dict(pos="sinusoidal", norm="rmsnorm", mlp="swiglu", bias=False, tie_weights=False),
     dict(pos="rope", prenorm=False), dict(pos="rope", norm="rmsnorm", mlp="swiglu", residual=False),
     dict(pos="sinusoidal", prenorm=False, residual=False, bias=False),
     dict(mlp="relu2", qk_norm=True), dict(pos="rope", norm="rmsnorm", mlp="relu2", qk_norm=True, prenorm=False)],
    ids=["gpt2", "sin-rms-swiglu-untied", "rope-postnorm", "rope-rms-swiglu-noresid", "sin-postnorm-noresid",
         "relu2-qknorm", "rope-rms-relu2-qknorm-postnorm"],
)
def test_whole_model_matches_the_numpy_reference_in_logits_loss_and_every_gradient(variant):
    """llm.c's test: logits and loss equal an independent NumPy forward; every parameter's
    gradient (a sample of entries per tensor) equals central differences of that reference."""
    cfg = small_cfg(**variant)
    model = build(cfg, spread=0.3)
    idx, tgt = batch(cfg, B=2, T=6)
    logits, loss = model(idx, tgt)
    params = {n: p.data for n, p in model.named_parameters()}
    ref_logits, ref_loss = reference_forward(params, cfg, idx, tgt)
    np.testing.assert_allclose(logits.numpy(), ref_logits, rtol=1e-10, atol=1e-10)
    assert loss.item() == pytest.approx(ref_loss, rel=1e-12)
    loss.backward()
    rng = np.random.default_rng(0)
    eps = 1e-6
    for name, p in model.named_parameters():
        flat = params[name].reshape(-1)
        for j in rng.choice(flat.size, size=min(4, flat.size), replace=False):
            old = flat[j]
            flat[j] = old + eps
            up = reference_forward(params, cfg, idx, tgt)[1]
            flat[j] = old - eps
            down = reference_forward(params, cfg, idx, tgt)[1]
            flat[j] = old
            numeric = (up - down) / (2 * eps)
            assert p.grad.reshape(-1)[j] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (name, j)


def _check_entries(model, idx, tgt, name, p, grad, entries, eps):
    """The analytic gradient of the loss at `entries` of p against central differences."""
    flat = p.data.reshape(-1)
    for j in entries:
        old = flat[j]
        with no_grad():
            flat[j] = old + eps
            up = model(idx, tgt)[1].item()
            flat[j] = old - eps
            down = model(idx, tgt)[1].item()
        flat[j] = old
        assert grad.reshape(-1)[j] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-7), (name, j)


@pytest.mark.parametrize("pos, norm, mlp, prenorm, residual", VARIANTS)
def test_whole_model_passes_float64_gradcheck(pos, norm, mlp, prenorm, residual):
    """Every variant: analytic gradients of the loss against central differences of the model
    itself, on a random sample of entries of every parameter tensor."""
    i = VARIANTS.index((pos, norm, mlp, prenorm, residual))
    cfg = small_cfg(pos=pos, norm=norm, mlp=mlp, prenorm=prenorm, residual=residual,
                    bias=i % 2 == 0, tie_weights=i % 3 != 0, qk_norm=i % 4 < 2)
    model = build(cfg, seed=i, spread=0.3)
    idx, tgt = batch(cfg, B=2, T=5, seed=i)
    _, loss = model(idx, tgt)
    loss.backward()
    rng = np.random.default_rng(i)
    eps = 1e-6
    for name, p in model.named_parameters():
        grad = p.grad
        if grad is None:  # only an expert that no token was routed to may get no gradient
            assert ".experts." in name, name
            grad = np.zeros_like(p.data)
        assert grad.shape == p.shape, name
        _check_entries(model, idx, tgt, name, p, grad, rng.choice(p.size, size=min(2, p.size), replace=False), eps)


def test_tied_head_gradient_is_the_sum_of_embedding_and_head_uses():
    tied = build(small_cfg(), spread=0.3)
    untied = build(small_cfg(tie_weights=False), spread=0.3)
    for (n, p) in untied.named_parameters():
        if n != "lm_head.weight":
            p.data = dict(tied.named_parameters())[n].data.copy()
    untied.lm_head.weight.data = tied.transformer.wte.weight.data.T.copy()
    idx, tgt = batch(tied.config, T=6)
    l1, l2 = tied(idx, tgt)[1], untied(idx, tgt)[1]
    assert l1.item() == pytest.approx(l2.item(), rel=1e-12)
    l1.backward()
    l2.backward()
    expected = untied.transformer.wte.weight.grad + untied.lm_head.weight.grad.T
    np.testing.assert_allclose(tied.transformer.wte.weight.grad, expected, rtol=1e-10, atol=1e-12)


def test_moe_loss_adds_the_weighted_load_balancing_term():
    cfg = small_cfg(mlp="moe", moe_aux_coef=0.5)
    model = build(cfg, spread=0.3)
    idx, tgt = batch(cfg, T=6)
    _, loss = model(idx, tgt)
    assert model.aux_loss is not None and model.aux_loss.item() > 0
    assert loss.item() == pytest.approx(model.ce_loss.item() + 0.5 * model.aux_loss.item(), rel=1e-12)


@pytest.mark.parametrize("pos", POS)
def test_cached_forward_equals_the_uncached_one(pos):
    cfg = small_cfg(pos=pos)
    model = build(cfg, spread=0.3)
    model.eval()
    idx, _ = batch(cfg, B=2, T=7)
    with no_grad():
        full, _ = model(idx)
        caches = model.new_kv_caches(batch=2)
        steps = [model(idx[:, :4], kv_caches=caches)[0]]
        for t in range(4, 7):
            steps.append(model(idx[:, t:t + 1], kv_caches=caches, pos_offset=t)[0])
    np.testing.assert_allclose(np.concatenate([s.numpy() for s in steps], axis=1), full.numpy(), atol=1e-12)


def test_last_only_gives_the_last_row_of_the_full_logits():
    model = build(small_cfg(), spread=0.3)
    idx, _ = batch(model.config, T=6)
    with no_grad():
        full, _ = model(idx)
        last, _ = model(idx, last_only=True)
    assert last.shape == (2, 1, 11)
    np.testing.assert_allclose(last.numpy()[:, 0], full.numpy()[:, -1], atol=1e-12)


def test_trace_records_each_blocks_stream_and_branches():
    model = build(small_cfg(), spread=0.3)
    records = model.trace(True)
    idx, tgt = batch(model.config, T=6)
    _, loss = model(idx, tgt)
    for rec in records:
        for key in ("input", "attn_out", "mid", "mlp_out", "output"):
            rec[key].retain_grad()
        # x + attn branch = mid, mid + mlp branch = output (pre-norm residual)
        np.testing.assert_allclose(rec["input"].numpy() + rec["attn_out"].numpy(), rec["mid"].numpy())
        np.testing.assert_allclose(rec["mid"].numpy() + rec["mlp_out"].numpy(), rec["output"].numpy())
    assert records[0]["output"] is records[1]["input"]
    loss.backward()
    # the residual stream's gradient at a block's input = gradient at its output + what the branches send
    g_in, g_mid = records[1]["input"].grad, records[1]["mid"].grad
    assert g_in.shape == (2, 6, 8) and not np.allclose(g_in, g_mid)
    assert model.trace(False) == [None, None]


def test_dropout_is_random_in_training_and_off_in_eval():
    cfg = small_cfg(dropout=0.5)
    model = build(cfg, spread=0.3)
    idx, _ = batch(cfg, T=6)
    with no_grad():
        a, b = model(idx)[0].numpy(), model(idx)[0].numpy()
        model.eval()
        c, d = model(idx)[0].numpy(), model(idx)[0].numpy()
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(c, d)


def test_tiny_model_overfits_one_batch():
    cfg = GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=32)
    autograd.manual_seed(0)
    model = GPT(cfg)
    rng = np.random.default_rng(0)
    seq = rng.integers(0, 32, (4, 17))
    seq[:, 0] = rng.permutation(32)[:4]  # distinct first tokens: every prefix has one next token
    idx, tgt = seq[:, :-1], seq[:, 1:]
    opt = AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    for _ in range(300):
        _, loss = model(idx, tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.05:
            break
    assert loss.item() < 0.1


def test_forward_accepts_int_tensors_lists_and_int32():
    model = build(small_cfg(), spread=0.3)
    idx, tgt = batch(model.config, T=4)
    ref = model(idx, tgt)[1].item()
    assert model(Tensor(idx), Tensor(tgt))[1].item() == ref
    assert model(idx.tolist(), tgt.astype(np.int32))[1].item() == ref


@pytest.mark.gpu
@pytest.mark.skipif(not autograd.cuda_available(), reason="needs CuPy and an NVIDIA GPU")
@pytest.mark.parametrize("pos", POS)
def test_model_on_the_gpu_matches_the_cpu(pos):
    cfg = small_cfg(pos=pos, mlp="swiglu")
    cpu = build(cfg, spread=0.3)
    gpu = build(cfg, spread=0.3).to("cuda")
    idx, tgt = batch(cfg, T=6)
    (lc, c), (lg, g) = cpu(idx, tgt), gpu(idx, tgt)
    c.backward()
    g.backward()
    np.testing.assert_allclose(lg.numpy(), lc.numpy(), rtol=1e-9, atol=1e-12)
    for (name, pc), (_, pg) in zip(cpu.named_parameters(), gpu.named_parameters()):
        np.testing.assert_allclose(pg.grad.get(), pc.grad, rtol=1e-8, atol=1e-12, err_msg=name)


# ---- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "idx, message",
    [
        (np.zeros((4, 9), np.int64), r"expected idx of shape \(B, T\) with B > 0 and 0 < T <= block_size=8, got \(4, 9\)"),
        (np.zeros((0, 4), np.int64), r"with B > 0 .*got \(0, 4\)"),
        (np.zeros(5, np.int64), r"expected idx of shape \(B, T\).*got \(5,\)"),
        (np.full((1, 3), 11), r"token id 11 in idx is outside the vocabulary \[0, 11\)"),
        (np.full((1, 3), -1), r"token id -1 in idx is outside the vocabulary"),
        (np.zeros((1, 3), np.float32), r"expected idx to hold integer token ids, got dtype float32"),
    ],
)
def test_bad_idx_gives_a_clear_error(idx, message):
    with pytest.raises((ValueError, TypeError), match=message):
        GPT(small_cfg())(idx)


def test_bad_targets_and_positions_give_clear_errors():
    model = GPT(small_cfg())
    idx = np.zeros((2, 4), np.int64)
    with pytest.raises(ValueError, match=r"expected targets of shape \(2, 4\)"):
        model(idx, np.zeros((2, 3), np.int64))
    with pytest.raises(ValueError, match=r"target id 11 is outside"):
        model(idx, np.full((2, 4), 11))
    for other in (-1, -5):  # not read from the end of the vocabulary, nor skipped
        targets = np.array([[1, -100, 2, 3], [other, 0, 0, -100]])
        with pytest.raises(ValueError, match=rf"a target id below 0 is not -100.*\(got {other}\)"):
            model(idx, targets)
    skipped = np.array([[1, -100, 2, 3], [-100, 0, 0, -100]])
    kept = skipped >= 0
    _, loss = model(idx, skipped)
    logits, _ = model(idx)
    want = autograd.cross_entropy(logits[kept], Tensor(skipped[kept]))
    np.testing.assert_allclose(loss.data, want.data, rtol=1e-6)
    with pytest.raises(ValueError, match=r"pos_offset=6 .. 9 exceed block_size=8"):
        model(idx, pos_offset=6)


def test_token_ids_are_range_checked_once_per_forward_by_the_model(monkeypatch):
    """The model checks idx and targets itself (on the host when they come from there); the
    embedding and cross-entropy ops are told not to repeat it (each check is a device sync)."""
    import autograd.ops.index as index_ops
    import autograd.ops.loss as loss_ops

    calls = []
    real = index_ops.check_ids
    for module in (index_ops, loss_ops):
        monkeypatch.setattr(module, "check_ids", lambda *a, **k: calls.append(a[2:]) or real(*a, **k))
    model = GPT(small_cfg())
    idx = np.zeros((2, 4), np.int64)
    _, loss = model(idx, idx)
    loss.backward()
    assert calls == []
    with pytest.raises(ValueError, match="token id 11 in idx"):
        model(np.full((2, 4), 11))


# ---- grouped-query attention ------------------------------------------------------------------
def repeat_kv_columns(a, C, H, Hkv, hs):
    """A GQA c_attn weight (C, C + 2 Hkv hs) or bias (C + 2 Hkv hs,) as the equivalent
    multi-head one (C, 3C): each key/value head repeated for its H / Hkv query heads."""
    q, k, v = np.split(a, [C, C + Hkv * hs], axis=-1)
    rep = [np.repeat(t.reshape(t.shape[:-1] + (Hkv, hs)), H // Hkv, axis=-2).reshape(t.shape[:-1] + (H * hs,))
           for t in (k, v)]
    return np.concatenate([q] + rep, axis=-1)


@pytest.mark.parametrize("variant", [dict(), dict(pos="rope", qk_norm=True, bias=False), dict(prenorm=False)])
@pytest.mark.parametrize("n_kv_head", [1, 2])
def test_a_gqa_model_equals_the_same_model_with_its_kv_heads_repeated(variant, n_kv_head):
    gqa_cfg = small_cfg(n_head=4, n_kv_head=n_kv_head, **variant)
    mha_cfg = small_cfg(n_head=4, **variant)
    gqa, mha = build(gqa_cfg, spread=0.3), build(mha_cfg, seed=5)
    C, hs = gqa_cfg.n_embd, gqa_cfg.head_dim
    sd = {}
    for name, value in gqa.state_dict().items():
        sd[name] = repeat_kv_columns(value, C, 4, n_kv_head, hs) if ".c_attn." in name else value
    mha.load_state_dict(sd)
    idx, tgt = batch(gqa_cfg, T=6)
    (l1, loss1), (l2, loss2) = gqa(idx, tgt), mha(idx, tgt)
    np.testing.assert_allclose(l1.numpy(), l2.numpy(), rtol=1e-12, atol=1e-12)
    assert loss1.item() == pytest.approx(loss2.item(), rel=1e-13)
    assert gqa.num_params() == gqa_cfg.count_params() < mha_cfg.count_params()
    assert gqa_cfg.kv_cache_numbers_per_token() * 4 // n_kv_head == mha_cfg.kv_cache_numbers_per_token()
    assert f"n_kv_head={n_kv_head}" in gqa.report()


def test_gqa_gradients_match_finite_differences_in_float64():
    cfg = small_cfg(n_head=4, n_kv_head=2, pos="rope", qk_norm=True, tie_weights=False)
    model = build(cfg, seed=3, spread=0.3)
    idx, tgt = batch(cfg, B=2, T=5, seed=3)
    model(idx, tgt)[1].backward()
    rng, eps = np.random.default_rng(3), 1e-6
    for name, p in model.named_parameters():
        _check_entries(model, idx, tgt, name, p, p.grad, rng.choice(p.size, size=min(3, p.size), replace=False), eps)


def test_n_kv_head_must_divide_n_head():
    with pytest.raises(ValueError, match="n_kv_head must be None or a positive divisor of n_head=4"):
        small_cfg(n_head=4, n_kv_head=3)
