"""Elementwise math: exp, log, sqrt, abs, clip. Each keeps its input's dtype."""
from __future__ import annotations

from typing import TYPE_CHECKING

from autograd.backend import xp_of
from autograd.function import Function

if TYPE_CHECKING:
    from autograd.tensor import Tensor


def _float_only(x, op: str) -> None:
    if x.dtype.kind not in "fc":
        raise TypeError(f"{op}: needs a floating-point tensor, got dtype {x.dtype}")


class Exp(Function):
    def forward(self, x):
        self.out = xp_of(x).exp(x)
        return self.out

    def backward(self, g):
        return (g * self.out,)


class Log(Function):
    def forward(self, x):
        self.x = x
        return xp_of(x).log(x)

    def backward(self, g):
        return (g / self.x,)


class Sqrt(Function):
    def forward(self, x):
        self.out = xp_of(x).sqrt(x)
        return self.out

    def backward(self, g):
        return (g / (self.out + self.out),)


class Abs(Function):
    """|x|; the gradient at 0 is 0 (the sign), as in PyTorch."""

    def forward(self, x):
        xp = xp_of(x)
        self.sign = xp.sign(x)
        return xp.abs(x)

    def backward(self, g):
        return (g * self.sign,)


class Clip(Function):
    """Clamp to [lo, hi] (either may be None); the gradient passes where lo <= x <= hi."""

    def forward(self, x, lo, hi):
        xp = xp_of(x)
        inside = None
        if lo is not None:
            inside = x >= lo
        if hi is not None:
            below = x <= hi
            inside = below if inside is None else inside & below
        self.inside = inside
        if lo is None:
            return xp.minimum(x, hi)
        if hi is None:
            return xp.maximum(x, lo)
        return xp.clip(x, lo, hi)

    def backward(self, g):
        return (g * self.inside,)


def exp(x: Tensor) -> Tensor:
    _float_only(x, "exp")
    return Exp.apply(x)


def log(x: Tensor) -> Tensor:
    _float_only(x, "log")
    return Log.apply(x)


def sqrt(x: Tensor) -> Tensor:
    _float_only(x, "sqrt")
    return Sqrt.apply(x)


def abs(x: Tensor) -> Tensor:
    return Abs.apply(x)


def clip(x: Tensor, lo: float | None = None, hi: float | None = None) -> Tensor:
    """x clamped to [lo, hi]; lo or hi may be None (unbounded on that side)."""
    if lo is None and hi is None:
        raise ValueError("clip: give at least one of lo and hi")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"clip: lo={lo} is greater than hi={hi}")
    if x.dtype.kind in "fc":
        # Python bounds must not upcast float32 (np.clip would promote with a float64 scalar).
        lo = None if lo is None else x.dtype.type(lo)
        hi = None if hi is None else x.dtype.type(hi)
    return Clip.apply(x, lo=lo, hi=hi)
