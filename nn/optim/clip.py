"""Gradient clipping by global norm.

Both functions sum the squares on each gradient's own device (float16 in float32, the total in
float64). With `to_host=True` (the default) the norm comes back as a Python float: one transfer
per device. With `to_host=False` and every gradient on one device, it stays there as a 0-d
array and the clipping factor is computed there too, so a training step on a GPU never waits
for the host; the caller reads the norm when it logs.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from autograd.backend import device_of, xp_of

def _grads(params: Iterable[Any]) -> list:
    if hasattr(params, "parameters") and callable(params.parameters):
        params = params.parameters()
    return [p.grad for p in params if p.grad is not None]


def _squares(grads: list) -> dict:
    """device -> sum of squares (float64, on that device; a float for the host)."""
    per_device: dict = {}
    for g in grads:
        flat = g.reshape(-1)
        if flat.dtype.itemsize < 4:
            flat = flat.astype("float32")
        if type(flat) is np.ndarray:
            # a float: the same sums in the same order as the float64 arrays, with less Python
            # per gradient (a GPT has dozens of small gradients, each summed on one thread)
            per_device["cpu"] = float(flat.dot(flat)) + per_device.get("cpu", 0.0)
            continue
        key = device_of(g)
        per_device[key] = xp_of(g).dot(flat, flat).astype("float64") + per_device.get(key, 0.0)
    return per_device


def grad_norm(params: Iterable[Any], to_host: bool = True) -> Any:
    """The global L2 norm of the gradients of `params` (Parameters or a Module): a float, or
    with to_host=False a 0-d array on the gradients' device (a float when they span devices)."""
    return _norm_of(_grads(params), to_host)


def clip_grad_norm(params: Iterable[Any], max_norm: float, eps: float = 1e-6, to_host: bool = True) -> Any:
    """Scale all gradients by max_norm / (total + eps) when the total L2 norm exceeds max_norm.

    params: Parameters (or a Module). Returns the total norm before clipping (a float, or a 0-d
    device array with to_host=False). On the host path a non-finite norm (inf or nan gradients)
    leaves the gradients untouched, so the caller can skip the step; on the device path the
    caller finds it when it reads the norm.
    """
    if not max_norm > 0:  # NaN too
        raise ValueError(f"clip_grad_norm: max_norm must be > 0, got {max_norm}")
    grads = _grads(params)
    if not grads:
        return 0.0
    total = _norm_of(grads, to_host)
    if isinstance(total, float):
        if not math.isfinite(total):
            return total
        coef = max_norm / (total + eps)
        if coef < 1.0:
            for g in grads:
                g *= coef
        return total
    coef = xp_of(total).minimum(max_norm / (total + eps), 1.0)
    for g in grads:
        g *= coef.astype(g.dtype)
    return total


def _norm_of(grads: list, to_host: bool = True) -> Any:
    """grad_norm of a list of gradient arrays, on their device or as a float."""
    per_device = _squares(grads)
    if not to_host and len(per_device) == 1:
        (sq,) = per_device.values()
        xp = xp_of(sq)
        return xp.asarray(xp.sqrt(sq))  # 0-d array, never a host scalar
    return math.sqrt(sum(float(v) for v in per_device.values()))
