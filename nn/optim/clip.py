"""Gradient clipping by global norm."""
from __future__ import annotations

import math
from typing import Any, Iterable

from autograd.backend import device_of, xp_of


def _grads(params: Iterable[Any]) -> list:
    if hasattr(params, "parameters") and callable(params.parameters):
        params = params.parameters()
    return [p.grad for p in params if p.grad is not None]


def grad_norm(params: Iterable[Any]) -> float:
    """The global L2 norm of the gradients of `params` (Parameters or a Module), as a float.

    Squares are summed on each gradient's own device (float16 in float32, the total in float64),
    with one host transfer per device, not per tensor."""
    return _norm(_grads(params))


def _norm(grads: list) -> float:
    per_device: dict = {}
    for g in grads:
        flat = g.reshape(-1)
        if flat.dtype.itemsize < 4:
            flat = flat.astype("float32")
        key = device_of(g)
        per_device[key] = xp_of(g).dot(flat, flat).astype("float64") + per_device.get(key, 0.0)
    return math.sqrt(sum(float(v) for v in per_device.values()))


def clip_grad_norm(params: Iterable[Any], max_norm: float, eps: float = 1e-6) -> float:
    """Scale all gradients by max_norm / (total + eps) when the total L2 norm exceeds max_norm.

    params: Parameters (or a Module). Returns the total norm before clipping, as a float. A
    non-finite norm (inf or nan gradients) leaves the gradients untouched and is returned, so
    the caller can skip the step.
    """
    if max_norm <= 0:
        raise ValueError(f"clip_grad_norm: max_norm must be > 0, got {max_norm}")
    grads = _grads(params)
    total = _norm(grads)
    if not math.isfinite(total):
        return total
    coef = max_norm / (total + eps)
    if coef < 1.0:
        for g in grads:
            g *= coef
    return total
