"""Reductions over axes: sum, mean, max, min, var (each with keepdims).

Backward broadcasts the incoming gradient back over the reduced axes. For max and min the
gradient is split evenly between tied extrema (as PyTorch's amax/amin do): with k equal
maxima each receives g / k, so the gradient of the value stays the same whatever the ties.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from autograd.backend import xp_of
from autograd.function import Function
from autograd.ops._util import normalize_axes

if TYPE_CHECKING:
    from autograd.tensor import Tensor


def _keepdims_shape(shape: tuple, axes: tuple) -> tuple:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _expand_grad(g, in_shape: tuple, axes: tuple, keepdims: bool):
    """The gradient of a reduction broadcast back to the input's shape (a read-only view)."""
    if not keepdims and axes:
        g = g.reshape(_keepdims_shape(in_shape, axes))
    return xp_of(g).broadcast_to(g, in_shape)


class Sum(Function):
    def forward(self, x, axes, keepdims):
        self.in_shape, self.axes, self.keepdims = x.shape, axes, keepdims
        return x.sum(axis=axes, keepdims=keepdims)

    def backward(self, g):
        return (_expand_grad(g, self.in_shape, self.axes, self.keepdims),)


class Mean(Function):
    def forward(self, x, axes, keepdims):
        self.in_shape, self.axes, self.keepdims = x.shape, axes, keepdims
        n = 1
        for a in axes:
            n *= x.shape[a]
        self.n = n
        return x.mean(axis=axes, keepdims=keepdims)

    def backward(self, g):
        return (_expand_grad(g / self.n, self.in_shape, self.axes, self.keepdims),)


class Extremum(Function):
    """max (largest=True) or min over axes; ties share the gradient evenly."""

    def forward(self, x, axes, keepdims, largest):
        if x.size == 0:
            raise ValueError(f"{'max' if largest else 'min'}: reduction over an empty tensor of shape {x.shape}")
        out = x.max(axis=axes, keepdims=True) if largest else x.min(axis=axes, keepdims=True)
        self.x, self.out_k, self.axes, self.keepdims = x, out, axes, keepdims
        if keepdims:
            return out
        return out.reshape(tuple(n for i, n in enumerate(x.shape) if i not in axes))

    def backward(self, g):
        mask = self.x == self.out_k
        count = mask.sum(axis=self.axes, keepdims=True)
        if not self.keepdims:
            g = g.reshape(self.out_k.shape)
        share = g / count.astype(g.dtype)
        return (mask * share,)


class Var(Function):
    def forward(self, x, axes, keepdims, ddof):
        n = 1
        for a in axes:
            n *= x.shape[a]
        if n - ddof <= 0:
            raise ValueError(f"var: ddof={ddof} leaves no degrees of freedom over {n} elements")
        self.diff = x - x.mean(axis=axes, keepdims=True)
        self.axes, self.keepdims, self.denom = axes, keepdims, n - ddof
        sq = self.diff * self.diff
        return sq.sum(axis=axes, keepdims=keepdims) / self.denom

    def backward(self, g):
        if not self.keepdims and self.axes:
            g = g.reshape(_keepdims_shape(self.diff.shape, self.axes))
        return (self.diff * (g * (2.0 / self.denom)),)


def sum(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` (None: all axes; int or tuple). Keeps x's dtype."""
    return Sum.apply(x, axes=normalize_axes(axis, x.ndim, "sum"), keepdims=bool(keepdims))


def mean(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """Mean over `axis` (None: all axes; int or tuple). Keeps x's dtype."""
    if x.dtype.kind not in "fc":
        raise TypeError(f"mean: needs a floating-point tensor, got dtype {x.dtype}")
    return Mean.apply(x, axes=normalize_axes(axis, x.ndim, "mean"), keepdims=bool(keepdims))


def max(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """Largest value over `axis`; tied maxima share the gradient evenly."""
    return Extremum.apply(x, axes=normalize_axes(axis, x.ndim, "max"), keepdims=bool(keepdims), largest=True)


def min(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """Smallest value over `axis`; tied minima share the gradient evenly."""
    return Extremum.apply(x, axes=normalize_axes(axis, x.ndim, "min"), keepdims=bool(keepdims), largest=False)


def var(x: Tensor, axis: int | Sequence[int] | None = None, keepdims: bool = False, ddof: int = 0) -> Tensor:
    """Variance over `axis` with `ddof` delta degrees of freedom (0: population variance)."""
    if x.dtype.kind not in "fc":
        raise TypeError(f"var: needs a floating-point tensor, got dtype {x.dtype}")
    return Var.apply(x, axes=normalize_axes(axis, x.ndim, "var"), keepdims=bool(keepdims), ddof=int(ddof))


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the largest value over `axis` (None: of the flattened tensor); an int64
    Tensor outside the graph."""
    return _arg(x, axis, keepdims, largest=True)


def argmin(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the smallest value over `axis` (None: of the flattened tensor); an int64
    Tensor outside the graph."""
    return _arg(x, axis, keepdims, largest=False)


def _arg(x, axis, keepdims, largest):
    from autograd.ops._util import normalize_axis
    from autograd.tensor import Tensor

    name = "argmax" if largest else "argmin"
    if x.size == 0:
        raise ValueError(f"{name}: empty tensor of shape {x.shape}")
    if axis is not None:
        axis = normalize_axis(axis, x.ndim, name)
    data = x.data.argmax(axis=axis, keepdims=keepdims) if largest else x.data.argmin(axis=axis, keepdims=keepdims)
    return Tensor._make(x.xp.asarray(data), None)
