"""Mixed precision on the GPU.

Loss-scale unscaling, for nn.amp (its reference: a cast to float32, then a multiply):
    out = float32(g) * inv_scale, and a flag on the device set when any value is inf/NaN,
one kernel per gradient instead of a cast, a multiply and two reductions; the host reads the
flag once for all gradients. g may be float16/32/64 or bfloat16 (uint16 bit patterns).

bfloat16 storage (reference: nn/bfloat16.py): float arrays -> uint16 bit patterns rounded to
nearest, ties to even, and back (exact); f2bf / bf2f of autograd/cuda/_compile.py.
"""
from __future__ import annotations

import numpy as np

from autograd.backend import xp_of
from autograd.cuda._compile import WITH_BFLOAT16, dtype_name, get_kernel, grid_1d, register

_BODY = register("amp", r"""
extern "C" __global__ void unscale_to_float(const T* __restrict__ g, float* __restrict__ out, long long n,
                                            float inv_scale, int* __restrict__ bad) {
    GRID_STRIDE(i, n) {
        float v = (float)LD(g, i) * inv_scale;
        out[i] = v;
        if (!isfinite(v)) bad[0] = 1;      // every writer writes the same value: no atomic needed
    }
}

// a float64 value is rounded to float32 first, as nn.bfloat16.from_float does
extern "C" __global__ void to_bfloat16(const T* __restrict__ x, unsigned short* __restrict__ out,
                                        long long n) {
    GRID_STRIDE(i, n) {
        out[i] = f2bf((float)LD(x, i));
    }
}

extern "C" __global__ void bfloat16_to_float(const unsigned short* __restrict__ b, float* __restrict__ out,
                                             long long n) {
    GRID_STRIDE(i, n) {
        out[i] = bf2f(b[i]);
    }
}
""", WITH_BFLOAT16)


def unscale_to_float32(g, inv_scale: float, flag):
    """float32(g) * inv_scale as a new float32 array of g's shape (g float16/32/64, or uint16
    bfloat16 bit patterns); sets flag[0] = 1 (an int32 device array) when a result is inf or NaN."""
    xp = xp_of(g)
    gc = xp.ascontiguousarray(g)
    out = xp.empty(gc.shape, dtype=np.float32)
    if gc.size:
        k = get_kernel(_BODY, "unscale_to_float", dtype_name(gc, bfloat16=True))
        k(grid_1d(gc.size), (256,), (gc, out, np.int64(gc.size), np.float32(inv_scale), flag))
    return out


def to_bfloat16(x):
    """float16/32/64 array -> a new uint16 array of bfloat16 bit patterns, same shape."""
    xp = xp_of(x)
    xc = xp.ascontiguousarray(x)
    out = xp.empty(xc.shape, dtype=np.uint16)
    if xc.size:
        k = get_kernel(_BODY, "to_bfloat16", dtype_name(xc))
        k(grid_1d(xc.size), (256,), (xc, out, np.int64(xc.size)))
    return out


def bfloat16_to_float32(bits):
    """uint16 array of bfloat16 bit patterns -> a new float32 array of its values (exact), same shape."""
    xp = xp_of(bits)
    bc = xp.ascontiguousarray(bits)
    if bc.dtype != np.uint16:
        raise TypeError(f"bfloat16 bit patterns are uint16, got {bc.dtype}")
    out = xp.empty(bc.shape, dtype=np.float32)
    if bc.size:
        k = get_kernel(_BODY, "bfloat16_to_float", "float32")   # T unused: any prelude
        k(grid_1d(bc.size), (256,), (bc, out, np.int64(bc.size)))
    return out
