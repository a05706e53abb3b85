"""GGUF v3 export, so that llama.cpp runs a model trained here; written by our own code.

Layout of a file (all little-endian):
    "GGUF", version u32 = 3, tensor count u64, metadata count u64
    metadata     key (u64 length + UTF-8), value type u32, value (arrays: item type u32, count u64, items)
    tensor infos name, n_dims u32, dims u64 x n_dims (innermost first: numpy's shape reversed),
                 ggml type u32 (F32 = 0, F16 = 1), offset u64 from the data start
    padding to `general.alignment` (32), then each tensor's data, each start aligned to 32

Architectures (llama.cpp's names for tensors and metadata keys):
    gpt2   GPT-2-shaped models: token_embd, position_embd, blk.{i}.attn_norm, attn_qkv,
           attn_output, ffn_norm, ffn_up, ffn_down, output_norm (each with .bias), output
    llama  LLaMA-shaped, no biases: token_embd, blk.{i}.attn_norm, attn_q, attn_k, attn_v,
           attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down, output_norm, output. llama.cpp's
           llama rotates interleaved pairs (as Meta's original checkpoints), so the rows of q and
           k are permuted from our half-split layout per head, as convert_hf_to_gguf.py does.
    qwen2  Qwen2-shaped (q, k, v biases): llama's names plus attn_q/k/v.bias; its RoPE is the
           half-split one, so nothing is permuted.
Matrices are stored (out, in) as llama.cpp reads them; a tied head writes no `output` (llama.cpp
then uses token_embd). dtype "f16" stores matrices as F16 and keeps vectors F32.
"""
from __future__ import annotations

import os
import struct
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from gpt.model.config import GPTConfig
from gpt.pretrained import hf_config, hf_weights
from gpt.pretrained.hf_config import UnsupportedModel

ALIGNMENT = 32
GGML_TYPES = {"f32": (0, np.dtype("<f4")), "f16": (1, np.dtype("<f2"))}
FILE_TYPES = {"f32": 0, "f16": 1}  # general.file_type: ALL_F32, MOSTLY_F16
# metadata value types
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_UNUSED = 1, 3, 5


def gguf_arch(cfg: GPTConfig) -> str:
    """gpt2, llama or qwen2 (see the module docstring); UnsupportedModel for anything else."""
    arch = hf_config.export_architecture(cfg)
    if arch == "LlamaForCausalLM" and cfg.bias:
        raise UnsupportedModel("GGUF llama has no biases; this model has bias=True")
    return {"GPT2LMHeadModel": "gpt2", "LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}[arch]


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """(heads x head_dim, in) rows from the half-split RoPE layout to the interleaved one."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_LLAMA_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                "mlp.down_proj": "ffn_down"}
_GPT2_NAMES = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
               "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}


def gguf_tensors(cfg: GPTConfig, state: dict[str, Any], arch: str) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array in llama.cpp's (out, in) layout, in file order."""
    hf_arch = "GPT2LMHeadModel" if arch == "gpt2" else "LlamaForCausalLM" if arch == "llama" else "Qwen2ForCausalLM"
    hf = hf_weights.to_hf({k: np.asarray(v, np.float32) for k, v in state.items()}, cfg, hf_arch)
    out: dict[str, np.ndarray] = {}
    for name, arr in hf.items():
        if arch == "gpt2":
            base, _, leaf = name.removeprefix("transformer.").rpartition(".")
            if base.startswith("h."):
                i, _, sub = base[2:].partition(".")
                key = f"blk.{i}.{_GPT2_NAMES[sub]}.{leaf}"
                arr = arr.T if arr.ndim == 2 else arr  # Conv1D (in, out) -> (out, in)
            else:
                key = {"wte": "token_embd", "wpe": "position_embd", "ln_f": "output_norm", "lm_head": "output"}[base] + "." + leaf
        else:
            base, _, leaf = name.rpartition(".")
            if base.startswith("model.layers."):
                i, _, sub = base[len("model.layers."):].partition(".")
                key = f"blk.{i}.{_LLAMA_NAMES[sub]}.{leaf}"
                if arch == "llama" and sub == "self_attn.q_proj":
                    arr = _permute(arr, cfg.n_head)
                elif arch == "llama" and sub == "self_attn.k_proj":
                    arr = _permute(arr, cfg.kv_heads)
            else:
                key = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}[base] + "." + leaf
        out[key] = np.ascontiguousarray(arr)
    return out


