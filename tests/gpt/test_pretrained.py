"""Hugging Face model folders in and out, checked without PyTorch: files written with the
safetensors package under Hugging Face's names give the logits of a NumPy reference of each
architecture (written here from the papers' equations), and our folders load back exactly."""
import json
import struct

import numpy as np
import pytest

from autograd import manual_seed
from gpt import GPT, GPTConfig
from gpt.pretrained import UnsupportedModel, hf_weights, save_pretrained
from gpt.pretrained.families import named
from gpt.pretrained.hf_config import config_to_hf
from nn import bfloat16

safetensors_numpy = pytest.importorskip("safetensors.numpy")

V, T = 61, 16
GPT2 = GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=4, n_embd=32)
LLAMA_GQA = GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, pos="rope",
                      norm="rmsnorm", mlp="swiglu", mlp_hidden=48, bias=False, tie_weights=False,
                      rope_base=500000.0, norm_eps=1e-5)
QWEN2 = LLAMA_GQA.replace(qkv_bias=True, n_kv_head=1, tie_weights=True)


# ---- NumPy references of the Hugging Face architectures (float64) -------------------------------
def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attention(q, k, v):
    """q (H, T, hs), k, v (H, T, hs): causal softmax(q k^T / sqrt(hs)) v."""
    n = q.shape[1]
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    scores = np.where(np.tril(np.ones((n, n), bool)), scores, -np.inf)
    return _softmax(scores) @ v


