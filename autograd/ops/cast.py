"""Moving values between dtypes and devices, differentiably (the gradient goes back)."""
from __future__ import annotations

from typing import Any

import numpy as np

from autograd import backend
from autograd.function import Function
from autograd.tensor import Tensor  # defined before autograd.tensor imports the ops


class AsType(Function):
    def forward(self, x, dtype):
        self.in_dtype = x.dtype
        return x.astype(dtype)

    def backward(self, g):
        return (g.astype(self.in_dtype),)


class ToDevice(Function):
    def forward(self, x, device):
        self.source = backend.device_of(x)
        return backend.to_device(x, device)

    def backward(self, g):
        return (backend.to_device(g, self.source),)


def _as_dtype(dtype):
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(f"astype: unknown dtype {dtype!r}") from None


def astype(x: Tensor, dtype: Any) -> Tensor:
    """x converted to `dtype` (a numpy dtype or its name); the same tensor when already so.

    Casting to an integer or bool dtype leaves the graph (no gradient flows through it)."""
    dtype = _as_dtype(dtype)
    if dtype == x.dtype:
        return x
    if dtype.kind not in "fc":
        return Tensor._make(x.data.astype(dtype), None)
    return AsType.apply(x, dtype=dtype)


def to_device(x: Tensor, device: str) -> Tensor:
    """x on `device` ('cpu', 'cuda', 'cuda:N'); the same tensor when already there."""
    backend.parse_device(device)
    target = "cpu" if device == "cpu" else f"cuda:{backend.parse_device(device)[1]}"
    if x.device == target:
        return x
    return ToDevice.apply(x, device=target)