def gguf_metadata(cfg: GPTConfig, arch: str, dtype: str, name: str) -> list[tuple[str, int, Any]]:
    """(key, value type, value) of the architecture's hyperparameters."""
    a = arch
    kv = [("general.architecture", STR, a), ("general.name", STR, name), ("general.file_type", U32, FILE_TYPES[dtype]),
          ("general.quantization_version", U32, 2), ("general.alignment", U32, ALIGNMENT),
          (f"{a}.context_length", U32, cfg.block_size), (f"{a}.embedding_length", U32, cfg.n_embd),
          (f"{a}.feed_forward_length", U32, cfg.hidden), (f"{a}.block_count", U32, cfg.n_layer),
          (f"{a}.attention.head_count", U32, cfg.n_head)]
    if arch == "gpt2":
        kv.append((f"{a}.attention.layer_norm_epsilon", F32, cfg.norm_eps))
    else:
        kv += [(f"{a}.attention.head_count_kv", U32, cfg.kv_heads), (f"{a}.rope.dimension_count", U32, cfg.head_dim),
               (f"{a}.rope.freq_base", F32, cfg.rope_base), (f"{a}.attention.layer_norm_rms_epsilon", F32, cfg.norm_eps),
               (f"{a}.vocab_size", U32, cfg.vocab_size)]
    return kv


def tokenizer_metadata(tokenizer, vocab_size: int) -> list[tuple[str, int, Any]]:
    """tokenizer.ggml.* of a byte-level BPE Tokenizer: tokens (GPT-2's printable byte strings),
    token types, merges (the Hugging Face export's list), end-of-text ids and pre-tokenizer name."""
    from bpe.hf import _to_str, huggingface_dict
    from bpe.patterns import GPT2_PATTERN, GPT4_PATTERN

    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    types = [TOKEN_UNUSED] * vocab_size
    for b, i in tokenizer.mergeable_ranks.items():
        tokens[i], types[i] = _to_str(b), TOKEN_NORMAL
    for s, i in tokenizer.special_tokens.items():
        tokens[i], types[i] = s, TOKEN_CONTROL
    pre = {GPT2_PATTERN: "gpt-2", GPT4_PATTERN: "llama-bpe"}.get(tokenizer.pattern)
    if pre is None:
        warnings.warn("the tokenizer's split pattern has no llama.cpp pre-tokenizer name; written as 'default', "
                      "which llama.cpp splits with its own regex", stacklevel=3)
    kv = [("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, pre or "default"),
          ("tokenizer.ggml.tokens", ARR, (STR, tokens)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
          ("tokenizer.ggml.merges", ARR, (STR, huggingface_dict(tokenizer)["model"]["merges"]))]
    for s in ("<|endoftext|>", "<|end_of_text|>"):
        if s in tokenizer.special_tokens:
            kv += [("tokenizer.ggml.bos_token_id", U32, tokenizer.special_tokens[s]),
                   ("tokenizer.ggml.eos_token_id", U32, tokenizer.special_tokens[s])]
            break
    return kv


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _value(vtype: int, value: Any) -> bytes:
    if vtype == STR:
        return _string(value)
    if vtype == ARR:
        item, items = value
        head = struct.pack("<IQ", item, len(items))
        if item == STR:
            return head + b"".join(_string(s) for s in items)
        return head + np.asarray(items, {I32: "<i4", U32: "<u4", F32: "<f4"}[item]).tobytes()
    return struct.pack({U32: "<I", I32: "<i", F32: "<f", BOOL: "<?"}[vtype], value)


def save(path: str | os.PathLike, cfg: GPTConfig, state: dict[str, Any], tokenizer=None, dtype: str = "f32") -> Path:
    """Write a GGUF v3 file of `cfg` + `state` (+ the tokenizer), atomically; returns its path."""
    from nn.atomic import atomic_write

    if dtype not in GGML_TYPES:
        raise ValueError(f"GGUF dtype must be one of {', '.join(GGML_TYPES)}, got {dtype!r}")
    arch = gguf_arch(cfg)
    tensors = gguf_tensors(cfg, state, arch)
    kv = gguf_metadata(cfg, arch, dtype, Path(path).stem)
    if tokenizer is not None and hasattr(tokenizer, "mergeable_ranks"):
        if tokenizer.vocab_size > cfg.vocab_size:
            raise ValueError(f"the tokenizer has {tokenizer.vocab_size} ids but the model only {cfg.vocab_size}")
        kv += tokenizer_metadata(tokenizer, cfg.vocab_size)
    elif tokenizer is not None:
        warnings.warn(f"a {type(tokenizer).__name__} has no GGUF form: the file holds no tokenizer", stacklevel=2)
    infos, blobs, offset = [], [], 0
    for name, arr in tensors.items():
        code, dt = GGML_TYPES[dtype] if arr.ndim == 2 else GGML_TYPES["f32"]
        data = arr.astype(dt).tobytes()
        infos.append(_string(name) + struct.pack("<I", arr.ndim) + struct.pack(f"<{arr.ndim}Q", *arr.shape[::-1])
                     + struct.pack("<IQ", code, offset))
        pad = -len(data) % ALIGNMENT
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    head += b"".join(_string(k) + struct.pack("<I", t) + _value(t, v) for k, t, v in kv) + b"".join(infos)
    head += b"\0" * (-len(head) % ALIGNMENT)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(head)
            for blob in blobs:
                f.write(blob)

    atomic_write(Path(path), write)
    return Path(path)
