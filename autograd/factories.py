"""Tensor factories: zeros, ones, full, randn, rand, arange and the *_like variants.

All take dtype=None (float32 for floating values), device=None ("cpu"; "cuda", "cuda:N")
and requires_grad=False; randn and rand take generator=None (the global generator of the
device, seeded by autograd.manual_seed). Each is also a static method of Tensor.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from autograd import backend
from autograd import random as _random
from autograd.ops._util import shape_of_args
from autograd.tensor import DEFAULT_FLOAT, Tensor


def _dtype(dtype, default=DEFAULT_FLOAT) -> np.dtype:
    if dtype is None:
        return np.dtype(default)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(f"unknown dtype {dtype!r}") from None


def _finish(array, requires_grad: bool) -> Tensor:
    t = Tensor._make(array, None)
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*shape, dtype=None, device: str | None = None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros of `shape` (ints or one tuple)."""
    xp = backend.module_for_device(device)
    with _on(device):
        return _finish(xp.zeros(shape_of_args(shape, "zeros"), dtype=_dtype(dtype)), requires_grad)


def ones(*shape, dtype=None, device: str | None = None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones of `shape` (ints or one tuple)."""
    xp = backend.module_for_device(device)
    with _on(device):
        return _finish(xp.ones(shape_of_args(shape, "ones"), dtype=_dtype(dtype)), requires_grad)


def full(shape, value: Any, dtype=None, device: str | None = None, requires_grad: bool = False) -> Tensor:
    """A tensor of `shape` filled with `value` (float32 unless dtype says otherwise;
    a Python int or bool value with dtype=None gives int64 or bool)."""
    shape = shape_of_args((shape,) if isinstance(shape, (int, np.integer)) else tuple(shape), "full")
    if dtype is None and isinstance(value, (bool, np.bool_)):
        dtype = bool
    elif dtype is None and isinstance(value, (int, np.integer)):
        dtype = np.int64
    xp = backend.module_for_device(device)
    with _on(device):
        return _finish(xp.full(shape, value, dtype=_dtype(dtype)), requires_grad)


def randn(*shape, dtype=None, device: str | None = None, requires_grad: bool = False,
          generator=None) -> Tensor:
    """Standard normal samples of `shape`."""
    data = _random.normal(shape_of_args(shape, "randn"), _float_dtype(dtype, "randn"),
                          device or "cpu", generator)
    return _finish(data, requires_grad)


def rand(*shape, dtype=None, device: str | None = None, requires_grad: bool = False,
         generator=None) -> Tensor:
    """Uniform samples in [0, 1) of `shape`."""
    data = _random.uniform(shape_of_args(shape, "rand"), _float_dtype(dtype, "rand"),
                           device or "cpu", generator)
    return _finish(data, requires_grad)


def arange(start, stop=None, step=1, dtype=None, device: str | None = None,
           requires_grad: bool = False) -> Tensor:
    """Evenly spaced values in [start, stop) (int64 when all of them are ints, else float32)."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    if dtype is None:
        ints = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (start, stop, step))
        dtype = np.int64 if ints else DEFAULT_FLOAT
    xp = backend.module_for_device(device)
    with _on(device):
        return _finish(xp.arange(start, stop, step, dtype=_dtype(dtype)), requires_grad)


def _like_args(t: Tensor, dtype, device):
    return (t.dtype if dtype is None else dtype), (t.device if device is None else device)


def zeros_like(t: Tensor, dtype=None, device: str | None = None, requires_grad: bool = False) -> Tensor:
    dtype, device = _like_args(t, dtype, device)
    return zeros(t.shape, dtype=dtype, device=device, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, device: str | None = None, requires_grad: bool = False) -> Tensor:
    dtype, device = _like_args(t, dtype, device)
    return ones(t.shape, dtype=dtype, device=device, requires_grad=requires_grad)


def full_like(t: Tensor, value: Any, dtype=None, device: str | None = None,
              requires_grad: bool = False) -> Tensor:
    dtype, device = _like_args(t, dtype, device)
    return full(t.shape, value, dtype=dtype, device=device, requires_grad=requires_grad)


def randn_like(t: Tensor, dtype=None, device: str | None = None, requires_grad: bool = False,
               generator=None) -> Tensor:
    dtype, device = _like_args(t, dtype, device)
    return randn(t.shape, dtype=dtype, device=device, requires_grad=requires_grad, generator=generator)


def rand_like(t: Tensor, dtype=None, device: str | None = None, requires_grad: bool = False,
              generator=None) -> Tensor:
    dtype, device = _like_args(t, dtype, device)
    return rand(t.shape, dtype=dtype, device=device, requires_grad=requires_grad, generator=generator)


def _float_dtype(dtype, op: str) -> np.dtype:
    dt = _dtype(dtype)
    if dt.kind != "f":
        raise TypeError(f"{op}: needs a floating-point dtype, got {dt}")
    return dt


class _on:
    """Make `device`'s GPU current while allocating (a no-op for the CPU)."""

    def __init__(self, device):
        kind, index = backend.parse_device(device)
        self._ctx = backend.cupy_module().cuda.Device(index) if kind == "cuda" else None

    def __enter__(self):
        if self._ctx is not None:
            self._ctx.__enter__()

    def __exit__(self, *exc):
        if self._ctx is not None:
            self._ctx.__exit__(*exc)


FACTORIES = (zeros, ones, full, randn, rand, arange, zeros_like, ones_like, full_like,
             randn_like, rand_like)
for _fn in FACTORIES:
    setattr(Tensor, _fn.__name__, staticmethod(_fn))
