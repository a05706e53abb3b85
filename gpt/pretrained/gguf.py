"""GGUF v3 export, so that llama.cpp runs a model trained here; written by our own code.

Layout of a file (all little-endian):
    "GGUF", version u32 = 3, tensor count u64, metadata count u64
    metadata     key (u64 length + UTF-8), value type u32, value (arrays: item type u32, count u64, items)
    tensor infos name, n_dims u32, dims u64 x n_dims (innermost first: numpy's shape reversed),
                 ggml type u32 (F32 = 0, F16 = 1), offset u64 from the data start
    padding to `general.alignment` (32), then each tensor's data, each start aligned to 32

The architecture and tensor names are the family's (`Family.gguf`, gpt.pretrained.families): the
Hugging Face tensors of `hf_weights.to_hf`, renamed, with GPT-2's Conv1D matrices transposed and
LLaMA's q and k rows interleaved for llama.cpp's RoPE. Matrices are stored (out, in) as llama.cpp
reads them; a tied head writes no `output` (llama.cpp then uses token_embd). dtype "f16" stores
matrices as F16 (a value beyond F16's 65504 is refused, naming its tensor) and keeps vectors F32.
The tokenizer metadata is gpt.pretrained.gguf_vocab's.
"""
from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np

from gpt.model.config import GPTConfig
from gpt.pretrained import hf_weights
from gpt.pretrained.families import Family, UnsupportedModel, export_family
from gpt.pretrained.gguf_vocab import ARR, BOOL, F32, I32, STR, U32, tokenizer_metadata
from gpt.pretrained.output import locked_file

ALIGNMENT = 32
GGML_TYPES = {"f32": (0, np.dtype("<f4")), "f16": (1, np.dtype("<f2"))}
FILE_TYPES = {"f32": 0, "f16": 1}  # general.file_type: ALL_F32, MOSTLY_F16


def gguf_family(cfg: GPTConfig, family: str | None = None) -> Family:
    """The family (the first that computes `cfg`, or the one named) whose GGUF layout is written;
    UnsupportedModel when it has none or refuses the config's biases."""
    f = export_family(cfg, family)
    if f.gguf is None:
        raise UnsupportedModel(f"{f.hf_class} has no GGUF layout here")
    if not f.gguf.biases and (cfg.bias or cfg.has_qkv_bias):
        raise UnsupportedModel(f"GGUF {f.gguf.arch} has no biases; this model has bias=True")
    return f


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """(heads x head_dim, in) rows from the half-split RoPE layout to the interleaved one."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(cfg: GPTConfig, state: dict[str, Any], family: Family) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array in llama.cpp's (out, in) layout, in file order."""
    layout = family.gguf
    hf = hf_weights.to_hf({k: np.asarray(v, np.float32) for k, v in state.items()}, cfg, family)
    q_rows, k_rows = layout.rope_rows or (None, None)
    out: dict[str, np.ndarray] = {}
    for name, arr in hf.items():
        base, _, leaf = name.rpartition(".")
        if base.startswith(layout.layer_prefix):
            i, _, sub = base[len(layout.layer_prefix):].partition(".")
            key = f"blk.{i}.{layout.blocks[sub]}.{leaf}"
            if layout.conv1d_blocks and arr.ndim == 2:
                arr = arr.T  # (in, out) -> (out, in)
            if sub in (q_rows, k_rows):
                arr = _permute(arr, cfg.n_head if sub == q_rows else cfg.kv_heads)
        else:
            key = f"{layout.globals[base]}.{leaf}"
        out[key] = np.ascontiguousarray(arr)
    return out


def gguf_metadata(cfg: GPTConfig, arch: str, dtype: str, name: str) -> list[tuple[str, int, Any]]:
    """(key, value type, value) of the architecture's hyperparameters."""
    a = arch
    kv = [("general.architecture", STR, a), ("general.name", STR, name), ("general.file_type", U32, FILE_TYPES[dtype]),
          ("general.quantization_version", U32, 2), ("general.alignment", U32, ALIGNMENT),
          (f"{a}.vocab_size", U32, cfg.vocab_size),
          (f"{a}.context_length", U32, cfg.block_size), (f"{a}.embedding_length", U32, cfg.n_embd),
          (f"{a}.feed_forward_length", U32, cfg.hidden), (f"{a}.block_count", U32, cfg.n_layer),
          (f"{a}.attention.head_count", U32, cfg.n_head), (f"{a}.attention.head_count_kv", U32, cfg.kv_heads)]
    if cfg.norm == "layernorm":
        kv.append((f"{a}.attention.layer_norm_epsilon", F32, cfg.norm_eps))
    else:
        kv.append((f"{a}.attention.layer_norm_rms_epsilon", F32, cfg.norm_eps))
    if cfg.pos == "rope":
        kv += [(f"{a}.rope.dimension_count", U32, cfg.head_dim), (f"{a}.rope.freq_base", F32, cfg.rope_base)]
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


