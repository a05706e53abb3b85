"""The LLaMA family: LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM (RoPE, RMSNorm, SwiGLU).

    config.json                GPTConfig
    hidden_size                n_embd
    num_hidden_layers          n_layer
    num_attention_heads        n_head
    num_key_value_heads        n_kv_head
    intermediate_size          mlp_hidden
    max_position_embeddings    block_size
    rms_norm_eps               norm_eps
    rope_theta                 rope_base
    tie_word_embeddings        tie_weights (default false)

nn.Linear weights are (out, in), so matrices are transposed:
    model.embed_tokens.weight                        -> transformer.wte.weight
    model.layers.{i}.input_layernorm.weight          -> transformer.h.{i}.ln_1.weight
    .self_attn.q_proj | k_proj | v_proj (.bias)      -> .attn.c_attn = [q^T | k^T | v^T]
    .self_attn.o_proj                                -> .attn.c_proj = o^T
    .post_attention_layernorm.weight                 -> .ln_2.weight
    .mlp.gate_proj | up_proj                         -> .mlp.c_fc = [gate^T | up^T]
    .mlp.down_proj                                   -> .mlp.c_proj = down^T
    model.norm.weight                                -> transformer.ln_f.weight
    lm_head.weight (V, C)                            -> lm_head.weight (C, V) (untied only)
The fused layouts are nn.MultiHeadAttention's (q heads, then k heads, then v heads along the
output axis) and nn.SwiGLU's (gate half, then up half). Qwen2 has biases on q, k, v alone;
LLaMA on every linear layer or none; Mistral on none.

llama.cpp's `llama` rotates interleaved pairs (as Meta's original checkpoints), so the rows of q
and k are permuted per head in a GGUF file, as convert_hf_to_gguf.py does; its `qwen2` rotates
the half-split pairs, so nothing is permuted there.
"""
from __future__ import annotations

from typing import Callable

from gpt.model.config import GPTConfig
from gpt.pretrained.families.family import DECODER, Family, GGUFLayout, Recipe, UnsupportedModel, need, only
from gpt.pretrained.families.fields import (FLAG, NUMBER, POSITIVE, POSITIVE_INT, POSITIVE_INT_OR_NULL, TEXT,
                                            TEXT_OR_NULL, Nested)

SHAPE = dict(DECODER, pos="rope", norm="rmsnorm", mlp="swiglu")
SPLIT_QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
SPLIT_GATE_UP = ("mlp.gate_proj", "mlp.up_proj")
KEYS = dict(vocab_size="vocab_size", block_size="max_position_embeddings", n_layer="num_hidden_layers",
            n_head="num_attention_heads", n_embd="hidden_size", n_kv_head="num_key_value_heads",
            mlp_hidden="intermediate_size")
_ROPE = dict(rope_type=TEXT_OR_NULL, type=TEXT_OR_NULL, rope_theta=POSITIVE, partial_rotary_factor=NUMBER)
SCHEMA = dict(hidden_size=POSITIVE_INT, num_hidden_layers=POSITIVE_INT, num_attention_heads=POSITIVE_INT,
              num_key_value_heads=POSITIVE_INT_OR_NULL, intermediate_size=POSITIVE_INT,
              max_position_embeddings=POSITIVE_INT, head_dim=POSITIVE_INT_OR_NULL, rms_norm_eps=POSITIVE,
              rope_theta=POSITIVE, partial_rotary_factor=NUMBER, hidden_act=TEXT, attention_bias=FLAG,
              mlp_bias=FLAG, rope_scaling=Nested(_ROPE), rope_parameters=Nested(_ROPE))


