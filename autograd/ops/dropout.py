"""Dropout: zero each element with probability p and scale the rest by 1 / (1 - p)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autograd import random as _random
from autograd.function import Function

if TYPE_CHECKING:
    from autograd.tensor import Tensor


class Dropout(Function):
    def forward(self, x, p, generator):
        noise = _random.uniform(x.shape, dtype=x.dtype, device=_device(x), generator=generator)
        keep = noise >= p                       # bool: a quarter of a float32 mask's memory
        del noise
        self.keep, self.scale = keep, 1.0 / (1.0 - p)
        out = x * keep
        out *= self.scale                       # in place on our own temporary; stays x's dtype
        return out

    def backward(self, g):
        grad = g * self.keep
        grad *= self.scale
        return (grad,)


def _device(x):
    from autograd.backend import device_of

    return device_of(x)


def dropout(x: Tensor, p: float = 0.5, training: bool = True, generator: Any = None) -> Tensor:
    """Zero elements with probability p, scale survivors by 1 / (1 - p) (inverted dropout).

    Identity when not training or p == 0. `generator` (numpy or cupy) makes it reproducible;
    by default the global generator seeded by autograd.manual_seed is used."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if x.dtype.kind != "f":
        raise TypeError(f"dropout: needs a floating-point tensor, got dtype {x.dtype}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    return Dropout.apply(x, p=float(p), generator=generator)
