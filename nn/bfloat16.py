"""bfloat16 as NumPy sees it: uint16 bit patterns (NumPy has no bfloat16 dtype).

A bfloat16 is the high half of a float32 (sign, 8 exponent bits, 7 mantissa bits), so widening
is exact: the 16 bits become the float32's top 16 and the rest are zero. Narrowing rounds to
nearest, ties to even, as hardware and PyTorch do; NaN stays a (quiet) NaN, infinities stay.
CuPy arrays convert on the device (autograd/cuda/amp.py, the same bits).
"""
from __future__ import annotations

import numpy as np


def _on_gpu(a) -> bool:
    from autograd.backend import xp_of

    return not isinstance(a, (np.ndarray, np.generic)) and xp_of(a) is not np


def to_float32(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32 values (exact), same shape."""
    if _on_gpu(bits):
        from autograd.cuda.amp import bfloat16_to_float32

        return bfloat16_to_float32(bits)
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def from_float(values: np.ndarray) -> np.ndarray:
    """float values -> uint16 bfloat16 bit patterns, rounded to nearest, ties to even."""
    if _on_gpu(values):
        from autograd.cuda.amp import to_bfloat16

        return to_bfloat16(values)
    f32 = np.ascontiguousarray(values, dtype=np.float32)
    u = f32.view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(f32)
    if nan.any():  # rounding could carry a NaN's mantissa into the exponent (or sign): pin it
        out[nan] = ((u[nan] >> 16) | np.uint32(0x0040)).astype(np.uint16)
    return out
