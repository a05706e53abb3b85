"""Row kernels for softmax and log_softmax: one thread block per row.

Layout: the reduced axis is made the last and contiguous, so the input is (N, C) row-major.
Each block reads its row a few times (max, sum of exponentials, write) with the row staying
in L1/L2; arithmetic is in A (float32 for float16/float32 inputs, float64 for float64).
Reference: autograd/ops/softmax.py (the same formulas on arrays); m = max(x), s = sum(exp(x - m)):
    softmax      y = exp(x - m) / s            dx = y * (g - sum(g * y))
    log_softmax  y = x - m - log(s)            dx = g - exp(y) * sum(g)
"""
from __future__ import annotations

import numpy as np

from autograd.backend import xp_of
from autograd.cuda._compile import block_size_for, dtype_name, get_kernel, register

_BODY = register("softmax", r"""
extern "C" __global__ void softmax_fwd(const T* __restrict__ x, T* __restrict__ y, long long C, int log_mode) {
    __shared__ A red[32];
    const T* xr = x + (long long)blockIdx.x * C;
    T* yr = y + (long long)blockIdx.x * C;
    A m = NEG_INF;
    for (long long i = threadIdx.x; i < C; i += blockDim.x) m = max_a(m, LD(xr, i));
    m = block_max(m, red);
    if (!log_mode && !(m > NEG_INF)) {           // a fully masked row: zeros, as the CPU op gives
        for (long long i = threadIdx.x; i < C; i += blockDim.x) ST(yr, i, 0);
        return;
    }
    A s = 0;
    for (long long i = threadIdx.x; i < C; i += blockDim.x) s += exp_a(LD(xr, i) - m);
    s = block_sum(s, red);
    if (log_mode) {
        A shift = m + log_a(s);
        for (long long i = threadIdx.x; i < C; i += blockDim.x) ST(yr, i, LD(xr, i) - shift);
    } else {
        A inv = (A)1 / s;
        for (long long i = threadIdx.x; i < C; i += blockDim.x) ST(yr, i, exp_a(LD(xr, i) - m) * inv);
    }
}

extern "C" __global__ void softmax_bwd(const T* __restrict__ g, const T* __restrict__ y, T* __restrict__ gx,
                                       long long C, int log_mode) {
    __shared__ A red[32];
    long long base = (long long)blockIdx.x * C;
    A s = 0;
    if (log_mode) {
        for (long long i = threadIdx.x; i < C; i += blockDim.x) s += LD(g, base + i);
    } else {
        for (long long i = threadIdx.x; i < C; i += blockDim.x) s += LD(g, base + i) * LD(y, base + i);
    }
    s = block_sum(s, red);
    for (long long i = threadIdx.x; i < C; i += blockDim.x) {
        A gi = LD(g, base + i), yi = LD(y, base + i);
        ST(gx, base + i, log_mode ? gi - exp_a(yi) * s : yi * (gi - s));
    }
}
""")


def _rows(x, axis: int):
    """x with `axis` moved last, contiguous, viewed as (N, C)."""
    xp = xp_of(x)
    xm = xp.ascontiguousarray(xp.moveaxis(x, axis, -1)) if axis not in (-1, x.ndim - 1) else xp.ascontiguousarray(x)
    C = xm.shape[-1] if xm.ndim else 1
    return xm, xm.reshape(-1, C)


def softmax_rows(x, axis: int = -1, log: bool = False):
    """softmax (or log_softmax) of array `x` along `axis`, same shape and dtype."""
    xp = xp_of(x)
    xm, x2 = _rows(x, axis)
    y2 = xp.empty_like(x2)
    N, C = x2.shape
    if N and C:
        k = get_kernel(_BODY, "softmax_fwd", dtype_name(x))
        k((N,), (block_size_for(C),), (x2, y2, np.int64(C), np.int32(log)))
    y = y2.reshape(xm.shape)
    return y if axis in (-1, x.ndim - 1) else xp.moveaxis(y, -1, axis)


def softmax_rows_backward(g, y, axis: int = -1, log: bool = False):
    """Gradient of softmax (log_softmax) from its output `y` and upstream gradient `g`."""
    xp = xp_of(g)
    gm, g2 = _rows(g.astype(y.dtype, copy=False), axis)
    _, y2 = _rows(y, axis)
    gx2 = xp.empty_like(g2)
    N, C = g2.shape
    if N and C:
        k = get_kernel(_BODY, "softmax_bwd", dtype_name(y))
        k((N,), (block_size_for(C),), (g2, y2, gx2, np.int64(C), np.int32(log)))
    gx = gx2.reshape(gm.shape)
    return gx if axis in (-1, y.ndim - 1) else xp.moveaxis(gx, -1, axis)


# ---- the ops' hooks (see autograd.cuda.kernel_op; node: the Function instance) ---------------
def softmax_forward(node, x, axis: int = -1, log: bool = False):
    node.axis = axis
    node.y = softmax_rows(x, axis, log)
    return node.y


def softmax_backward(node, g, log: bool = False):
    return (softmax_rows_backward(g, node.y, node.axis, log),)
