"""Weights between PyTorch's nn.Transformer layout and ours: the same weights, the same outputs.

PyTorch's Linear stores weight (out, in) and computes x @ W.T + b; ours stores (in, out) and
computes x @ W + b, so every matrix is transposed. PyTorch's MultiheadAttention fuses q, k, v into
in_proj_weight (3C, C) (rows: q, then k, then v; head h owns rows h*hs .. (h+1)*hs of each part),
which our layers keep as follows (C = d_model, F = dim_feedforward):

    PyTorch name (prefix = encoder.layers.{i}. / decoder.layers.{i}.)   ours
    self_attn.in_proj_weight (3C, C), in_proj_bias (3C,)    self_attn.c_attn.weight = W.T (C, 3C), .bias
    self_attn.out_proj.weight (C, C), .bias                 self_attn.c_proj.weight = W.T, .bias
    multihead_attn.in_proj_weight (3C, C), in_proj_bias     multihead_attn.c_q.weight = W[:C].T (C, C),
                                                            multihead_attn.c_kv.weight = W[C:].T (C, 2C),
                                                            biases b[:C] and b[C:]
    multihead_attn.out_proj.weight, .bias                   multihead_attn.c_proj.weight = W.T, .bias
    linear1.weight (F, C), linear2.weight (C, F), biases    linear1.weight = W.T (C, F), linear2 (F, C)
    norm1/2/3.weight, .bias; encoder.norm, decoder.norm     the same names, the same arrays

`from_torch_state_dict` and `to_torch_state_dict` apply this table to plain arrays (numpy, or
anything np.asarray reads, such as torch tensors' .numpy()); no torch is imported here.
"""
from __future__ import annotations

from typing import Any

import numpy as np

_TRANSPOSED = ("self_attn.out_proj.weight", "multihead_attn.out_proj.weight", "linear1.weight", "linear2.weight")
_RENAMED = {
    "self_attn.in_proj_weight": "self_attn.c_attn.weight",
    "self_attn.in_proj_bias": "self_attn.c_attn.bias",
    "self_attn.out_proj.weight": "self_attn.c_proj.weight",
    "self_attn.out_proj.bias": "self_attn.c_proj.bias",
    "multihead_attn.out_proj.weight": "multihead_attn.c_proj.weight",
    "multihead_attn.out_proj.bias": "multihead_attn.c_proj.bias",
}


def _split(name: str) -> tuple[str, str]:
    """'decoder.layers.0.self_attn.in_proj_weight' -> ('decoder.layers.0.', 'self_attn.in_proj_weight')."""
    for suffix in (*_RENAMED, "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias", *_TRANSPOSED):
        if name.endswith(suffix):
            return name[: len(name) - len(suffix)], suffix
    return name, ""


def from_torch_state_dict(sd: dict[str, Any]) -> dict[str, np.ndarray]:
    """PyTorch nn.Transformer / encoder / decoder / layer state dict (arrays) -> ours, for load_state_dict."""
    out: dict[str, np.ndarray] = {}
    for name, value in sd.items():
        arr = np.asarray(value)
        prefix, suffix = _split(name)
        if suffix == "multihead_attn.in_proj_weight":
            C = arr.shape[1]
            if arr.shape != (3 * C, C):
                raise ValueError(f"{name}: expected (3 * d_model, d_model), got {arr.shape}")
            out[prefix + "multihead_attn.c_q.weight"] = arr[:C].T.copy()
            out[prefix + "multihead_attn.c_kv.weight"] = arr[C:].T.copy()
        elif suffix == "multihead_attn.in_proj_bias":
            C = arr.shape[0] // 3
            out[prefix + "multihead_attn.c_q.bias"] = arr[:C].copy()
            out[prefix + "multihead_attn.c_kv.bias"] = arr[C:].copy()
        else:
            new = prefix + _RENAMED.get(suffix, suffix)
            out[new] = arr.T.copy() if (suffix in _TRANSPOSED or suffix == "self_attn.in_proj_weight") else arr.copy()
    return out


def to_torch_state_dict(sd: dict[str, Any]) -> dict[str, np.ndarray]:
    """Ours (model.state_dict()) -> PyTorch's names and layout (numpy arrays)."""
    back = {v: k for k, v in _RENAMED.items()}
    out: dict[str, np.ndarray] = {}
    pending: dict[tuple[str, str], dict] = {}   # (layer prefix, "weight" | "bias") -> {"c_q": .., "c_kv": ..}
    for name, value in sd.items():
        arr = np.asarray(value.get() if hasattr(value, "get") else value)
        part = next((p for p in ("c_q", "c_kv") if f"multihead_attn.{p}." in name), None)
        if part is not None:
            prefix, leaf = name.split(f"multihead_attn.{part}.")
            pending.setdefault((prefix, leaf), {})[part] = arr
            continue
        prefix, suffix = _split_ours(name, back)
        torch_suffix = back.get(suffix, suffix)
        transpose = torch_suffix in _TRANSPOSED or torch_suffix == "self_attn.in_proj_weight"
        out[prefix + torch_suffix] = arr.T.copy() if transpose else arr.copy()
    for (prefix, leaf), parts in pending.items():
        if leaf == "weight":   # (C, C) and (C, 2C) -> in_proj_weight (3C, C)
            out[prefix + "multihead_attn.in_proj_weight"] = np.concatenate([parts["c_q"], parts["c_kv"]], axis=1).T.copy()
        else:
            out[prefix + "multihead_attn.in_proj_bias"] = np.concatenate([parts["c_q"], parts["c_kv"]])
    return out


def _split_ours(name: str, back: dict) -> tuple[str, str]:
    for suffix in (*back, "linear1.weight", "linear2.weight"):
        if name.endswith(suffix):
            return name[: len(name) - len(suffix)], suffix
    return name, ""
