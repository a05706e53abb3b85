"""Normalisation layers over the last axis: LayerNorm (gain and bias) and RMSNorm (gain).

`hook`: None, or a function (name, Tensor) -> Tensor through which forward passes the points of
HOOKS, spelling the norm out in steps (gpt/inspect/hooks.py lists them with their shapes).
"""
from __future__ import annotations

import numpy as np

import autograd
from autograd.ops.norm import LAYER_NORM_EPS, RMS_NORM_EPS
from autograd.tensor import Tensor
from nn import arrays
from nn.module import Module, Parameter


def _check_last_axis(x: Tensor, dim: int, name: str) -> None:
    if x.shape[-1:] != (dim,):
        raise ValueError(f"{name}({dim}): expected input (..., {dim}), got shape {tuple(x.shape)}")


def _hooked_norm(norm, x: Tensor, centered: bool) -> Tensor:
    """The norm in steps through norm.hook: x (..., dim) -> (..., dim)."""
    if centered:
        x = x - x.mean(axis=-1, keepdims=True)
    scale = norm.hook("hook_scale", ((x * x).mean(axis=-1, keepdims=True) + norm.eps) ** -0.5)  # (..., 1)
    y = norm.hook("hook_normalized", x * scale) * norm.weight
    return y if getattr(norm, "bias", None) is None else y + norm.bias


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis; x (..., dim) -> (..., dim)."""

    HOOKS = ("hook_scale", "hook_normalized")
    hook = None

    def __init__(self, dim: int, eps: float = LAYER_NORM_EPS, bias: bool = True):
        super().__init__()
        self.dim, self.eps = int(dim), float(eps)
        self.weight = Parameter(np.ones((dim,), np.float32))
        self.bias = Parameter(np.zeros((dim,), np.float32)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        _check_last_axis(x, self.dim, "LayerNorm")
        if self.hook is not None:
            return _hooked_norm(self, x, centered=True)
        return autograd.layer_norm(x, self.weight, self.bias, eps=self.eps)

    def step(self, x):
        """forward on a raw array (no graph; see nn/arrays.py)."""
        return arrays.layer_norm(x, self.weight.data, None if self.bias is None else self.bias.data, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps:g}, bias={self.bias is not None}"


class RMSNorm(Module):
    """x / sqrt(mean(x**2) + eps) * weight over the last axis; x (..., dim) -> (..., dim)."""

    HOOKS = LayerNorm.HOOKS
    hook = None

    def __init__(self, dim: int, eps: float = RMS_NORM_EPS):
        super().__init__()
        self.dim, self.eps = int(dim), float(eps)
        self.weight = Parameter(np.ones((dim,), np.float32))

    def forward(self, x: Tensor) -> Tensor:
        _check_last_axis(x, self.dim, "RMSNorm")
        if self.hook is not None:
            return _hooked_norm(self, x, centered=False)
        return autograd.rms_norm(x, self.weight, eps=self.eps)

    def step(self, x):
        """forward on a raw array (no graph; see nn/arrays.py)."""
        return arrays.rms_norm(x, self.weight.data, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps:g}"
