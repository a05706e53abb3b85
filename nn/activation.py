"""Activation modules (GELU, ReLU, ReLU2, SiLU, Tanh) and `activation(name)` to build one by name.

`step(x)` is the same function on a raw array, for decode steps (see nn/arrays.py)."""
from __future__ import annotations

import autograd
from autograd.ops import activation as ops
from autograd.tensor import Tensor
from nn import arrays
from nn.module import Module


class GELU(Module):
    """x * Phi(x); approximate="tanh" (GPT-2's) or "none" (the exact erf form)."""

    def __init__(self, approximate: str = "tanh"):
        super().__init__()
        ops.check_gelu_approximate(approximate, "GELU")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return autograd.gelu(x, approximate=self.approximate)

    def step(self, x):
        return arrays.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return autograd.relu(x)

    def step(self, x):
        return ops.ReLU().forward(x)


class ReLU2(Module):
    """relu(x)**2, the squared ReLU of Primer (So et al., 2021) and the modded-nanoGPT speedrun."""

    def forward(self, x: Tensor) -> Tensor:
        r = autograd.relu(x)
        return r * r

    def step(self, x):
        r = ops.ReLU().forward(x)
        return r * r


class SiLU(Module):
    """x * sigmoid(x) (also called swish)."""

    def forward(self, x: Tensor) -> Tensor:
        return autograd.silu(x)

    def step(self, x):
        return ops.silu_array(x)[0]


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return autograd.tanh(x)


_BY_NAME = {
    "gelu": lambda: GELU("tanh"),
    "gelu_tanh": lambda: GELU("tanh"),
    "gelu_exact": lambda: GELU("none"),
    "relu": ReLU,
    "relu2": ReLU2,
    "silu": SiLU,
    "swish": SiLU,
    "tanh": Tanh,
}


def activation(name: str | Module) -> Module:
    """An activation module by name: gelu (tanh form), gelu_exact, relu, relu2, silu, tanh; a Module passes through."""
    if isinstance(name, Module):
        return name
    try:
        return _BY_NAME[name]()
    except (KeyError, TypeError):
        raise ValueError(f"unknown activation {name!r}: choose one of {sorted(_BY_NAME)}") from None