def _refuse_rope_variants(hf: dict, where: str) -> None:
    for key in ("rope_scaling", "rope_parameters"):  # transformers 5 writes rope_parameters
        scaling = hf.get(key) or {}
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind != "default":
            raise UnsupportedModel(f"{where}: field {key!r} is of kind {kind!r}, which is not implemented "
                                   "(only plain RoPE: rope_scaling null or rope_type 'default')")
    only(hf, "partial_rotary_factor", (1.0, 1), where, "RoPE rotates the whole head")
    only(hf.get("rope_parameters") or {}, "partial_rotary_factor", (1.0, 1), f"{where}: rope_parameters",
         "RoPE rotates the whole head")


def reader(biases: str, eps: float = 1e-6) -> Callable[[dict, str], dict]:
    """config.json -> GPTConfig fields for a LLaMA-shaped class. biases: "llama" (attention_bias
    and mlp_bias, both or neither), "qkv" (q, k, v only: Qwen2) or "none" (Mistral, Phi-3); eps:
    the class's rms_norm_eps where config.json leaves it out (transformers' default for it)."""
    def read(hf: dict, where: str) -> dict:
        _refuse_rope_variants(hf, where)
        only(hf, "hidden_act", ("silu",), where, "the SwiGLU gate is SiLU")
        sizes = {ours: need(hf, key, where) for ours, key in KEYS.items() if ours != "n_kv_head"}
        C, H = sizes["n_embd"], sizes["n_head"]
        if hf.get("head_dim") not in (None, C // H):
            raise UnsupportedModel(f"{where}: field 'head_dim' is {hf['head_dim']}, not hidden_size / "
                                   f"num_attention_heads = {C // H}; a separate head size is not implemented")
        bias = biases == "llama" and bool(hf.get("attention_bias", False))
        if biases == "llama" and bias != bool(hf.get("mlp_bias", False)):
            raise UnsupportedModel(f"{where}: fields 'attention_bias'={hf.get('attention_bias')} and "
                                   f"'mlp_bias'={hf.get('mlp_bias')} differ; biases on one sublayer only are not "
                                   "implemented")
        if biases == "qkv" and hf.get("attention_bias"):
            raise UnsupportedModel(f"{where}: field 'attention_bias' is set on a Qwen2 model (not implemented)")
        rope_base = hf.get("rope_theta", (hf.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        n_kv = hf.get("num_key_value_heads") or H
        return dict(
            sizes, n_kv_head=None if n_kv == H else n_kv, bias=bias, qkv_bias=True if biases == "qkv" else None,
            tie_weights=bool(hf.get("tie_word_embeddings", False)), pos="rope", norm="rmsnorm", mlp="swiglu",
            norm_eps=float(hf.get("rms_norm_eps", eps)), rope_base=float(rope_base),
        )
    return read


def common_fields(cfg: GPTConfig) -> dict:
    """The config.json fields every LLaMA-shaped class shares."""
    return dict(hidden_size=cfg.n_embd, num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head,
                num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_dim, intermediate_size=cfg.hidden,
                max_position_embeddings=cfg.block_size, rms_norm_eps=cfg.norm_eps, rope_theta=cfg.rope_base,
                rope_scaling=None, hidden_act="silu", attention_dropout=cfg.dropout,
                initializer_range=cfg.init_std)


def recipes(cfg: GPTConfig, qkv: tuple[str, ...] = SPLIT_QKV,
            gate_up: tuple[str, ...] = SPLIT_GATE_UP) -> dict[str, Recipe]:
    """Our parameters from LLaMA-shaped tensors; qkv / gate_up: the HF sublayers that hold the
    fused projections (three and two separate ones, or one already fused: Phi-3)."""
    kv = cfg.kv_heads * cfg.head_dim
    out = {"transformer.wte.weight": Recipe(("model.embed_tokens.weight",), "same"),
           "transformer.ln_f.weight": Recipe(("model.norm.weight",), "same")}
    for i in range(cfg.n_layer):
        hf, us = f"model.layers.{i}.", f"transformer.h.{i}."
        out[us + "ln_1.weight"] = Recipe((hf + "input_layernorm.weight",), "same")
        out[us + "ln_2.weight"] = Recipe((hf + "post_attention_layernorm.weight",), "same")
        parts = [("attn.c_attn", qkv, (cfg.n_embd, kv, kv), cfg.has_qkv_bias),
                 ("attn.c_proj", ("self_attn.o_proj",), (), cfg.bias),
                 ("mlp.c_fc", gate_up, (cfg.hidden, cfg.hidden), cfg.bias),
                 ("mlp.c_proj", ("mlp.down_proj",), (), cfg.bias)]
        for ours, theirs, sizes, has_bias in parts:
            one = len(theirs) == 1
            names = tuple(hf + t for t in theirs)
            out[us + ours + ".weight"] = Recipe(tuple(n + ".weight" for n in names), "T" if one else "catT",
                                                () if one else sizes)
            if has_bias:
                out[us + ours + ".bias"] = Recipe(tuple(n + ".bias" for n in names), "same" if one else "cat",
                                                  () if one else sizes)
    if not cfg.tie_weights:
        out["lm_head.weight"] = Recipe(("lm_head.weight",), "T")
    return out


def gguf_layout(arch: str, fused: bool = False, **kw) -> GGUFLayout:
    """llama.cpp's names for LLaMA-shaped tensors (fused: Phi-3's qkv_proj and gate_up_proj)."""
    blocks = {"input_layernorm": "attn_norm", "self_attn.o_proj": "attn_output",
              "post_attention_layernorm": "ffn_norm", "mlp.down_proj": "ffn_down"}
    if fused:  # llama.cpp's ffn_up then holds gate and up, gate first
        blocks.update({"self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up"})
    else:
        blocks.update(dict(zip(SPLIT_QKV + SPLIT_GATE_UP, ("attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"))))
    return GGUFLayout(arch=arch, layer_prefix="model.layers.", blocks=blocks,
                      globals={"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"},
                      **kw)


def no_biases(cfg: GPTConfig) -> str | None:
    return None if not cfg.bias and not cfg.has_qkv_bias else "no biases (this model has bias or qkv_bias)"


LLAMA = Family(
    name="llama", hf_class="LlamaForCausalLM", model_type="llama", shape=SHAPE,
    fits=lambda cfg: None if cfg.has_qkv_bias == cfg.bias else "qkv_bias=False with bias=True",
    read=reader("llama"), write=lambda cfg: dict(common_fields(cfg), attention_bias=cfg.bias, mlp_bias=cfg.bias),
    weights=recipes, eot_names=("<|end_of_text|>", "</s>", "<|endoftext|>"), schema=SCHEMA, keys=KEYS,
    gguf=gguf_layout("llama", rope_rows=("self_attn.q_proj", "self_attn.k_proj"), biases=False),
)

QWEN2 = Family(
    name="qwen2", hf_class="Qwen2ForCausalLM", model_type="qwen2", shape=SHAPE,
    fits=lambda cfg: None if cfg.has_qkv_bias and not cfg.bias else "Qwen2 has biases on q, k, v alone",
    read=reader("qkv"),
    write=lambda cfg: dict(common_fields(cfg), use_sliding_window=False, sliding_window=None,
                           max_window_layers=cfg.n_layer),
    weights=recipes, eot_names=("<|endoftext|>", "<|im_end|>"), schema=SCHEMA, keys=KEYS,
    gguf=gguf_layout("qwen2"),
)

MISTRAL = Family(
    name="mistral", hf_class="MistralForCausalLM", model_type="mistral", shape=SHAPE, fits=no_biases,
    read=reader("none"), write=lambda cfg: dict(common_fields(cfg), sliding_window=None),
    weights=recipes, eot_names=("</s>", "<|endoftext|>"), schema=SCHEMA, keys=KEYS, window_by_default=True,
    gguf=LLAMA.gguf,  # llama.cpp runs Mistral as `llama`
)
