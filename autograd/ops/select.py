"""Selection by mask: where, masked_fill, tril/triu, and comparisons (boolean masks).

Masks are boolean arrays (or boolean Tensors) and never carry gradients; comparisons
return boolean Tensors outside the graph.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from autograd.backend import to_device, xp_of
from autograd.function import Function, unbroadcast
from autograd.ops._util import as_tensor, broadcast_shapes, same_device, tensor_like
from autograd.tensor import Tensor  # defined before autograd.tensor imports the ops


def _mask_array(mask, ref, op: str):
    data = mask.data if isinstance(mask, Tensor) else mask
    xp = ref.xp
    if xp_of(data) is not xp:
        data = to_device(np.asarray(data), ref.device)
    data = xp.asarray(data)
    if data.dtype != bool:
        raise TypeError(f"{op}: mask must be boolean, got dtype {data.dtype}")
    return data


class Where(Function):
    def forward(self, a, b, cond):
        self.cond, self.shapes = cond, (a.shape, b.shape)
        return xp_of(a).where(cond, a, b)

    def backward(self, g):
        xp = xp_of(g)
        zero = g.dtype.type(0)
        ga = unbroadcast(xp.where(self.cond, g, zero), self.shapes[0]) if self.needs_input_grad[0] else None
        gb = unbroadcast(xp.where(self.cond, zero, g), self.shapes[1]) if self.needs_input_grad[1] else None
        return ga, gb


class MaskedFill(Function):
    def forward(self, x, mask, value):
        self.mask, self.shape = mask, x.shape
        return xp_of(x).where(mask, x.dtype.type(value), x)

    def backward(self, g):
        return (unbroadcast(xp_of(g).where(self.mask, g.dtype.type(0), g), self.shape),)


class Triangle(Function):
    def forward(self, x, k, upper):
        self.k, self.upper = k, upper
        xp = xp_of(x)
        return xp.triu(x, k) if upper else xp.tril(x, k)

    def backward(self, g):
        xp = xp_of(g)
        return (xp.triu(g, self.k) if self.upper else xp.tril(g, self.k),)


def where(cond: Any, a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """Elementwise `a` where cond is True, else `b` (all three broadcast together)."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        a = as_tensor(a, "where")
    if not isinstance(a, Tensor):
        a = tensor_like(a, b)
    if not isinstance(b, Tensor):
        b = tensor_like(b, a)
    same_device((a, b), "where")
    c = _mask_array(cond, a, "where")
    shape = broadcast_shapes(a.shape, b.shape, "where")
    broadcast_shapes(c.shape, shape, "where")
    if a.dtype != b.dtype:
        dtype = np.result_type(a.dtype, b.dtype)
        a = a if a.dtype == dtype else a.astype(dtype)
        b = b if b.dtype == dtype else b.astype(dtype)
    return Where.apply(a, b, cond=c)


def masked_fill(x: Tensor, mask: Any, value: float) -> Tensor:
    """x with `value` wherever `mask` (broadcastable to x) is True; no gradient flows there."""
    m = _mask_array(mask, x, "masked_fill")
    try:
        out_shape = np.broadcast_shapes(m.shape, x.shape)
    except ValueError:
        raise ValueError(f"masked_fill: mask of shape {m.shape} does not broadcast to x of shape {x.shape}") from None
    if out_shape != x.shape:
        raise ValueError(f"masked_fill: mask of shape {m.shape} does not broadcast to x of shape {x.shape}")
    return MaskedFill.apply(x, mask=m, value=value)


def tril(x: Tensor, k: int = 0) -> Tensor:
    """Zero everything above the k-th diagonal of the last two axes."""
    if x.ndim < 2:
        raise ValueError(f"tril: needs at least 2 dimensions, got shape {x.shape}")
    return Triangle.apply(x, k=int(k), upper=False)


def triu(x: Tensor, k: int = 0) -> Tensor:
    """Zero everything below the k-th diagonal of the last two axes."""
    if x.ndim < 2:
        raise ValueError(f"triu: needs at least 2 dimensions, got shape {x.shape}")
    return Triangle.apply(x, k=int(k), upper=True)


_COMPARE = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "eq": operator.eq, "ne": operator.ne,
}


def compare(a: Tensor | Any, b: Tensor | Any, op: str) -> Tensor:
    """A boolean Tensor (no graph): a < b etc. for op in lt, le, gt, ge, eq, ne."""
    if op not in _COMPARE:
        raise ValueError(f"compare: unknown comparison {op!r}")
    ref = a if isinstance(a, Tensor) else b
    ad = a.data if isinstance(a, Tensor) else tensor_like(a, ref).data
    bd = b.data if isinstance(b, Tensor) else tensor_like(b, ref).data
    if xp_of(ad) is not xp_of(bd):
        raise RuntimeError(f"compare: operands on different devices ({ref.device}); move one with .to()")
    try:
        return Tensor._make(_COMPARE[op](ad, bd), None)
    except ValueError:
        broadcast_shapes(ad.shape, bd.shape, op)  # raises, naming the comparison and both shapes
        raise


def eq(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """a == b elementwise as a boolean Tensor (no graph); the same as the `==` operator."""
    return compare(a, b, "eq")


def ne(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """a != b elementwise as a boolean Tensor (no graph); the same as the `!=` operator."""
    return compare(a, b, "ne")
