"""Elementwise arithmetic: + - * / neg pow, broadcasting-aware.

Each backward sums its gradient back to the input's shape (`unbroadcast`).
"""
from __future__ import annotations

import numpy as np

from autograd.backend import xp_of
from autograd.function import Function, unbroadcast
from autograd.ops._util import binary_operands, broadcast_shapes
from autograd.tensor import Tensor  # defined before autograd.tensor imports the ops


class Add(Function):
    def forward(self, a, b):
        self.shapes = a.shape, b.shape
        return a + b

    def backward(self, g):
        sa, sb = self.shapes
        need_a, need_b = self.needs_input_grad
        return (unbroadcast(g, sa) if need_a else None), (unbroadcast(g, sb) if need_b else None)


class Sub(Function):
    def forward(self, a, b):
        self.shapes = a.shape, b.shape
        return a - b

    def backward(self, g):
        sa, sb = self.shapes
        need_a, need_b = self.needs_input_grad
        return (unbroadcast(g, sa) if need_a else None), (unbroadcast(-g, sb) if need_b else None)


class Mul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, g):
        ga = unbroadcast(g * self.b, self.a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(g * self.a, self.b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class Div(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return a / b

    def backward(self, g):
        ga = unbroadcast(g / self.b, self.a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(-g * self.a / (self.b * self.b), self.b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class Neg(Function):
    def forward(self, a):
        return -a

    def backward(self, g):
        return (-g,)


class Pow(Function):
    """a ** b for tensors a and b (either may be a broadcast scalar)."""

    def forward(self, a, b):
        self.a, self.b = a, b
        self.out = a ** b
        return self.out

    def backward(self, g):
        a, b = self.a, self.b
        ga = unbroadcast(g * b * a ** (b - 1), a.shape) if self.needs_input_grad[0] else None
        gb = None
        if self.needs_input_grad[1]:
            xp = xp_of(a)
            # d(a**b)/db = a**b * log(a), taken as 0 where a <= 0 (as PyTorch does for a == 0)
            log_a = xp.where(a > 0, xp.log(xp.where(a > 0, a, 1)), 0).astype(a.dtype)
            gb = unbroadcast(g * self.out * log_a, b.shape)
        return ga, gb


class PowScalar(Function):
    """a ** p for a Python number p (the common case: x**2, x**0.5)."""

    def forward(self, a, p):
        self.a, self.p = a, p
        return a ** p

    def backward(self, g):
        p = self.p
        if p == 2:
            return (g * 2 * self.a,)
        return (g * p * self.a ** (p - 1),)


class AddScalar(Function):
    """x + c for a Python number c."""

    def forward(self, x, c):
        return x + c

    def backward(self, g):
        return (g,)


class MulScalar(Function):
    """x * c for a Python number c."""

    def forward(self, x, c):
        self.c = c
        return x * c

    def backward(self, g):
        return (g * self.c,)


class DivScalar(Function):
    """x / c for a Python number c."""

    def forward(self, x, c):
        self.c = c
        return x / c

    def backward(self, g):
        return (g / self.c,)


def _is_number(v) -> bool:
    # Python numbers are weak scalars for NumPy and CuPy: float32 stays float32.
    return type(v) is float or type(v) is int


def _binary(cls, a, b, name):
    a, b = binary_operands(a, b, name)
    try:
        return cls.apply(a, b)
    except ValueError:
        broadcast_shapes(a.shape, b.shape, name)  # raises, naming the op and both shapes
        raise


def _tensor_with_number(a, b):
    """(tensor, number) when exactly one operand is a float tensor and the other a Python number."""
    if _is_number(b) and isinstance(a, Tensor) and a.dtype.kind == "f":
        return a, b
    if _is_number(a) and isinstance(b, Tensor) and b.dtype.kind == "f":
        return b, a
    return None, None


def add(a, b):
    t, c = _tensor_with_number(a, b)
    if t is not None:
        return AddScalar.apply(t, c=c)
    return _binary(Add, a, b, "add")


def sub(a, b):
    if _is_number(b) and isinstance(a, Tensor) and a.dtype.kind == "f":
        return AddScalar.apply(a, c=-b)
    return _binary(Sub, a, b, "sub")


def mul(a, b):
    t, c = _tensor_with_number(a, b)
    if t is not None:
        return MulScalar.apply(t, c=c)
    return _binary(Mul, a, b, "mul")


def div(a, b):
    if _is_number(b) and isinstance(a, Tensor) and a.dtype.kind == "f":
        return DivScalar.apply(a, c=b)
    return _binary(Div, a, b, "div")


def neg(a):
    return Neg.apply(a)


def pow(a, b):
    """a ** b; a Python-number exponent takes the cheaper scalar path."""
    if isinstance(a, Tensor) and isinstance(b, (int, float, np.integer, np.floating)) \
            and not isinstance(b, bool):
        # a NumPy scalar exponent becomes a Python number (weak: float32 stays float32)
        return PowScalar.apply(a, p=b.item() if isinstance(b, np.generic) else b)
    return _binary(Pow, a, b, "pow")
