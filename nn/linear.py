"""Linear: y = x @ W + b, with W stored as (in_features, out_features) like GPT-2's Conv1D."""
from __future__ import annotations

import math

import numpy as np

import autograd
from autograd.tensor import Tensor
from nn import init
from nn.arrays import linear as linear_step
from nn.module import Module, Parameter


class Linear(Module):
    """x (..., in_features) -> (..., out_features).

    weight (in_features, out_features) and bias (out_features,) start as U(-1/sqrt(in), 1/sqrt(in)),
    PyTorch's default; a model that wants GPT-2's N(0, 0.02) re-initialises them with nn.init.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise ValueError(f"Linear needs positive sizes, got in_features={in_features}, out_features={out_features}")
        self.in_features, self.out_features = int(in_features), int(out_features)
        bound = 1.0 / math.sqrt(in_features)
        self.weight = init.uniform_(Parameter(np.empty((in_features, out_features), np.float32)), -bound, bound)
        self.bias = (
            init.uniform_(Parameter(np.empty((out_features,), np.float32)), -bound, bound) if bias else None
        )

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(
                f"Linear({self.in_features} -> {self.out_features}): expected input (..., {self.in_features}), "
                f"got shape {tuple(x.shape)}"
            )
        # One op: the product is one 2-D GEMM over the rows, the bias is added into it in place.
        return autograd.linear(x, self.weight, self.bias)  # (..., out)

    def step(self, x):
        """The same product on a raw array (no graph; see nn/arrays.py)."""
        return linear_step(x, self.weight.data, None if self.bias is None else self.bias.data)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
