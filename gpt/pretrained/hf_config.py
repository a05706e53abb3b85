"""Hugging Face `config.json` <-> GPTConfig, for the architectures we can express exactly.

Reading (`config_from_hf`): GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM and
Qwen2ForCausalLM. Every field that would change the computation is either mapped or checked
against the one value we implement; anything else (a `rope_scaling` kind, a sliding window
shorter than the context, an activation we do not have) is refused with its name, never
loaded as a silently different model. Fields that only matter to training or generation
defaults (dropouts, token ids, `torch_dtype`, ...) are ignored.

Writing (`config_to_hf`): GPT-2-shaped configs (learned positions, LayerNorm, GELU) as
GPT2LMHeadModel; LLaMA-shaped ones (RoPE, RMSNorm, SwiGLU) as LlamaForCausalLM, or as
Qwen2ForCausalLM when only the q, k, v projection has biases. A variant those classes cannot
express is refused, naming the setting.

    HF (LLaMA family)          GPTConfig             HF (GPT-2)
    hidden_size                n_embd                n_embd
    num_hidden_layers          n_layer               n_layer
    num_attention_heads        n_head                n_head
    num_key_value_heads        n_kv_head             -
    intermediate_size          mlp_hidden            n_inner (None: 4 x n_embd)
    max_position_embeddings    block_size            n_positions
    rms_norm_eps               norm_eps              layer_norm_epsilon
    rope_theta                 rope_base             -
    tie_word_embeddings        tie_weights           tie_word_embeddings (default true)
"""
from __future__ import annotations

from typing import Any

from gpt.model.config import GPTConfig

LLAMA_FAMILY = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
ARCHITECTURES = ("GPT2LMHeadModel",) + LLAMA_FAMILY
# model_type of each architecture (what AutoConfig dispatches on)
MODEL_TYPES = {"GPT2LMHeadModel": "gpt2", "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
               "Qwen2ForCausalLM": "qwen2"}
GPT2_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # all the tanh approximation


class UnsupportedModel(ValueError):
    """A checkpoint whose architecture or settings this GPT cannot reproduce exactly."""


def architecture(hf: dict, where: str) -> str:
    """The one architecture named by config.json (its `architectures`, else its `model_type`)."""
    archs = hf.get("architectures") or []
    if not archs:
        by_type = {v: k for k, v in MODEL_TYPES.items()}
        if hf.get("model_type") in by_type:
            return by_type[hf["model_type"]]
        raise UnsupportedModel(f"{where}: names no 'architectures' and model_type {hf.get('model_type')!r}; "
                               f"supported: {', '.join(ARCHITECTURES)}")
    if len(archs) != 1 or archs[0] not in ARCHITECTURES:
        raise UnsupportedModel(f"{where}: field 'architectures' is {archs}; supported: {', '.join(ARCHITECTURES)}")
    return archs[0]


def _need(hf: dict, key: str, where: str) -> Any:
    if key not in hf:
        raise UnsupportedModel(f"{where}: field {key!r} is missing")
    return hf[key]


def _only(hf: dict, key: str, allowed: tuple, where: str, why: str) -> None:
    """Refuse a field whose value is not one of `allowed` (a missing field counts as allowed[0])."""
    value = hf.get(key, allowed[0])
    if value not in allowed:
        raise UnsupportedModel(f"{where}: field {key!r} is {value!r}, which is not implemented ({why}); "
                               f"supported: {', '.join(map(repr, allowed))}")


def config_from_hf(hf: dict, where: str = "config.json", block_size: int | None = None) -> GPTConfig:
    """The GPTConfig of a Hugging Face config.json dict. block_size: use a shorter context than
    the checkpoint's (a learned position table is cropped to it; a sliding window must cover it)."""
    arch = architecture(hf, where)
    cfg = _gpt2_config(hf, where) if arch == "GPT2LMHeadModel" else _llama_config(hf, arch, where)
    if block_size is not None:
        if not 0 < block_size <= cfg["block_size"]:
            raise ValueError(f"block_size={block_size} must be in 1..{cfg['block_size']} (the checkpoint's "
                             "max_position_embeddings / n_positions)")
        cfg["block_size"] = int(block_size)
    window = hf.get("sliding_window")
    uses_window = hf.get("use_sliding_window", arch == "MistralForCausalLM")
    if uses_window and window is not None and window < cfg["block_size"]:
        raise UnsupportedModel(
            f"{where}: field 'sliding_window' is {window}, shorter than the context of {cfg['block_size']} "
            "positions, and sliding-window attention is not implemented; load with block_size <= "
            f"{window} (GPT.from_pretrained(path, block_size={window}))")
    try:
        return GPTConfig(**cfg)
    except ValueError as exc:
        raise UnsupportedModel(f"{where}: {exc}") from None


def _gpt2_config(hf: dict, where: str) -> dict:
    _only(hf, "activation_function", GPT2_ACTIVATIONS, where, "our GELU is the tanh approximation")
    _only(hf, "scale_attn_weights", (True,), where, "scores are always scaled by 1/sqrt(head_dim)")
    _only(hf, "scale_attn_by_inverse_layer_idx", (False,), where, "no per-layer score scaling")
    _only(hf, "add_cross_attention", (False,), where, "a decoder-only model")
    C = _need(hf, "n_embd", where)
    return dict(
        vocab_size=_need(hf, "vocab_size", where), block_size=_need(hf, "n_positions", where),
        n_layer=_need(hf, "n_layer", where), n_head=_need(hf, "n_head", where), n_embd=C,
        mlp_hidden=None if hf.get("n_inner") in (None, 4 * C) else hf["n_inner"], bias=True, tie_weights=bool(hf.get("tie_word_embeddings", True)),
        pos="learned", norm="layernorm", mlp="gelu", norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
    )


