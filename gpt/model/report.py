"""What a model costs: a parameter breakdown table, KV-cache bytes per token, FLOPs per token.

Everything here works from a `GPTConfig` alone, so the report of a 7B shape needs no 7B
allocation; `GPT.report()` adds the count of the parameters actually built.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gpt.model.config import GPTConfig


def flops_per_token(cfg: GPTConfig, seq_len: int | None = None) -> int:
    """Training FLOPs per token (forward + backward) as in the PaLM appendix / nanoGPT's MFU:
    6 x (non-embedding matmul parameters + lm_head) + 12 x n_layer x n_embd x T for attention.

    For "moe" only the `moe_top_k` experts a token visits count.
    """
    T = cfg.block_size if seq_len is None else seq_len
    C, L, V = cfg.n_embd, cfg.n_layer, cfg.vocab_size
    per_block = cfg.attn_params() + cfg.mlp_params()
    if cfg.mlp == "moe":
        per_expert = (cfg.mlp_params() - C * cfg.n_experts) // cfg.n_experts
        per_block = cfg.attn_params() + cfg.moe_top_k * per_expert + C * cfg.n_experts
    matmul_params = L * per_block + V * C  # the lm_head matmul runs whether tied or not
    return 6 * matmul_params + 12 * L * C * T


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1024
    return f"{n:,.2f} TiB"


def report(cfg: GPTConfig, dtype: Any = "float32", built_params: int | None = None) -> str:
    """A table a person can read: parameters by group, totals, KV cache and FLOPs per token."""
    parts = cfg.breakdown()
    total = sum(parts.values())
    itemsize = np.dtype(dtype).itemsize
    variant = (
        f"pos={cfg.pos} norm={cfg.norm} mlp={cfg.mlp} prenorm={cfg.prenorm} "
        f"residual={cfg.residual} bias={cfg.bias} tied={cfg.tie_weights}"
    )
    lines = [
        f"GPT: n_layer={cfg.n_layer} n_head={cfg.n_head} n_kv_head={cfg.kv_heads} n_embd={cfg.n_embd} "
        f"block_size={cfg.block_size} vocab_size={cfg.vocab_size} hidden={cfg.hidden}",
        f"     {variant}",
        f"{'group':<12}{'parameters':>18}{'share':>9}",
    ]
    notes = {"output": " (tied to wte)" if cfg.tie_weights else "",
             "embeddings": "" if cfg.pos == "learned" else f" (no table: pos={cfg.pos})"}
    for name, n in parts.items():
        share = 100.0 * n / total if total else 0.0
        lines.append(f"{name:<12}{n:>18,}{share:>8.2f}%{notes.get(name, '')}")
    lines.append(f"{'total':<12}{total:>18,}{100.0:>8.2f}%")
    if built_params is not None and built_params != total:
        lines.append(f"WARNING: the built model has {built_params:,} parameters, the formula {total:,}")
    kv = cfg.kv_cache_bytes_per_token(dtype)
    lines += [
        f"weights in {np.dtype(dtype).name}: {format_bytes(total * itemsize)}",
        f"KV cache per token: 2 x n_layer x {cfg.kv_heads} kv heads x head_dim = "
        f"{cfg.kv_cache_numbers_per_token():,} numbers"
        f" = {format_bytes(kv)} in {np.dtype(dtype).name}; full block of {cfg.block_size}: "
        f"{format_bytes(kv * cfg.block_size)} per sequence",
        f"training FLOPs per token at T={cfg.block_size}: {flops_per_token(cfg):,}",
    ]
    return "\n".join(lines)
