"""Dropout: zero each element with probability p and scale the rest by 1 / (1 - p)."""
from __future__ import annotations

from autograd import random as _random
from autograd.function import Function


class Dropout(Function):
    def forward(self, x, p, generator):
        noise = _random.uniform(x.shape, dtype=x.dtype if x.dtype.kind == "f" else "float32",
                                device=_device(x), generator=generator)
        keep = noise >= p
        self.keep, self.scale = keep, 1.0 / (1.0 - p)
        return x * keep * x.dtype.type(self.scale)

    def backward(self, g):
        return (g * self.keep * g.dtype.type(self.scale),)


def _device(x):
    from autograd.backend import device_of

    return device_of(x)


def dropout(x, p: float = 0.5, training: bool = True, generator=None):
    """Zero elements with probability p, scale survivors by 1 / (1 - p) (inverted dropout).

    Identity when not training or p == 0. `generator` (numpy or cupy) makes it reproducible;
    by default the global generator seeded by autograd.manual_seed is used."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    return Dropout.apply(x, p=float(p), generator=generator)
