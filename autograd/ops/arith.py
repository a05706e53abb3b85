"""Elementwise arithmetic: + - * / neg pow, broadcasting-aware.

Each backward sums its gradient back to the input's shape (`unbroadcast`).
"""
from __future__ import annotations

from autograd.backend import xp_of
from autograd.function import Function, unbroadcast
from autograd.ops._util import binary_operands, broadcast_shapes


class Add(Function):
    def forward(self, a, b):
        self.shapes = a.shape, b.shape
        return a + b

    def backward(self, g):
        sa, sb = self.shapes
        return unbroadcast(g, sa), unbroadcast(g, sb)


class Sub(Function):
    def forward(self, a, b):
        self.shapes = a.shape, b.shape
        return a - b

    def backward(self, g):
        sa, sb = self.shapes
        return unbroadcast(g, sa), (unbroadcast(-g, sb) if self.needs_input_grad[1] else None)


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


def _binary(cls, a, b, name):
    a, b = binary_operands(a, b, name)
    if a.shape != b.shape:
        broadcast_shapes(a.shape, b.shape, name)
    return cls.apply(a, b)


def add(a, b):
    return _binary(Add, a, b, "add")


def sub(a, b):
    return _binary(Sub, a, b, "sub")


def mul(a, b):
    return _binary(Mul, a, b, "mul")


def div(a, b):
    return _binary(Div, a, b, "div")


def neg(a):
    return Neg.apply(a)


def pow(a, b):
    """a ** b; a Python-number exponent takes the cheaper scalar path."""
    from autograd.tensor import Tensor

    if isinstance(a, Tensor) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return PowScalar.apply(a, p=b)
    return _binary(Pow, a, b, "pow")
