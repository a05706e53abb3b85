"""Helpers shared by the ops: turning scalars into tensors of the right dtype and backend."""
from __future__ import annotations

from typing import Any

import numpy as np

from autograd import backend
from autograd.tensor import Tensor  # defined before autograd.tensor imports the ops


def tensor_like(value: Any, ref):
    """`value` as a Tensor on `ref`'s backend; Python scalars take `ref`'s dtype (no upcast)."""
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


def normalize_axes(axis, ndim: int, op: str) -> tuple:
    """`axis` (None, an int or a sequence of ints, negatives allowed) as a sorted tuple of
    non-negative axes; None means every axis. A clear error names the op when out of range."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"{op}: axis {a} is out of range for a tensor with {ndim} dimensions")
        out.append(int(a) % max(ndim, 1))
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def normalize_axis(axis: int, ndim: int, op: str) -> int:
    """One axis (negatives allowed) as a non-negative int; a clear error when out of range."""
    if not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor with {ndim} dimensions")
    return int(axis) % ndim


def as_tensor(value: Any, op: str, ref=None):
    """`value` as a Tensor (arrays and scalars are wrapped, on `ref`'s backend when given)."""
    if isinstance(value, Tensor):
        return value
    if ref is not None:
        return tensor_like(value, ref)
    try:
        return Tensor(value)
    except Exception as exc:
        raise TypeError(f"{op}: expected a Tensor or array, got {type(value).__name__}") from exc


def same_device(tensors, op: str) -> None:
    """A clear error when the tensors do not all live on one device."""
    first = tensors[0]
    xp = first.xp
    for t in tensors[1:]:
        if t.xp is not xp or (xp is not np and t.device != first.device):
            raise RuntimeError(
                f"{op}: tensors on different devices ({first.device} and {t.device}); move them "
                "with .to() first"
            )


def shape_of_args(shape: tuple, op: str) -> tuple:
    """Shapes given as f(2, 3) or f((2, 3)) or f([2, 3]) -> (2, 3)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    try:
        return tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: shape must be ints, got {shape!r}") from None


def host_floats(*arrays) -> bool:
    """Whether the arrays are NumPy float32 or float64 arrays of one dtype: what the host-only
    paths take (the fused CPU sublayers, the norms' row backward, AdamW's flat update)."""
    first = arrays[0]
    dtype = first.dtype
    if type(first) is not np.ndarray or dtype not in backend.HOST_FLOATS:
        return False
    # one array (a decode step's norm, on its hot path) needs no generator
    return len(arrays) == 1 or all(type(a) is np.ndarray and a.dtype == dtype for a in arrays[1:])
