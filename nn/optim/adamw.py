"""AdamW: Adam with decoupled weight decay (Loshchilov & Hutter, 2019), bias-corrected."""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from nn.optim.optimizer import Optimizer


class AdamW(Optimizer):
    """For step t (counted per parameter), gradient g, parameter p:

        p *= 1 - lr * weight_decay                 (decoupled: not part of the gradient)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    m and v ("exp_avg", "exp_avg_sq") have the parameter's shape, dtype and device. Groups let
    biases, norms and embeddings use weight_decay=0.0.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01):
        super().__init__(params, dict(lr=float(lr), betas=tuple(float(b) for b in betas), eps=float(eps),
                                      weight_decay=float(weight_decay)))

    def _validate(self, group: dict) -> None:
        super()._validate(group)
        betas = tuple(group["betas"])
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"AdamW: betas must be two numbers in [0, 1), got {group['betas']}")
        group["betas"] = betas
        if group["eps"] < 0 or group["weight_decay"] < 0:
            raise ValueError(f"AdamW: eps and weight_decay must be >= 0, got {group['eps']}, {group['weight_decay']}")

    def _update(self, p, g, group: dict, state: dict) -> None:
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        t, m, v = _advance(p, state)
        if _use_fused(p):  # CuPy arrays: one fused kernel per parameter (autograd/cuda/elementwise.py)
            from autograd.cuda.elementwise import adamw_update
            return adamw_update(p, g, m, v, lr, b1, b2, eps, wd, t)
        _adamw_arrays(p, g, m, v, lr, b1, b2, eps, wd, t)

    def _update_group(self, items: list, group: dict) -> None:
        """On the GPU, one launch per dtype, device and step count of the group (usually one)
        instead of one per parameter: a GPT-2 step's ~150 launches become 2."""
        if len(items) < 2 or not _use_fused(items[0][0]):
            return super()._update_group(items, group)
        from autograd.backend import device_of
        from autograd.cuda.elementwise import adamw_multi_update

        batches: dict = {}
        for p, g, state in items:
            t, m, v = _advance(p, state)
            batches.setdefault((p.dtype, device_of(p), t), []).append((p, g, m, v))
        lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        for (_, _, t), quads in batches.items():
            adamw_multi_update(quads, lr, b1, b2, eps, wd, t)


def _advance(p, state: dict) -> tuple:
    """(step t, exp_avg, exp_avg_sq) of a parameter after counting this step; zeros at first."""
    if not state:
        state["step"] = 0
        state["exp_avg"] = p * 0  # zeros with p's shape, dtype and device
        state["exp_avg_sq"] = p * 0
    state["step"] += 1
    return state["step"], state["exp_avg"], state["exp_avg_sq"]


def _adamw_arrays(p, g, m, v, lr, b1, b2, eps, wd, t) -> None:
    """The update of the class docstring on backend arrays, in place; NumPy arrays in blocks on
    autograd.parallel's threads (each block's passes in cache, one block-sized scratch)."""
    from autograd import parallel

    def update(p, g, m, v):
        xp = _xp(p)
        if wd:
            p *= 1.0 - lr * wd
        tmp = xp.multiply(g, 1.0 - b1)   # the one scratch array of the step
        m *= b1
        m += tmp
        xp.multiply(g, g, out=tmp)
        tmp *= 1.0 - b2
        v *= b2
        v += tmp
        xp.sqrt(v, out=tmp)
        tmp *= 1.0 / math.sqrt(1.0 - b2 ** t)
        tmp += eps
        xp.divide(m, tmp, out=tmp)
        tmp *= -lr / (1.0 - b1 ** t)
        p += tmp

    if p.size >= parallel.MIN_PARALLEL and all(
            type(a) is np.ndarray and a.flags.c_contiguous for a in (p, g, m, v)):
        # rows of 1024 elements where the size allows (else one row: one block)
        flat = [a.reshape(-1, 1024) if a.size % 1024 == 0 else a.reshape(1, -1) for a in (p, g, m, v)]
        parallel.map_rows(update, *flat)
    else:
        update(p, g, m, v)


def _use_fused(a) -> bool:
    from autograd.cuda import use

    return use(a)


def _xp(a):
    from autograd.backend import xp_of

    return xp_of(a)
