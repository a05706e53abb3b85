"""layer_norm and rms_norm on the GPU: a row kernel forward, a row kernel for dx and a column
kernel for the weight and bias gradients. Reference: autograd/ops/norm.py.

x is (N, C) row-major. The forward saves x itself (the caller keeps it anyway), and per row the
mean (0 for rms_norm) and rstd = 1/sqrt(var + eps) in A; the backward recomputes
xhat = (x - mean) * rstd instead of storing an (N, C) xhat.
    dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)),   gh = g * w   (rms_norm: no mean(gh))
    dw = sum over rows of g * xhat,   db = sum over rows of g
dw/db: blocks of 32 columns x 8 row-threads each sum a slab of rows into (slabs, C) partials,
which one small reduction adds up.
"""
from __future__ import annotations

import numpy as np

from autograd.backend import acc_dtype, xp_of
from autograd.cuda._compile import block_size_for, dtype_name, get_kernel, register

_BODY = register("norm", r"""
extern "C" __global__ void norm_fwd(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                    T* __restrict__ y, A* __restrict__ mean_out, A* __restrict__ rstd_out,
                                    long long C, A eps, int has_w, int has_b, int centered) {
    __shared__ A red[32];
    long long base = (long long)blockIdx.x * C;
    A mean = 0;
    if (centered) {
        A s = 0;
        for (long long i = threadIdx.x; i < C; i += blockDim.x) s += LD(x, base + i);
        mean = block_sum(s, red) / (A)C;
    }
    A ss = 0;
    for (long long i = threadIdx.x; i < C; i += blockDim.x) { A d = LD(x, base + i) - mean; ss += d * d; }
    A var = block_sum(ss, red) / (A)C;
    A rstd = (A)1 / sqrt_a(var + eps);
    for (long long i = threadIdx.x; i < C; i += blockDim.x) {
        A v = (LD(x, base + i) - mean) * rstd;
        if (has_w) v *= LD(w, i);
        if (has_b) v += LD(b, i);
        ST(y, base + i, v);
    }
    if (threadIdx.x == 0) { mean_out[blockIdx.x] = mean; rstd_out[blockIdx.x] = rstd; }
}

extern "C" __global__ void norm_bwd_dx(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                                       const A* __restrict__ mean_in, const A* __restrict__ rstd_in,
                                       T* __restrict__ dx, long long C, int has_w, int centered) {
    __shared__ A red[32];
    long long base = (long long)blockIdx.x * C;
    A mean = mean_in[blockIdx.x], rstd = rstd_in[blockIdx.x];
    A s1 = 0, s2 = 0;
    for (long long i = threadIdx.x; i < C; i += blockDim.x) {
        A gh = LD(g, base + i);
        if (has_w) gh *= LD(w, i);
        A xh = (LD(x, base + i) - mean) * rstd;
        s1 += gh;
        s2 += gh * xh;
    }
    s1 = block_sum(s1, red) / (A)C;
    s2 = block_sum(s2, red) / (A)C;
    if (!centered) s1 = 0;
    for (long long i = threadIdx.x; i < C; i += blockDim.x) {
        A gh = LD(g, base + i);
        if (has_w) gh *= LD(w, i);
        A xh = (LD(x, base + i) - mean) * rstd;
        ST(dx, base + i, rstd * (gh - s1 - xh * s2));
    }
}

// grid (ceil(C / 32), slabs), block (32, 8): partial sums of g * xhat and g over a slab of rows.
extern "C" __global__ void norm_bwd_dwdb(const T* __restrict__ g, const T* __restrict__ x,
                                         const A* __restrict__ mean_in, const A* __restrict__ rstd_in,
                                         A* __restrict__ dw_part, A* __restrict__ db_part,
                                         long long N, long long C, long long rows_per_slab) {
    __shared__ A sw[8][33];
    __shared__ A sb[8][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    long long col = (long long)blockIdx.x * 32 + tx;
    long long r0 = (long long)blockIdx.y * rows_per_slab;
    long long r1 = r0 + rows_per_slab < N ? r0 + rows_per_slab : N;
    A aw = 0, ab = 0;
    if (col < C) {
        for (long long r = r0 + ty; r < r1; r += 8) {
            A gv = LD(g, r * C + col);
            aw += gv * (LD(x, r * C + col) - mean_in[r]) * rstd_in[r];
            ab += gv;
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && col < C) {
        for (int k = 1; k < 8; k++) { aw += sw[k][tx]; ab += sb[k][tx]; }
        dw_part[(long long)blockIdx.y * C + col] = aw;
        db_part[(long long)blockIdx.y * C + col] = ab;
    }
}
""")


