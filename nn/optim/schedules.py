"""Learning-rate schedules: pure functions of the step number (0-based), returning a float.

Set the rate before each step: `for g in opt.param_groups: g["lr"] = warmup_cosine(step, ...)`
(or `opt.set_lr(...)`). Being pure, a resumed run gets the same rate from the saved step alone.
"""
from __future__ import annotations

import math


def _check(step: int, warmup: int, total: int | None, fn: str) -> None:
    if step < 0 or warmup < 0:
        raise ValueError(f"{fn}: step and warmup must be >= 0, got step={step}, warmup={warmup}")
    if total is not None and total < warmup:
        raise ValueError(f"{fn}: total={total} must be >= warmup={warmup}")


def _warmup(step: int, warmup: int, lr_max: float) -> float:
    # step 0 already gets lr_max / warmup: a first step at rate 0 would be wasted
    return lr_max * (step + 1) / warmup


def warmup_cosine(step: int, warmup: int, total: int, lr_max: float, lr_min: float = 0.0) -> float:
    """Linear warmup over `warmup` steps to lr_max, cosine decay to lr_min at `total`, then lr_min."""
    _check(step, warmup, total, "warmup_cosine")
    if step < warmup:
        return _warmup(step, warmup, lr_max)
    if step >= total:
        return lr_min
    progress = (step - warmup) / max(total - warmup, 1)
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr_max - lr_min)


cosine_schedule = warmup_cosine


def linear_warmup_decay(step: int, warmup: int, total: int, lr_max: float, lr_min: float = 0.0) -> float:
    """Linear warmup to lr_max, then linear decay to lr_min at `total`, then lr_min."""
    _check(step, warmup, total, "linear_warmup_decay")
    if step < warmup:
        return _warmup(step, warmup, lr_max)
    if step >= total:
        return lr_min
    progress = (step - warmup) / max(total - warmup, 1)
    return lr_max + (lr_min - lr_max) * progress


def constant_with_warmup(step: int, warmup: int, lr_max: float) -> float:
    """Linear warmup to lr_max, then constant."""
    _check(step, warmup, None, "constant_with_warmup")
    return _warmup(step, warmup, lr_max) if step < warmup else lr_max
