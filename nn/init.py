"""Parameter initialisation, in place: normal_, uniform_, zeros_, ones_, GPT-2's residual scaling.

Random draws come from autograd's generators (`autograd.manual_seed` seeds them), on the
parameter's own device and in its dtype, so a model initialised twice after the same seed is
identical. Every function fills the existing array and returns the parameter.
"""
from __future__ import annotations

import contextlib
import math

import autograd
from autograd.grad_mode import no_grad
from autograd.tensor import Tensor


_skip_depth = 0  # > 0 inside `skip_init()`


@contextlib.contextmanager
def skip_init():
    """Inside, every fill function below leaves the parameter as allocated (uninitialised memory):
    for building a model whose every weight is loaded next (a 124M GPT builds in milliseconds
    instead of seconds of random draws)."""
    global _skip_depth
    _skip_depth += 1
    try:
        yield
    finally:
        _skip_depth -= 1


def _check(param: Tensor, fn: str) -> bool:
    """Check the argument; True when the fill is to be skipped (`skip_init`)."""
    if not isinstance(param, Tensor):
        raise TypeError(f"nn.init.{fn} expects a Parameter or Tensor, got {type(param).__name__}")
    return _skip_depth > 0


def normal_(param: Tensor, std: float = 0.02, mean: float = 0.0, generator=None) -> Tensor:
    """Fill `param` with draws from N(mean, std**2)."""
    if _check(param, "normal_"):
        return param
    if std < 0:
        raise ValueError(f"nn.init.normal_: std must be >= 0, got {std}")
    with no_grad():
        draw = autograd.randn(*param.shape, dtype=param.dtype, device=param.device, generator=generator).data
        draw *= std
        if mean:
            draw += mean
        param.data[...] = draw
    return param


def uniform_(param: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill `param` with draws from U(a, b)."""
    if _check(param, "uniform_"):
        return param
    if b < a:
        raise ValueError(f"nn.init.uniform_: need a <= b, got a={a}, b={b}")
    with no_grad():
        draw = autograd.rand(*param.shape, dtype=param.dtype, device=param.device, generator=generator).data
        draw *= b - a
        draw += a
        param.data[...] = draw
    return param


def zeros_(param: Tensor) -> Tensor:
    if _check(param, "zeros_"):
        return param
    param.data[...] = 0
    return param


def ones_(param: Tensor) -> Tensor:
    if _check(param, "ones_"):
        return param
    param.data[...] = 1
    return param


def constant_(param: Tensor, value: float) -> Tensor:
    if _check(param, "constant_"):
        return param
    param.data[...] = value
    return param


def gpt2_residual_std(n_layer: int, std: float = 0.02) -> float:
    """GPT-2's std for projections that write into the residual stream: 0.02 / sqrt(2 * n_layer).

    Each block adds two branches (attention and MLP) to the stream, so 2 * n_layer terms sum
    there; scaling keeps the stream's variance from growing with depth.
    """
    if n_layer < 1:
        raise ValueError(f"gpt2_residual_std: n_layer must be >= 1, got {n_layer}")
    return std / math.sqrt(2 * n_layer)
