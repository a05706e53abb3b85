"""Loss-scale unscaling on the GPU, for nn.amp.DynamicLossScaler.unscale_ (its reference: a cast
to float32, then a multiply):
    out = float32(g) * inv_scale, and a flag on the device set when any value is inf/NaN,
one kernel per gradient instead of a cast, a multiply and two reductions; the host reads the
flag once for all gradients.
"""
from __future__ import annotations

import numpy as np

from autograd.backend import xp_of
from autograd.cuda._compile import dtype_name, get_kernel, grid_1d, register

_BODY = register("amp", r"""
extern "C" __global__ void unscale_to_float(const T* __restrict__ g, float* __restrict__ out, long long n,
                                            float inv_scale, int* __restrict__ bad) {
    GRID_STRIDE(i, n) {
        float v = (float)LD(g, i) * inv_scale;
        out[i] = v;
        if (!isfinite(v)) bad[0] = 1;      // every writer writes the same value: no atomic needed
    }
}
""")


def unscale_to_float32(g, inv_scale: float, flag):
    """float32(g) * inv_scale as a new float32 array of g's shape; sets flag[0] = 1 (an int32
    device array) when a result is inf or NaN."""
    xp = xp_of(g)
    gc = xp.ascontiguousarray(g)
    out = xp.empty(gc.shape, dtype=np.float32)
    if gc.size:
        k = get_kernel(_BODY, "unscale_to_float", dtype_name(gc))
        k(grid_1d(gc.size), (256,), (gc, out, np.int64(gc.size), np.float32(inv_scale), flag))
    return out
