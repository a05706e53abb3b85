"""Cross-entropy on the GPU: a row kernel (one thread block per row of logits) each way.

Reference: autograd/ops/loss.py (the same formulas on arrays). (N, V) logits x, int64 targets t (N,),
m = max(x), s = sum(exp(x - m)) per row, arithmetic in A:
    lse = m + log(s),  loss = lse - x[t]  (0 where ignored)
    dx = (exp(x - lse) - onehot(t)) * scale_row   (scale_row: upstream gradient / count, 0 if ignored)
"""
from __future__ import annotations

import numpy as np

from autograd.backend import acc_dtype, xp_of
from autograd.cuda._compile import block_size_for, dtype_name, get_kernel, register

_BODY = register("loss", r"""
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


# ---- the op's hooks (see autograd.cuda.kernel_op; node: the CrossEntropy instance) -------------
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