def _ptr_or_null(a, xp, dtype):
    return a if a is not None else xp.empty((1,), dtype=dtype)


def norm_forward(node, x, *params, eps: float, has_w: bool = False, has_b: bool = False,
                 centered: bool = True):
    """Fused layer_norm (centered) or rms_norm forward of x (..., C) with the optional weight and
    bias in `params`; saves x, w, mean, rstd on `node`."""
    xp = xp_of(x)
    w = params[0] if has_w else None
    b = params[-1] if has_b else None
    C = x.shape[-1]
    x2 = xp.ascontiguousarray(x.reshape(-1, C))
    N = x2.shape[0]
    dt = dtype_name(x)
    acc = acc_dtype(x.dtype)
    wk = xp.ascontiguousarray(w.astype(x.dtype, copy=False)) if w is not None else None
    bk = xp.ascontiguousarray(b.astype(x.dtype, copy=False)) if b is not None else None
    y = xp.empty_like(x2)
    mean = xp.empty((N,), dtype=acc)
    rstd = xp.empty((N,), dtype=acc)
    if N and C:
        k = get_kernel(_BODY, "norm_fwd", dt)
        k((N,), (block_size_for(C, 512),),
          (x2, _ptr_or_null(wk, xp, x.dtype), _ptr_or_null(bk, xp, x.dtype), y, mean, rstd,
           np.int64(C), acc.type(eps), np.int32(w is not None), np.int32(b is not None), np.int32(centered)))
    node.x2, node.wk, node.mean, node.rstd = x2, wk, mean, rstd
    node.shape = x.shape
    node.has_w, node.has_b = has_w, has_b
    node.w_dtype = w.dtype if w is not None else None
    node.b_dtype = b.dtype if b is not None else None
    return y.reshape(x.shape)


def norm_backward(node, g, centered: bool = True):
    """(dx, [dw], [db]) in the order of the op's inputs, None where not needed."""
    xp = xp_of(g)
    x2, wk, mean, rstd = node.x2, node.wk, node.mean, node.rstd
    N, C = x2.shape
    dt = dtype_name(x2)
    acc = mean.dtype
    g2 = xp.ascontiguousarray(g.astype(x2.dtype, copy=False).reshape(N, C))
    needs = node.needs_input_grad
    i_w = 1 if node.has_w else None
    i_b = 1 + node.has_w if node.has_b else None
    grads = [None] * len(needs)
    if needs[0] and N and C:
        dx = xp.empty_like(x2)
        k = get_kernel(_BODY, "norm_bwd_dx", dt)
        k((N,), (block_size_for(C, 512),),
          (g2, x2, _ptr_or_null(wk, xp, x2.dtype), mean, rstd, dx, np.int64(C),
           np.int32(wk is not None), np.int32(centered)))
        grads[0] = dx.reshape(node.shape)
    elif needs[0]:
        grads[0] = xp.zeros(node.shape, dtype=x2.dtype)
    want_w = i_w is not None and needs[i_w]
    want_b = i_b is not None and needs[i_b]
    if want_w or want_b:
        rows_per_slab = 64
        slabs = max(1, min(1024, -(-N // rows_per_slab)))
        rows_per_slab = max(1, -(-N // slabs))
        dw_part = xp.zeros((slabs, C), dtype=acc)
        db_part = xp.zeros((slabs, C), dtype=acc)
        if N and C:
            k = get_kernel(_BODY, "norm_bwd_dwdb", dt)
            k((-(-C // 32), slabs), (32, 8),
              (g2, x2, mean, rstd, dw_part, db_part, np.int64(N), np.int64(C), np.int64(rows_per_slab)))
        if want_w:
            grads[i_w] = dw_part.sum(axis=0).astype(node.w_dtype)
        if want_b:
            grads[i_b] = db_part.sum(axis=0).astype(node.b_dtype)
    return tuple(grads)
