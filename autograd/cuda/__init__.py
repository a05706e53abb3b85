"""Fused CUDA kernels for the GPU path, written against CuPy (RawModule kernels compiled by NVRTC).

The ops in autograd/ops (softmax, log_softmax, cross_entropy, layer_norm, rms_norm, gelu,
scaled_dot_product_attention) and nn.optim.AdamW call into this package only when their input
is a CuPy array (`use(array)`); on NumPy arrays nothing here runs and nothing is imported, so
the CPU path is unchanged. Each kernel's reference is the NumPy/CuPy code of the op itself:
turning the kernels off (`set_fused(False)` or `with fused(False): ...`) runs that code on the
GPU, which is what tests/autograd/test_cuda_kernels.py compares against.

Modules: softmax (softmax, log_softmax, cross-entropy), norm (layer_norm, rms_norm),
elementwise (GELU, the AdamW update, loss-scale unscaling for nn.amp), attention (a tiled
FlashAttention-style forward and backward, and the matmul-softmax-matmul path with fused
masking), precision (TF32 switch), transfer (pinned, asynchronous host-to-GPU copies).
Kernels compile lazily on first use, once per dtype, and are cached for the process.
Without a GPU they are still checked: tests/autograd/test_cuda_emulated.py runs them on the CPU.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

_STATE = {"fused": True, "attention": "matmul"}
ATTENTION_MODES = ("flash", "matmul")


def use(array: Any) -> bool:
    """True when `array` lives on the GPU (a CuPy array) and the fused kernels are switched on."""
    if isinstance(array, np.ndarray) or not _STATE["fused"]:
        return False
    from autograd.backend import xp_of

    return xp_of(array) is not np


def set_fused(enabled: bool) -> None:
    """Switch the fused kernels on or off for the whole process (on by default)."""
    _STATE["fused"] = bool(enabled)


def fused_enabled() -> bool:
    return _STATE["fused"]


@contextlib.contextmanager
def fused(enabled: bool) -> Iterator[None]:
    """`with fused(False):` runs the ops' plain array code on the GPU (the kernels' reference)."""
    old = _STATE["fused"]
    _STATE["fused"] = bool(enabled)
    try:
        yield
    finally:
        _STATE["fused"] = old


def set_attention(mode: str) -> None:
    """Which fused attention the GPU uses: "flash" (tiled, no (T, T) matrix stored) or "matmul"
    (cuBLAS matmuls around a fused masked softmax; stores the (B, H, T, T) probabilities)."""
    if mode not in ATTENTION_MODES:
        raise ValueError(f"attention mode must be one of {ATTENTION_MODES}, got {mode!r}")
    _STATE["attention"] = mode


def attention_mode() -> str:
    return _STATE["attention"]


def set_tf32(enabled: bool) -> bool:
    """Let float32 matmuls use TF32 tensor cores (see autograd.cuda.precision); returns whether
    CuPy accepted the setting."""
    from autograd.cuda.precision import set_tf32 as _set

    return _set(enabled)