def gpt2_reference(w, cfg, ids):
    """GPT2LMHeadModel: Conv1D weights (in, out), LayerNorm, gelu_new, tied head."""
    def ln(x, p):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + cfg.norm_eps) * w[p + ".weight"] + w[p + ".bias"]

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    H, hs = cfg.n_head, cfg.head_dim
    x = w["wte.weight"][ids] + w["wpe.weight"][: len(ids)]
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = (a.reshape(len(ids), H, hs).transpose(1, 0, 2) for a in np.split(qkv, 3, axis=-1))
        y = _attention(q, k, v).transpose(1, 0, 2).reshape(len(ids), -1)
        x = x + y @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = gelu(ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ w["wte.weight"].T


def llama_reference(w, cfg, ids):
    """LlamaForCausalLM / Qwen2ForCausalLM: nn.Linear weights (out, in), RMSNorm, half-split RoPE
    (rotate_half), grouped-query attention by repeating kv heads, SwiGLU."""
    def rms(x, name):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.norm_eps) * w[name]

    def lin(x, name):
        return x @ w[name + ".weight"].T + w.get(name + ".bias", 0.0)

    n, H, Hkv, hs = len(ids), cfg.n_head, cfg.kv_heads, cfg.head_dim
    inv = cfg.rope_base ** (-np.arange(0, hs, 2) / hs)
    ang = np.arange(n)[:, None] * inv
    cos, sin = np.concatenate([np.cos(ang)] * 2, -1), np.concatenate([np.sin(ang)] * 2, -1)

    def rope(a):  # (heads, T, hs)
        rot = np.concatenate([-a[..., hs // 2:], a[..., : hs // 2]], -1)
        return a * cos + rot * sin

    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg.n_layer):
        p = f"model.layers.{i}."
        h = rms(x, p + "input_layernorm.weight")
        heads = lambda a, m: a.reshape(n, m, hs).transpose(1, 0, 2)  # noqa: E731
        q = rope(heads(lin(h, p + "self_attn.q_proj"), H))
        k = np.repeat(rope(heads(lin(h, p + "self_attn.k_proj"), Hkv)), H // Hkv, axis=0)
        v = np.repeat(heads(lin(h, p + "self_attn.v_proj"), Hkv), H // Hkv, axis=0)
        x = x + lin(_attention(q, k, v).transpose(1, 0, 2).reshape(n, -1), p + "self_attn.o_proj")
        h = rms(x, p + "post_attention_layernorm.weight")
        gate, up = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        x = x + lin(gate / (1 + np.exp(-gate)) * up, p + "mlp.down_proj")
    x = rms(x, "model.norm.weight")
    head = w["model.embed_tokens.weight"] if cfg.tie_weights else w["lm_head.weight"]
    return x @ head.T


# ---- writing folders the way Hugging Face does ---------------------------------------------------
def random_hf_tensors(cfg, family, seed=0):
    """Random float32 tensors under Hugging Face's names and shapes (our mapping, inverted);
    family: a family's name or HF class."""
    manual_seed(seed)
    model = GPT(cfg)
    rng = np.random.default_rng(seed)
    state = {k: (v + rng.normal(0, 0.1, v.shape)).astype(np.float32) for k, v in model.state_dict().items()}
    return hf_weights.to_hf(state, cfg, named(family))


def save_bf16_by_hand(path, tensors):
    """A safetensors file whose tensors are BF16, laid out by hand (the package cannot from NumPy)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, arr in tensors.items():
        raw = bfloat16.from_float(arr).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_folder(folder, cfg, tensors, bf16=False, config=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or config_to_hf(cfg)))
    if bf16:
        save_bf16_by_hand(folder / "model.safetensors", tensors)
    else:
        safetensors_numpy.save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


IDS = np.random.default_rng(5).integers(0, V, T)


@pytest.mark.parametrize("prefixed", [True, False])
def test_gpt2_files_written_by_safetensors_give_the_reference_logits(tmp_path, prefixed):
    tensors = random_hf_tensors(GPT2, "GPT2LMHeadModel")
    plain = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    files = dict(tensors) if prefixed else dict(plain)
    mask = np.tril(np.ones((1, 1, T, T), np.float32))
    for i in range(GPT2.n_layer):  # the causal-mask buffers old checkpoints carry, and a tied head
        files[f"{'transformer.' if prefixed else ''}h.{i}.attn.bias"] = mask
        files[f"{'transformer.' if prefixed else ''}h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    files["lm_head.weight"] = plain["wte.weight"]
    model = GPT.from_pretrained(write_folder(tmp_path / "gpt2", GPT2, files))
    ref = gpt2_reference({k: v.astype(np.float64) for k, v in plain.items()}, GPT2, IDS)
    got = model(IDS[None])[0].numpy()[0]
    np.testing.assert_allclose(got, ref, atol=1e-4)
    assert model.config.tie_weights and model.config.pos == "learned"


@pytest.mark.parametrize("cfg,arch", [(LLAMA_GQA, "LlamaForCausalLM"), (QWEN2, "Qwen2ForCausalLM"),
                                      (LLAMA_GQA, "MistralForCausalLM")])
@pytest.mark.parametrize("bf16", [False, True])
def test_llama_family_files_give_the_reference_logits(tmp_path, cfg, arch, bf16):
    tensors = random_hf_tensors(cfg, "Qwen2ForCausalLM" if arch == "Qwen2ForCausalLM" else "LlamaForCausalLM")
    config = dict(config_to_hf(cfg), architectures=[arch])
    if arch == "MistralForCausalLM":
        config.update(model_type="mistral", sliding_window=None)
        config.pop("attention_bias"), config.pop("mlp_bias")
    model = GPT.from_pretrained(write_folder(tmp_path / arch, cfg, tensors, bf16=bf16, config=config))
    if bf16:  # the reference sees the same rounded weights
        tensors = {k: bfloat16.to_float32(bfloat16.from_float(v)) for k, v in tensors.items()}
    ref = llama_reference({k: v.astype(np.float64) for k, v in tensors.items()}, cfg, IDS)
    np.testing.assert_allclose(model(IDS[None])[0].numpy()[0], ref, atol=1e-4)
    assert model.config.kv_heads == cfg.kv_heads and model.config.has_qkv_bias == cfg.has_qkv_bias


# Phi-3-mini-4k's config.json, shrunk: no biases, fused qkv_proj / gate_up_proj, a window of
# max_position_embeddings - 1 (2047 of 4096 in the real one).
PHI3 = LLAMA_GQA.replace(norm_eps=1e-5, rope_base=10000.0)


def phi3_config(**changes):
    return dict({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_dropout": 0.0,
                 "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
                 "hidden_size": PHI3.n_embd, "initializer_range": 0.02, "intermediate_size": PHI3.hidden,
                 "max_position_embeddings": T, "num_attention_heads": PHI3.n_head, "num_hidden_layers": PHI3.n_layer,
                 "num_key_value_heads": PHI3.kv_heads, "original_max_position_embeddings": T, "pad_token_id": 32000,
                 "resid_pdrop": 0.0, "rms_norm_eps": 1e-5, "rope_scaling": None, "rope_theta": 10000.0,
                 "sliding_window": T - 1, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                 "use_cache": True, "vocab_size": V}, **changes)


def fuse_to_phi3(tensors):
    """LLaMA-named tensors fused by hand into Phi-3's: q, k, v rows stacked; gate rows, then up rows."""
    out = {}
    for name, arr in tensors.items():
        if ".self_attn.q_proj." in name:
            p = name.split("q_proj")[0]
            out[p + "qkv_proj.weight"] = np.concatenate([tensors[p + f"{x}_proj.weight"] for x in "qkv"], axis=0)
        elif ".mlp.gate_proj." in name:
            p = name.split("gate_proj")[0]
            out[p + "gate_up_proj.weight"] = np.concatenate([arr, tensors[p + "up_proj.weight"]], axis=0)
        elif not any(f".{x}." in name for x in ("k_proj", "v_proj", "up_proj")):
            out[name] = arr
    return out


def test_phi3_files_give_the_reference_logits_within_its_window(tmp_path):
    split = random_hf_tensors(PHI3, "llama")
    fused = fuse_to_phi3(split)
    qkv = fused["model.layers.0.self_attn.qkv_proj.weight"]
    assert qkv.shape == (PHI3.n_embd + 2 * PHI3.kv_heads * PHI3.head_dim, PHI3.n_embd)
    assert fused["model.layers.0.mlp.gate_up_proj.weight"].shape == (2 * PHI3.hidden, PHI3.n_embd)
    folder = write_folder(tmp_path / "phi3", PHI3, fused, config=phi3_config())
    with pytest.raises(UnsupportedModel, match="sliding_window.*block_size <= 15"):
        GPT.from_pretrained(folder)
    model = GPT.from_pretrained(folder, block_size=T - 1)
    ref = llama_reference({k: v.astype(np.float64) for k, v in split.items()}, PHI3, IDS[:T - 1])
    np.testing.assert_allclose(model(IDS[None, :T - 1])[0].numpy()[0], ref, atol=1e-4)
    unwindowed = GPT.from_pretrained(write_folder(tmp_path / "full", PHI3, fused, config=phi3_config(sliding_window=None)))
    assert unwindowed.config == PHI3.replace(init_std=unwindowed.config.init_std)


@pytest.mark.parametrize("changes,named_field", [
    ({"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0] * 4}}, "rope_scaling"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.75}},
     "partial_rotary_factor"),
    ({"hidden_act": "gelu"}, "hidden_act"),
])
def test_phi3_variants_we_do_not_compute_are_refused_by_name(tmp_path, changes, named_field):
    fused = fuse_to_phi3(random_hf_tensors(PHI3, "llama"))
    with pytest.raises(UnsupportedModel, match=named_field):
        GPT.from_pretrained(write_folder(tmp_path / "m", PHI3, fused, config=phi3_config(sliding_window=None, **changes)))


def test_phi3_round_trips_through_save_pretrained_with_fused_tensors(tmp_path):
    manual_seed(3)
    model = GPT(PHI3).eval()
    save_pretrained(model, tmp_path / "out", family="phi3")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["Phi3ForCausalLM"] and config["model_type"] == "phi3"
    assert config["sliding_window"] is None and config["rope_scaling"] is None
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (None, None, None)
    tensors = safetensors_numpy.load_file(str(tmp_path / "out" / "model.safetensors"))
    sd = model.state_dict()
    np.testing.assert_array_equal(tensors["model.layers.1.self_attn.qkv_proj.weight"],
                                  sd["transformer.h.1.attn.c_attn.weight"].T)
    gate_up = tensors["model.layers.0.mlp.gate_up_proj.weight"]
    np.testing.assert_array_equal(gate_up[:PHI3.hidden], sd["transformer.h.0.mlp.c_fc.weight"][:, :PHI3.hidden].T)
    assert not any("q_proj" in n or "gate_proj." in n for n in tensors)
    back = GPT.from_pretrained(tmp_path / "out")
    assert back.config == PHI3.replace(init_std=back.config.init_std)
    assert np.array_equal(model(IDS[None])[0].numpy(), back(IDS[None])[0].numpy())
    with pytest.raises(UnsupportedModel, match="Phi3ForCausalLM.*no biases"):
        save_pretrained(GPT(PHI3.replace(bias=True)), tmp_path / "b", family="phi3")


def test_token_ids_in_config_json_are_the_tokenizers_end_of_text_or_null(tmp_path):
    from bpe import Tokenizer

    model = GPT(GPT2.replace(vocab_size=301))
    texts = ["hello world, hello tokens " * 20]
    with_eot = Tokenizer.train_from_iterator(texts, vocab_size=265, special_tokens=["<|endoftext|>"])
    for name, tok, expected in [("none", None, None), ("eot", with_eot, with_eot.special_tokens["<|endoftext|>"]),
                                ("plain", Tokenizer.train_from_iterator(texts, vocab_size=265), None)]:
        model.save_pretrained(tmp_path / name, tokenizer=tok)
        config = json.loads((tmp_path / name / "config.json").read_text())
        assert config["bos_token_id"] == config["eos_token_id"] == expected, name
        assert config["pad_token_id"] is None  # never a class default such as GPT-2's 50256 or Phi-3's 32000


@pytest.mark.parametrize("cfg", [GPT2, LLAMA_GQA, QWEN2, LLAMA_GQA.replace(bias=True)],
                         ids=["gpt2", "llama-gqa", "qwen2", "llama-bias"])
def test_save_pretrained_then_from_pretrained_gives_identical_logits(tmp_path, cfg):
    manual_seed(1)
    model = GPT(cfg).eval()
    model.save_pretrained(tmp_path / "out")
    back = GPT.from_pretrained(tmp_path / "out")
    assert back.config == cfg.replace(init_std=back.config.init_std)
    ids = IDS[None].repeat(2, 0)
    assert np.array_equal(model(ids)[0].numpy(), back(ids)[0].numpy())
    assert np.array_equal(model.generate(ids[:, :4], 8, temperature=0), back.generate(ids[:, :4], 8, temperature=0))


def test_bf16_save_stores_half_the_bytes_and_loads_the_rounded_weights(tmp_path):
    model = GPT(LLAMA_GQA)
    model.save_pretrained(tmp_path / "bf16", bf16=True)
    header = json.loads((tmp_path / "bf16" / "model.safetensors").read_bytes()[8:][:4000].split(b"}}")[0] + b"}}")
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}
    back = GPT.from_pretrained(tmp_path / "bf16")
    for (name, a), b in zip(model.state_dict().items(), back.state_dict().values()):
        assert np.array_equal(bfloat16.to_float32(bfloat16.from_float(a)), b), name


def test_shards_listed_by_an_index_load_like_one_file(tmp_path):
    tensors = random_hf_tensors(LLAMA_GQA, "LlamaForCausalLM")
    one = GPT.from_pretrained(write_folder(tmp_path / "one", LLAMA_GQA, tensors))
    folder = tmp_path / "sharded"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config_to_hf(LLAMA_GQA)))
    names = list(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in shards.items():
        safetensors_numpy.save_file({n: tensors[n] for n in part}, str(folder / file), metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {n: f for f, part in shards.items() for n in part}}))
    two = GPT.from_pretrained(folder)
    assert np.array_equal(one(IDS[None])[0].numpy(), two(IDS[None])[0].numpy())


def test_a_shorter_block_size_crops_gpt2_positions(tmp_path):
    folder = write_folder(tmp_path / "g", GPT2, random_hf_tensors(GPT2, "GPT2LMHeadModel"))
    full, short = GPT.from_pretrained(folder), GPT.from_pretrained(folder, block_size=8)
    assert short.config.block_size == 8
    np.testing.assert_array_equal(full(IDS[None, :8])[0].numpy(), short(IDS[None, :8])[0].numpy())


# ---- refusals: never a silently different model --------------------------------------------------
def _llama_folder(tmp_path, **changes):
    config = dict(config_to_hf(LLAMA_GQA), **changes)
    return write_folder(tmp_path / "m", LLAMA_GQA, random_hf_tensors(LLAMA_GQA, "LlamaForCausalLM"), config=config)


@pytest.mark.parametrize("changes,named", [
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"architectures": ["FalconForCausalLM"]}, "architectures"),
    ({"architectures": ["MistralForCausalLM"], "sliding_window": 8}, "sliding_window"),
    ({"attention_bias": True}, "mlp_bias"),
])
def test_unimplemented_config_fields_are_refused_by_name(tmp_path, changes, named):
    with pytest.raises(UnsupportedModel, match=named):
        GPT.from_pretrained(_llama_folder(tmp_path, **changes))


