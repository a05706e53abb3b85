"""Linear: y = x @ W + b, with W stored as (in_features, out_features) like GPT-2's Conv1D."""
from __future__ import annotations

import contextlib
import math
from typing import Iterator

import numpy as np

import autograd
from autograd.ops._util import host_floats
from autograd.ops.matmul import linear_array
from autograd.tensor import Tensor
from nn import init
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
        return linear_array(x, self.weight.data, None if self.bias is None else self.bias.data)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def step_layouts(module: Module) -> list:
    """[(weight, copy)] for every Linear in `module` that is taller than wide (in_features >
    out_features: an MLP's down-projection) with a NumPy float32/float64 weight: the same numbers
    column-major and read-only, to put in place with `laid_out` around decode steps.

    A decode step's product x (B, in) @ W (in, out) with few rows streams W from memory once, and
    BLAS streams a row-major W as `in` rows of `out` numbers: a tall W's many short rows stream
    slower than its column-major copy's few long ones; a wide weight is fastest as it is. It pays
    at batch 1 (benchmarks/bench_decode.py); at batch 8 the products are matrix products and the
    layout is about even. The copies are the weights as they are when made: like a KV cache's keys and
    values, they hold for one decoding session."""
    pairs, seen = [], set()   # a weight shared by two layers is copied once
    for m in module.modules():
        if isinstance(m, Linear) and m.in_features > m.out_features and id(m.weight) not in seen:
            w = m.weight.data
            if host_floats(w):
                copy = np.asfortranarray(w)
                copy.flags.writeable = False   # a step only reads its weights
                pairs.append((m.weight, copy))
                seen.add(id(m.weight))
    return pairs


@contextlib.contextmanager
def laid_out(layouts: list) -> Iterator[None]:
    """Each weight of `layouts` (from `step_layouts`) holds its copy for the duration, and its
    own array again afterwards, also on an error."""
    saved = [(p, p.data) for p, _ in layouts]
    try:
        for p, copy in layouts:
            p.data = copy
        yield
    finally:
        for p, data in saved:
            p.data = data
