"""Fused CUDA kernels for the GPU path, written against CuPy (RawModule kernels compiled by NVRTC).

Each op with a kernel names its hooks with the `kernel_op` class decorator, imported from the
kernel module of the same name: autograd/ops/norm.py declares
`@kernel_op(kernels.norm_forward, kernels.norm_backward)` after `from autograd.cuda import norm
as kernels`. nn.optim.AdamW and nn.amp call their modules directly, and so do the fused
sublayers' GPU forms (autograd/ops/mlp.py, swiglu.py, self_attention.py, prenorm.py). A kernel runs only when its
input is a CuPy array (`use(array)`); the kernel modules themselves need only NumPy (CuPy is
imported when a kernel is first compiled). Each kernel's reference is the NumPy/CuPy code of
the op itself: turning the kernels off (`set_fused(False)` or `with fused(False): ...`) runs
that code on the GPU, which is what tests/autograd/test_cuda_kernels.py compares against.

Modules, each beside the one it serves:
    activation  GELU (autograd/ops/activation.py)
    norm        layer_norm, rms_norm (autograd/ops/norm.py)
    softmax     softmax, log_softmax (autograd/ops/softmax.py)
    loss        cross-entropy (autograd/ops/loss.py)
    attention   a tiled FlashAttention-style forward and backward, and the matmul-softmax-matmul
                path with fused masking (autograd/ops/attention.py)
    adamw       the AdamW update (nn/optim/adamw.py)
    amp         loss-scale unscaling, bfloat16 <-> float32 (nn/amp.py, nn/bfloat16.py)
    precision   the TF32 switch;  transfer  pinned, asynchronous host-to-GPU copies
    _compile    per-dtype sources, compilation and its cache, launch helpers
Kernels compile lazily on first use, once per dtype, and are cached for the process.
Without a GPU they are still checked: tests/autograd/test_cuda_emulated.py runs them on the CPU.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Iterator

import numpy as np

_STATE = {"fused": True, "attention": "matmul"}
_KERNEL_OPS: list = []   # the Function classes declared with kernel_op, in declaration order
ATTENTION_MODES = ("flash", "matmul")


def use(array: Any) -> bool:
    """True when `array` lives on the GPU (a CuPy array) and the fused kernels are switched on."""
    if isinstance(array, np.ndarray) or not _STATE["fused"]:
        return False
    from autograd.backend import xp_of

    return xp_of(array) is not np


def kernel_op(forward: Callable, backward: Callable, **options: Any) -> Callable[[type], type]:
    """Class decorator giving a Function a fused GPU path: the hooks `forward` and `backward`,
    functions of a kernel module of this package (the op's module imports it by name).

    When `use(first input array)` holds, the op's forward calls
    `forward(node, *arrays, **op_options, **options)`, where op_options are the options of the
    call completed with the defaults of the op's own forward. The kernel hook saves what its
    backward needs on `node` and returns the output, or None for a call it does not handle (then
    the op's own forward runs). A node whose forward ran the kernel has `fused = True`, and its
    backward calls `backward(node, grad, **options)`. Otherwise the op's own forward and
    backward run: they are the kernels' reference (on NumPy, and on CuPy inside
    `with fused(False):`).
    """
    def decorate(cls: type) -> type:
        array_forward, array_backward = cls.forward, cls.backward
        defaults = {name: p.default for name, p in inspect.signature(array_forward).parameters.items()
                    if p.default is not inspect.Parameter.empty}

        @functools.wraps(array_forward)
        def forward_(self, x, *arrays, **op_options):
            if use(x):
                out = forward(self, x, *arrays, **{**defaults, **op_options}, **options)
                if out is not None:
                    self.fused = True
                    return out
            return array_forward(self, x, *arrays, **op_options)

        @functools.wraps(array_backward)
        def backward_(self, grad):
            if self.fused:
                return backward(self, grad, **options)
            return array_backward(self, grad)

        cls.forward, cls.backward, cls.fused = forward_, backward_, False
        _KERNEL_OPS.append(cls)
        return cls

    return decorate


def kernel_ops() -> tuple:
    """The Function classes with a fused GPU path (declared with `kernel_op`)."""
    import autograd.ops  # noqa: F401  (declares them all)

    return tuple(_KERNEL_OPS)


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