def test_a_sliding_window_covering_the_context_is_accepted(tmp_path):
    folder = _llama_folder(tmp_path, architectures=["MistralForCausalLM"], sliding_window=T)
    assert GPT.from_pretrained(folder).config.block_size == T
    assert GPT.from_pretrained(_llama_folder(tmp_path / "b", architectures=["MistralForCausalLM"], sliding_window=8),
                               block_size=8).config.block_size == 8


def test_a_pickle_only_folder_is_refused_with_the_conversion(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(GPT2)))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x02not loaded")
    with pytest.raises(ValueError, match="pickle.*safe_serialization"):
        GPT.from_pretrained(tmp_path)


def test_missing_and_unknown_tensors_are_listed(tmp_path):
    tensors = random_hf_tensors(LLAMA_GQA, "LlamaForCausalLM")
    tensors.pop("model.norm.weight")
    tensors["model.layers.0.self_attn.q_norm.weight"] = np.ones(8, np.float32)
    with pytest.raises(UnsupportedModel, match="model.norm.weight.*q_norm"):
        GPT.from_pretrained(write_folder(tmp_path / "m", LLAMA_GQA, tensors))


@pytest.mark.parametrize("changes,named", [
    ({"pos": "sinusoidal"}, "sinusoidal"), ({"prenorm": False}, "post-norm"), ({"residual": False}, "residual"),
    ({"mlp": "moe"}, "moe"), ({"mlp": "relu2"}, "relu2"), ({"qk_norm": True}, "qk_norm"),
    ({"bias": False}, "bias=True"),
])
def test_save_pretrained_refuses_what_transformers_cannot_express(tmp_path, changes, named):
    with pytest.raises(UnsupportedModel, match=named):
        GPT(GPT2.replace(**changes)).save_pretrained(tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_a_missing_rms_norm_eps_takes_the_classs_own_default():
    from gpt.pretrained.hf_config import config_from_hf

    phi3 = {k: v for k, v in phi3_config(sliding_window=None).items() if k != "rms_norm_eps"}
    llama = dict(config_to_hf(GPT(GPTConfig(vocab_size=32, block_size=8, n_layer=1, n_head=2, n_embd=8,
                                            pos="rope", norm="rmsnorm", mlp="swiglu", bias=False)).config))
    llama.pop("rms_norm_eps")
    assert config_from_hf(phi3).norm_eps == 1e-5 and config_from_hf(llama).norm_eps == 1e-6
