"""GELU (tanh approximation) on the GPU: an elementwise forward and backward.

Reference: GELUTanh in autograd/ops/activation.py, whose constants GELU_TANH_SCALE and
GELU_TANH_CUBIC the kernels take as arguments (scale, cubic); u = scale (x + cubic x^3), t = tanh(u):
    y  = 0.5 x (1 + t)
    dx = g * (0.5 (1 + t) + 0.5 x (1 - t^2) scale (1 + 3 cubic x^2))
The fused forward saves only x (t is recomputed), one full-size array less than the CPU op.
"""
from __future__ import annotations

import numpy as np

from autograd.backend import acc_dtype, xp_of
from autograd.cuda._compile import dtype_name, get_kernel, grid_1d, register

_BODY = register("activation", r"""
extern "C" __global__ void gelu_fwd(const T* __restrict__ x, T* __restrict__ y, long long n, A scale, A cubic) {
    GRID_STRIDE(i, n) {
        A v = LD(x, i);
        A t = tanh_a(scale * (v + cubic * v * v * v));
        ST(y, i, (A)0.5 * v * ((A)1 + t));
    }
}

extern "C" __global__ void gelu_bwd(const T* __restrict__ g, const T* __restrict__ x, T* __restrict__ gx,
                                    long long n, A scale, A cubic) {
    GRID_STRIDE(i, n) {
        A v = LD(x, i);
        A t = tanh_a(scale * (v + cubic * v * v * v));
        A d = (A)0.5 * ((A)1 + t) + (A)0.5 * v * ((A)1 - t * t) * scale * ((A)1 + (A)3 * cubic * v * v);
        ST(gx, i, LD(g, i) * d);
    }
}
""")


def _constants(dtype, scale: float, cubic: float) -> tuple:
    a = acc_dtype(dtype).type
    return a(scale), a(cubic)


def gelu_forward(node, x, *, scale: float, cubic: float):
    """GELU of x (any shape, float16/32/64) -> a new array of x's shape and dtype; saves x."""
    node.x = x
    xp = xp_of(x)
    xc = xp.ascontiguousarray(x)
    y = xp.empty_like(xc)
    if xc.size:
        get_kernel(_BODY, "gelu_fwd", dtype_name(x))(
            grid_1d(xc.size), (256,), (xc, y, np.int64(xc.size), *_constants(x.dtype, scale, cubic)))
    return y


def gelu_backward(node, g, *, scale: float, cubic: float):
    """(dL/dx,) of x's shape and dtype from g = dL/dy."""
    xp = xp_of(g)
    x = xp.ascontiguousarray(node.x)
    gc = xp.ascontiguousarray(g.astype(x.dtype, copy=False))
    gx = xp.empty_like(x)
    if x.size:
        get_kernel(_BODY, "gelu_bwd", dtype_name(x))(
            grid_1d(x.size), (256,), (gc, x, gx, np.int64(x.size), *_constants(x.dtype, scale, cubic)))
    return (gx,)
