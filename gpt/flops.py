"""FLOP counts of a GPT training step and the peak FLOP/s of this machine, for MFU.

MFU = achieved FLOP/s / peak FLOP/s. The peak is measured here with a float32 matmul at
start-up (the best of a few runs), or given by the user; never a hard-coded GPU number.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np


def _get(cfg: Any, name: str, default=None):
    return cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)


def matmul_params(cfg: Any) -> int:
    """Parameters that take part in a matmul per token: the blocks' linear weights and the
    output layer (V x C), not the embedding lookups nor the norms."""
    C, L, V = _get(cfg, "n_embd"), _get(cfg, "n_layer"), _get(cfg, "vocab_size")
    mlp = _get(cfg, "mlp", "gelu")
    hidden = _get(cfg, "mlp_hidden") or 4 * C
    attn = 4 * C * C                                   # c_attn (C x 3C) + c_proj (C x C)
    if mlp == "swiglu":
        ff = 3 * C * hidden                            # gate+up (C x 2H) and down (H x C)
    elif mlp == "moe":
        ff = _get(cfg, "moe_top_k", 2) * 2 * C * hidden + C * _get(cfg, "n_experts", 4)
    else:
        ff = 2 * C * hidden
    return L * (attn + ff) + V * C


def flops_per_token(cfg: Any, T: int) -> float:
    """Training FLOPs per token (forward + backward = 3 x forward), as in the PaLM appendix and
    nanoGPT: 6 x matmul parameters + 12 x n_layer x n_embd x T for attention scores and values."""
    return 6.0 * matmul_params(cfg) + 12.0 * _get(cfg, "n_layer") * _get(cfg, "n_embd") * T


def measure_peak_flops(device: str = "cpu", n: int | None = None, repeats: int = 5) -> float:
    """Best float32 FLOP/s of an n x n matmul on `device` (about a second at most)."""
    from autograd import backend

    xp = backend.module_for_device(device)
    if n is None:
        n = 1024 if xp is np else 8192
    if xp is np:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
    else:
        a = xp.random.standard_normal((n, n), dtype=xp.float32)
        b = xp.random.standard_normal((n, n), dtype=xp.float32)
    out = xp.empty((n, n), dtype=xp.float32)
    xp.matmul(a, b, out=out)  # warm-up (thread pools, cuBLAS handles)
    best = float("inf")
    for _ in range(repeats):
        if xp is not np:
            xp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        xp.matmul(a, b, out=out)
        if xp is not np:
            xp.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best
