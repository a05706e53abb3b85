"""Normalisation layers over the last axis: LayerNorm (gain and bias) and RMSNorm (gain)."""
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


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis; x (..., dim) -> (..., dim)."""

    def __init__(self, dim: int, eps: float = LAYER_NORM_EPS, bias: bool = True):
        super().__init__()
        self.dim, self.eps = int(dim), float(eps)
        self.weight = Parameter(np.ones((dim,), np.float32))
        self.bias = Parameter(np.zeros((dim,), np.float32)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        _check_last_axis(x, self.dim, "LayerNorm")
        return autograd.layer_norm(x, self.weight, self.bias, eps=self.eps)

    def step(self, x):
        """forward on a raw array (no graph; see nn/arrays.py)."""
        return arrays.layer_norm(x, self.weight.data, None if self.bias is None else self.bias.data, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps:g}, bias={self.bias is not None}"


class RMSNorm(Module):
    """x / sqrt(mean(x**2) + eps) * weight over the last axis; x (..., dim) -> (..., dim)."""

    def __init__(self, dim: int, eps: float = RMS_NORM_EPS):
        super().__init__()
        self.dim, self.eps = int(dim), float(eps)
        self.weight = Parameter(np.ones((dim,), np.float32))

    def forward(self, x: Tensor) -> Tensor:
        _check_last_axis(x, self.dim, "RMSNorm")
        return autograd.rms_norm(x, self.weight, eps=self.eps)

    def step(self, x):
        """forward on a raw array (no graph; see nn/arrays.py)."""
        return arrays.rms_norm(x, self.weight.data, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps:g}"