def _stored_type(arr: np.ndarray, dtype: str) -> tuple[int, np.dtype]:
    """(ggml type, numpy dtype) a tensor is written as: matrices in `dtype`, vectors in F32."""
    return GGML_TYPES[dtype] if arr.ndim == 2 else GGML_TYPES["f32"]


def _check_range(tensors: dict[str, np.ndarray], dtype: str) -> None:
    """ValueError naming the first tensor stored as F16 with a value beyond F16's largest, 65504
    (NumPy would write inf, with a RuntimeWarning at most)."""
    limit = float(np.finfo(np.float16).max)
    for name, arr in tensors.items():
        if _stored_type(arr, dtype)[1] == np.float16 and arr.size:
            top = float(np.nanmax(np.abs(arr)))
            if top > limit:
                raise ValueError(f"GGUF dtype f16: tensor {name} holds a value of magnitude {top:.6g}, beyond "
                                 f"float16's largest {limit:g}, which would be written as inf; export as f32")


def _layout(tensors: dict[str, np.ndarray], kv: list, dtype: str) -> tuple[bytes, list[bytes]]:
    """The file's header (metadata and tensor infos, padded) and each tensor's padded data."""
    infos, blobs, offset = [], [], 0
    for name, arr in tensors.items():
        code, dt = _stored_type(arr, dtype)
        data = arr.astype(dt).tobytes()
        infos.append(_string(name) + struct.pack("<I", arr.ndim) + struct.pack(f"<{arr.ndim}Q", *arr.shape[::-1])
                     + struct.pack("<IQ", code, offset))
        pad = -len(data) % ALIGNMENT
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    head += b"".join(_string(k) + struct.pack("<I", t) + _value(t, v) for k, t, v in kv) + b"".join(infos)
    return head + b"\0" * (-len(head) % ALIGNMENT), blobs


# llama.cpp looks these up by text in any vocabulary whose general.name says Phi-3, and refuses
# the file when one is missing
_PHI3_NAME = re.compile(r"phi-?3", re.IGNORECASE)
_PHI3_TOKENS = ("</s>", "<unk>", "<s>", "<|endoftext|>")


def model_name(stem: str, vocab: list[tuple[str, int, Any]]) -> str:
    """general.name: the file's stem, less a "phi3" that would make llama.cpp ask for tokens the
    vocabulary (tokenizer.ggml.* of `vocab`) does not have."""
    tokens = next((v[1] for k, _, v in vocab if k == "tokenizer.ggml.tokens"), None)
    if tokens is None or not _PHI3_NAME.search(stem) or set(_PHI3_TOKENS) <= set(tokens):
        return stem
    return _PHI3_NAME.sub("model", stem)


def save(path: str | os.PathLike, cfg: GPTConfig, state: dict[str, Any], tokenizer=None, dtype: str = "f32",
         family: str | None = None) -> Path:
    """Write a GGUF v3 file of `cfg` + `state` (+ the tokenizer), atomically and under a lock
    beside it (gpt.pretrained.output.locked_file: an existing file that is not GGUF is refused);
    returns its path.
    family: the family's layout to write (default: the first that computes the same)."""
    from bpe.files.atomic import atomic_write

    if dtype not in GGML_TYPES:
        raise ValueError(f"GGUF dtype must be one of {', '.join(GGML_TYPES)}, got {dtype!r}")
    f = gguf_family(cfg, family)
    vocab = tokenizer_metadata(tokenizer, cfg.vocab_size, f.eot_id(tokenizer), f.eot_names)
    kv = gguf_metadata(cfg, f.gguf.arch, dtype, model_name(Path(path).stem, vocab)) + vocab
    tensors = gguf_tensors(cfg, state, f)
    _check_range(tensors, dtype)
    head, blobs = _layout(tensors, kv, dtype)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as out:
            out.write(head)
            for blob in blobs:
                out.write(blob)

    with locked_file(path, b"GGUF") as target:
        atomic_write(target, write)
    return target
