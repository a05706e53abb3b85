"""Phi3ForCausalLM (Phi-3-mini-4k): LLaMA's math, no biases, with q, k, v and gate, up fused.

    model.layers.{i}.self_attn.qkv_proj.weight  (n_head*hd + 2*n_kv*hd, C): q rows, k rows, v rows
                                                -> .attn.c_attn = qkv^T (our layout already)
    model.layers.{i}.mlp.gate_up_proj.weight    (2 * intermediate, C): gate rows, then up rows
                                                -> .mlp.c_fc = gate_up^T (nn.SwiGLU's layout)
    everything else as LLaMA (see llama.py).

config.json is LLaMA's less the bias fields; `rope_scaling` other than null/default (the 128k
models' longrope) and `partial_rotary_factor` != 1 are refused. Phi-3-mini-4k sets
`sliding_window` 2047 with max_position_embeddings 4096: a window shorter than the context is
refused unless the model is loaded with block_size <= the window, as Mistral's is. llama.cpp's
`phi3` rotates half-split pairs and reads `attn_qkv` and `ffn_up` (gate and up) fused as they are.
"""
from __future__ import annotations

from gpt.model.config import GPTConfig
from gpt.pretrained.families.family import Family
from gpt.pretrained.families.llama import KEYS, SCHEMA, SHAPE, no_biases, common_fields, gguf_layout, reader, recipes


def write(cfg: GPTConfig) -> dict:
    return dict(common_fields(cfg), original_max_position_embeddings=cfg.block_size, sliding_window=None,
                resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout)


PHI3 = Family(
    name="phi3", hf_class="Phi3ForCausalLM", model_type="phi3", shape=SHAPE, fits=no_biases,
    read=reader("none", eps=1e-5), write=write,  # Phi3Config's default rms_norm_eps
    weights=lambda cfg: recipes(cfg, qkv=("self_attn.qkv_proj",), gate_up=("mlp.gate_up_proj",)),
    eot_names=("<|endoftext|>", "<|end|>"), schema=SCHEMA, keys=KEYS, window_by_default=True,
    gguf=gguf_layout("phi3", fused=True, biases=False),
)
