"""Row kernels for softmax, log_softmax and cross-entropy: one thread block per row.

Layout: the reduced axis is made the last and contiguous, so the input is (N, C) row-major.
Each block reads its row a few times (max, sum of exponentials, write) with the row staying
in L1/L2; arithmetic is in A (float32 for float16/float32 inputs, float64 for float64).
References: autograd/ops/softmax.py and autograd/ops/loss.py (the same formulas on arrays).
    softmax      y = exp(x - m) / s            dx = y * (g - sum(g * y))
    log_softmax  y = x - m - log(s)            dx = g - exp(y) * sum(g)
    cross-entropy (N, V) logits, int64 targets (N,):
        lse = m + log(s),  loss = lse - x[t]  (0 where ignored)
        dx = (exp(x - lse) - onehot(t)) * scale_row   (scale_row: upstream gradient / count, 0 if ignored)
"""
from __future__ import annotations

import numpy as np

from autograd.backend import acc_dtype, xp_of
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

extern "C" __global__ void xent_fwd(const T* __restrict__ x, const long long* __restrict__ t, A* __restrict__ lse,
                                    A* __restrict__ loss, long long V, long long ignore_index) {
    __shared__ A red[32];
    long long row = blockIdx.x;
    const T* xr = x + row * V;
    A m = NEG_INF;
    for (long long i = threadIdx.x; i < V; i += blockDim.x) m = max_a(m, LD(xr, i));
    m = block_max(m, red);
    A s = 0;
    for (long long i = threadIdx.x; i < V; i += blockDim.x) s += exp_a(LD(xr, i) - m);
    s = block_sum(s, red);
    if (threadIdx.x == 0) {
        A l = m + log_a(s);
        long long ti = t[row];
        lse[row] = l;
        loss[row] = (ti == ignore_index) ? (A)0 : l - LD(xr, ti);
    }
}

extern "C" __global__ void xent_bwd(const T* __restrict__ x, const long long* __restrict__ t,
                                    const A* __restrict__ lse, const A* __restrict__ scale,
                                    T* __restrict__ gx, long long V) {
    long long row = blockIdx.x;
    const T* xr = x + row * V;
    T* gr = gx + row * V;
    A l = lse[row], sc = scale[row];
    long long ti = t[row];
    for (long long i = threadIdx.x; i < V; i += blockDim.x) {
        A p = exp_a(LD(xr, i) - l) - (i == ti ? (A)1 : (A)0);
        ST(gr, i, p * sc);
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


def cross_entropy_forward(node, x, targets, ignore_index: int, reduction: str):
    """Fused cross-entropy forward on the GPU; same results and saved state as the array op."""
    xp = xp_of(x)
    V = x.shape[-1]
    x2 = xp.ascontiguousarray(x.reshape(-1, V))                     # (N, V)
    t = xp.ascontiguousarray(targets.reshape(-1).astype(np.int64, copy=False))
    N = x2.shape[0]
    acc = acc_dtype(x.dtype)
    lse = xp.empty((N,), dtype=acc)
    losses = xp.empty((N,), dtype=acc)
    if N:
        k = get_kernel(_BODY, "xent_fwd", dtype_name(x))
        k((N,), (block_size_for(V),), (x2, t, lse, losses, np.int64(V), np.int64(ignore_index)))
    valid = t != ignore_index
    node.x2, node.t, node.lse, node.valid = x2, t, lse, valid
    node.shape, node.reduction = x.shape, reduction
    if reduction == "none":
        return losses.astype(x.dtype).reshape(targets.shape)
    total = losses.sum()
    if reduction == "sum":
        return total.astype(x.dtype)
    node.count = valid.sum().astype(acc)
    return (total / node.count).astype(x.dtype)                    # NaN when all are ignored


def cross_entropy_backward(node, g):
    xp = xp_of(g)
    x2, valid = node.x2, node.valid
    acc = node.lse.dtype
    g = g.astype(acc, copy=False)
    if node.reduction == "none":
        scale = g.reshape(-1) * valid
    elif node.reduction == "sum":
        scale = xp.where(valid, g, 0)
    else:
        scale = xp.where(valid, g / node.count, 0)
    scale = xp.ascontiguousarray(scale.astype(acc, copy=False))
    gx = xp.empty_like(x2)
    N, V = x2.shape
    if N:
        k = get_kernel(_BODY, "xent_bwd", dtype_name(x2))
        k((N,), (block_size_for(V),), (x2, node.t, node.lse, scale, gx, np.int64(V)))
    return gx.reshape(node.shape), None
