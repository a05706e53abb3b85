"""Helpers shared by the ops: turning scalars into tensors of the right dtype and backend."""
from __future__ import annotations

from typing import Any

import numpy as np

from autograd import backend


def tensor_like(value: Any, ref):
    """`value` as a Tensor on `ref`'s backend; Python scalars take `ref`'s dtype (no upcast)."""
    from autograd.tensor import Tensor

    if isinstance(value, Tensor):
        return value
    xp = ref.xp
    if isinstance(value, (bool, int, float)) or (np.isscalar(value) and not isinstance(value, (str, bytes))):
        dtype = ref.dtype if ref.dtype.kind in "fc" else None
        return Tensor._make(xp.asarray(value, dtype=dtype), None)
    arr = value
    if backend.xp_of(arr) is not xp:
        arr = backend.to_device(np.asarray(arr), ref.device)
    return Tensor._make(xp.asarray(arr), None)


def binary_operands(a: Any, b: Any, op: str):
    """Both operands as Tensors on one backend; a clear error when they live on different devices."""
    from autograd.tensor import Tensor

    if not isinstance(a, Tensor):
        a = tensor_like(a, b)
    elif not isinstance(b, Tensor):
        b = tensor_like(b, a)
    elif a.xp is not b.xp:
        raise RuntimeError(f"{op}: operands on different devices ({a.device} and {b.device}); move one with .to()")
    return a, b


def broadcast_shapes(a_shape: tuple, b_shape: tuple, op: str) -> tuple:
    """The broadcast result shape, or an error naming the op and both shapes."""
    try:
        return np.broadcast_shapes(a_shape, b_shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {a_shape} and {b_shape} cannot be broadcast together") from None
