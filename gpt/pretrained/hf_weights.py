"""Hugging Face weight names and layouts <-> our state_dict, both ways.

One table (`recipes`) says, for each of our parameters, which Hugging Face tensors make it and
how; reading applies it forwards, writing backwards, so the two directions cannot drift apart.

    GPT-2 (Conv1D weights are (in, out) like our Linear: copied as they are)
        [transformer.]wte / wpe / h.{i}.ln_1 / .attn.c_attn / .attn.c_proj / .ln_2 / .mlp.c_fc /
        .mlp.c_proj / ln_f  ->  transformer.<the same name>
        h.{i}.attn.bias, h.{i}.attn.masked_bias (causal-mask buffers): ignored
    LLaMA family (nn.Linear weights are (out, in): transposed)
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
output axis) and nn.SwiGLU's (gate half, then up half).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gpt.model.config import GPTConfig
from gpt.pretrained.hf_config import UnsupportedModel

# Hugging Face buffers that are not weights: causal masks, cached rotary frequencies.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")

# (hf names, kind): kind "same" copies, "T" transposes, "catT" concatenates the transposes
# along the output axis, "cat" concatenates (biases), "rows" takes the first block_size rows.
Recipe = tuple[tuple[str, ...], str]


def recipes(cfg: GPTConfig, arch: str) -> dict[str, Recipe]:
    """Our parameter name -> how to make it from Hugging Face tensors (see the module docstring)."""
    out: dict[str, Recipe] = {}
    if arch == "GPT2LMHeadModel":
        names = ["wte.weight", "ln_f.weight", "ln_f.bias"]
        for i in range(cfg.n_layer):
            names += [f"h.{i}.{m}.{p}" for m in ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc",
                                                 "mlp.c_proj") for p in ("weight", "bias")]
        out = {f"transformer.{n}": ((f"transformer.{n}",), "same") for n in names}
        out["transformer.wpe.weight"] = (("transformer.wpe.weight",), "rows")
    else:
        out["transformer.wte.weight"] = (("model.embed_tokens.weight",), "same")
        out["transformer.ln_f.weight"] = (("model.norm.weight",), "same")
        for i in range(cfg.n_layer):
            hf, us = f"model.layers.{i}.", f"transformer.h.{i}."
            out[us + "ln_1.weight"] = ((hf + "input_layernorm.weight",), "same")
            out[us + "ln_2.weight"] = ((hf + "post_attention_layernorm.weight",), "same")
            qkv = tuple(f"{hf}self_attn.{p}_proj" for p in "qkv")
            fc = (hf + "mlp.gate_proj", hf + "mlp.up_proj")
            parts = [("attn.c_attn", qkv, "catT", "cat", cfg.has_qkv_bias),
                     ("attn.c_proj", (hf + "self_attn.o_proj",), "T", "same", cfg.bias),
                     ("mlp.c_fc", fc, "catT", "cat", cfg.bias),
                     ("mlp.c_proj", (hf + "mlp.down_proj",), "T", "same", cfg.bias)]
            for ours, theirs, wkind, bkind, has_bias in parts:
                out[us + ours + ".weight"] = (tuple(t + ".weight" for t in theirs), wkind)
                if has_bias:
                    out[us + ours + ".bias"] = (tuple(t + ".bias" for t in theirs), bkind)
    if not cfg.tie_weights:
        out["lm_head.weight"] = (("lm_head.weight",), "T")
    return out


def _canonical_gpt2_names(tensors: dict[str, Any]) -> dict[str, Any]:
    """GPT2Model files name tensors without the `transformer.` prefix; GPT2LMHeadModel with it."""
    return {(n if n.startswith("transformer.") or n == "lm_head.weight" else "transformer." + n): v
            for n, v in tensors.items()}


def from_hf(tensors: dict[str, Any], cfg: GPTConfig, arch: str, where: str) -> dict[str, np.ndarray]:
    """Our state_dict from a folder's tensors (name -> float array); every tensor is used or
    known to be ignorable, else UnsupportedModel lists the missing and the unknown ones."""
    if arch == "GPT2LMHeadModel":
        tensors = _canonical_gpt2_names(tensors)
    table = recipes(cfg, arch)
    used = {n for names, _ in table.values() for n in names}
    ignorable = set()
    if cfg.tie_weights:
        ignorable.add("lm_head.weight")  # a tied head saved anyway: transformers ties it to wte
    missing = sorted(n for n in used if n not in tensors)
    unknown = sorted(n for n in tensors if n not in used and n not in ignorable and not n.endswith(IGNORED_SUFFIXES))
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensor(s): {', '.join(missing[:6])}" + (" ..." if len(missing) > 6 else ""))
        if unknown:
            parts.append(f"{len(unknown)} tensor(s) this architecture does not have (not implemented): "
                         f"{', '.join(unknown[:6])}" + (" ..." if len(unknown) > 6 else ""))
        raise UnsupportedModel(f"{where}: the weights do not match {arch} with this config.json: " + "; ".join(parts))
    state = {}
    for ours, (names, kind) in table.items():
        arrays = [tensors[n] for n in names]
        if kind == "same":
            state[ours] = arrays[0]
        elif kind == "rows":
            state[ours] = arrays[0][:cfg.block_size]
        elif kind == "T":
            state[ours] = np.ascontiguousarray(arrays[0].T)
        elif kind == "catT":
            state[ours] = np.concatenate([a.T for a in arrays], axis=1)   # (in, sum of outs)
        else:
            state[ours] = np.concatenate(arrays, axis=0)
    return state


def _split_sizes(cfg: GPTConfig, ours: str) -> list[int]:
    if ours.endswith(("c_attn.weight", "c_attn.bias")):
        kv = cfg.kv_heads * cfg.head_dim
        return [cfg.n_embd, kv, kv]
    return [cfg.hidden, cfg.hidden]  # SwiGLU's gate and up


def to_hf(state: dict[str, np.ndarray], cfg: GPTConfig, arch: str) -> dict[str, np.ndarray]:
    """Hugging Face's tensors (name -> host array) from our state_dict: `from_hf` inverted."""
    out: dict[str, np.ndarray] = {}
    for ours, (names, kind) in recipes(cfg, arch).items():
        arr = np.asarray(state[ours])
        if kind in ("same", "rows"):
            out[names[0]] = arr
        elif kind == "T":
            out[names[0]] = np.ascontiguousarray(arr.T)
        else:
            axis = 1 if kind == "catT" else 0
            pieces = np.split(arr, np.cumsum(_split_sizes(cfg, ours))[:-1], axis=axis)
            for name, piece in zip(names, pieces):
                out[name] = np.ascontiguousarray(piece.T if kind == "catT" else piece)
    return out