def _llama_config(hf: dict, arch: str, where: str) -> dict:
    for key in ("rope_scaling", "rope_parameters"):  # transformers 5 writes rope_parameters
        scaling = hf.get(key) or {}
        kind = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else scaling
        if kind != "default":
            raise UnsupportedModel(f"{where}: field {key!r} is of kind {kind!r}, which is not implemented "
                                   "(only plain RoPE: rope_scaling null or rope_type 'default')")
    _only(hf, "hidden_act", ("silu",), where, "the SwiGLU gate is SiLU")
    C, H = _need(hf, "hidden_size", where), _need(hf, "num_attention_heads", where)
    if hf.get("head_dim") not in (None, C // H):
        raise UnsupportedModel(f"{where}: field 'head_dim' is {hf['head_dim']}, not hidden_size / "
                               f"num_attention_heads = {C // H}; a separate head size is not implemented")
    _only(hf, "partial_rotary_factor", (1.0, 1), where, "RoPE rotates the whole head")
    qkv_bias = arch == "Qwen2ForCausalLM"
    bias = bool(hf.get("attention_bias", False))
    if bias != bool(hf.get("mlp_bias", False)):
        raise UnsupportedModel(f"{where}: fields 'attention_bias'={hf.get('attention_bias')} and "
                               f"'mlp_bias'={hf.get('mlp_bias')} differ; biases on one sublayer only are not implemented")
    if arch == "Qwen2ForCausalLM" and bias:
        raise UnsupportedModel(f"{where}: field 'attention_bias' is set on a Qwen2 model (not implemented)")
    rope_base = hf.get("rope_theta", (hf.get("rope_parameters") or {}).get("rope_theta", 10000.0))
    n_kv = hf.get("num_key_value_heads") or H
    return dict(
        vocab_size=_need(hf, "vocab_size", where), block_size=_need(hf, "max_position_embeddings", where),
        n_layer=_need(hf, "num_hidden_layers", where), n_head=H, n_embd=C,
        n_kv_head=None if n_kv == H else n_kv, mlp_hidden=_need(hf, "intermediate_size", where),
        bias=bias, qkv_bias=True if qkv_bias else None, tie_weights=bool(hf.get("tie_word_embeddings", False)),
        pos="rope", norm="rmsnorm", mlp="swiglu", norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_base=float(rope_base),
    )


def export_architecture(cfg: GPTConfig) -> str:
    """The transformers class that computes exactly what `cfg` does, or UnsupportedModel naming
    the setting that none of them can express."""
    problems = []
    if not cfg.prenorm:
        problems.append("prenorm=False (post-norm)")
    if not cfg.residual:
        problems.append("residual=False")
    if cfg.qk_norm:
        problems.append("qk_norm=True")
    if cfg.mlp in ("moe", "relu2"):
        problems.append(f"mlp={cfg.mlp!r}")
    if cfg.pos == "sinusoidal":
        problems.append("pos='sinusoidal'")
    if not problems:
        if (cfg.pos, cfg.norm, cfg.mlp) == ("learned", "layernorm", "gelu"):
            if cfg.bias and cfg.n_kv_head in (None, cfg.n_head) and cfg.has_qkv_bias:
                return "GPT2LMHeadModel"
            problems.append("a GPT-2-shaped model needs bias=True and no grouped-query attention")
        elif (cfg.pos, cfg.norm, cfg.mlp) == ("rope", "rmsnorm", "swiglu"):
            if cfg.has_qkv_bias and not cfg.bias:
                return "Qwen2ForCausalLM"
            if cfg.has_qkv_bias == cfg.bias:
                return "LlamaForCausalLM"
            problems.append("qkv_bias=False with bias=True")
        else:
            problems.append(f"pos={cfg.pos!r}, norm={cfg.norm!r}, mlp={cfg.mlp!r} (GPT-2 is learned/layernorm/"
                            "gelu, LLaMA rope/rmsnorm/swiglu)")
    raise UnsupportedModel("this model has no Hugging Face transformers class that computes the same: "
                           + "; ".join(problems))


def config_to_hf(cfg: GPTConfig, extra: dict | None = None) -> dict:
    """config.json for `cfg` (see `export_architecture`); `extra` adds fields (token ids)."""
    arch = export_architecture(cfg)
    common = {"architectures": [arch], "model_type": MODEL_TYPES[arch], "vocab_size": cfg.vocab_size,
              "tie_word_embeddings": cfg.tie_weights, "torch_dtype": "float32", "use_cache": True}
    if arch == "GPT2LMHeadModel":
        d = dict(common, n_embd=cfg.n_embd, n_layer=cfg.n_layer, n_head=cfg.n_head, n_positions=cfg.block_size,
                 n_ctx=cfg.block_size, n_inner=cfg.hidden, activation_function="gelu_new",
                 layer_norm_epsilon=cfg.norm_eps, resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout,
                 attn_pdrop=cfg.dropout, scale_attn_weights=True, initializer_range=cfg.init_std)
    else:
        d = dict(common, hidden_size=cfg.n_embd, num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head,
                 num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_dim, intermediate_size=cfg.hidden,
                 max_position_embeddings=cfg.block_size, rms_norm_eps=cfg.norm_eps, rope_theta=cfg.rope_base,
                 rope_scaling=None, hidden_act="silu", attention_dropout=cfg.dropout,
                 initializer_range=cfg.init_std)
        if arch == "LlamaForCausalLM":
            d.update(attention_bias=cfg.bias, mlp_bias=cfg.bias)
        else:
            d.update(use_sliding_window=False, sliding_window=None, max_window_layers=cfg.n_layer)
    d.update(extra or {})
    return d
