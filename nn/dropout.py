"""Dropout: zero each element with probability p while training, scaling survivors by 1/(1-p)."""
from __future__ import annotations

import autograd
from autograd.tensor import Tensor
from nn.module import Module


class Dropout(Module):
    """Identity in eval mode or when p == 0; draws from autograd's generator (`manual_seed`)."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout probability must be in [0, 1), got {p}")
        self.p = float(p)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        return autograd.dropout(x, self.p, training=True)

    def extra_repr(self) -> str:
        return f"p={self.p}"
