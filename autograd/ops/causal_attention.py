"""Causal self-attention on the CPU by blocks of queries: keys a block cannot see are never touched.

Shapes: q, k (B, H, T, hs), v (B, H, T, hv) -> out (B, H, T, hv), queries and keys the same T
positions (training, a prompt without a cache). Query block i holds rows r0..r1-1 and sees keys
0..r1-1 only, so with n blocks the products, the softmax and the saved probabilities cover
(n + 1) / 2n of the T x T scores (T = 256 in blocks of 64: 62%). Per block, with s = scale:
    P_i = softmax(s * q_i @ k[:r1]^T)           (H, R, r1), the diagonal R x R corner masked
    out_i = P_i @ v[:r1]
Backward, g = dL/dout, D = rowsum(g * out):
    dv[:r1] += P_i^T @ g_i,  dS_i = P_i * (g_i @ v[:r1]^T - D_i),
    dq_i = s * dS_i @ k[:r1],  dk[:r1] += s * dS_i^T @ q_i
Each batch entry is one task on autograd.parallel's pool, its blocks in a fixed order, so the
result does not depend on the thread count. The P_i of one batch entry lie one after another in
one flat buffer (float dtype of q). The same numbers as the full masked attention
(autograd/ops/attention.py) up to rounding, which tests/autograd/test_causal_attention.py checks.
"""
from __future__ import annotations

import functools

import numpy as np

from autograd import parallel
from autograd.backend import acc_dtype
from autograd.function import Function
from autograd.ops.softmax import softmax_array

MIN_ROWS = 64   # smaller query blocks cost more in calls than they save in products


def query_rows(T: int) -> int:
    """Rows per query block for T positions: about T / 8, at least MIN_ROWS; 0 when T has too
    few positions for two blocks."""
    rows = max(MIN_ROWS, T // 8)
    return rows if T >= 2 * rows else 0


def applies(q, k, causal: bool, attn_mask, dropout_p: float) -> bool:
    """Whether attention of these operands runs here: causal, no extra mask or dropout, NumPy
    4-D float arrays with as many queries as keys, enough of them for two blocks."""
    return (causal and attn_mask is None and dropout_p == 0.0 and type(q) is np.ndarray
            and q.ndim == 4 and q.dtype.kind == "f" and q.shape[-2] == k.shape[-2]
            and query_rows(q.shape[-2]) > 0)


@functools.lru_cache(maxsize=8)
def _layout(T: int, rows: int):
    """(bounds [(r0, r1)], offsets into one head's flat P, its length) for T positions."""
    bounds = [(r0, min(T, r0 + rows)) for r0 in range(0, T, rows)]
    offsets, total = [], 0
    for r0, r1 in bounds:
        offsets.append(total)
        total += (r1 - r0) * r1
    return bounds, offsets, total


@functools.lru_cache(maxsize=8)
def _corner(rows: int):
    """Bool (rows, rows), True above the diagonal: the keys of a block's own rows it may not see."""
    m = np.triu(np.ones((rows, rows), dtype=bool), k=1)
    m.flags.writeable = False
    return m


class CausalAttention(Function):
    """scaled_dot_product_attention(q, k, v, causal=True) by query blocks (module docstring)."""

    def forward(self, q, k, v, scale: float):
        B, H, T, _ = q.shape
        rows = query_rows(T)
        bounds, offsets, total = _layout(T, rows)
        p = np.empty((B, H * total), dtype=q.dtype)           # per batch entry: every P_i, flat
        out = np.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
        s, corner = q.dtype.type(scale), _corner(rows)

        def entry(lo, hi):
            for b in range(lo, hi):
                qb, kt, vb = q[b] * s, k[b].swapaxes(-1, -2), v[b]   # (H, T, hs), (H, hs, T), (H, T, hv)
                for (r0, r1), off in zip(bounds, offsets):
                    pi = p[b, H * off:H * (off + (r1 - r0) * r1)].reshape(H, r1 - r0, r1)
                    np.matmul(qb[:, r0:r1], kt[:, :, :r1], out=pi)
                    n = r1 - r0
                    np.copyto(pi[:, :, r0:], pi.dtype.type(-np.inf), where=corner[:n, :n])
                    softmax_array(pi, axis=-1, out=pi, masked=False)   # each row sees its own key
                    np.matmul(pi, vb[:, :r1], out=out[b, :, r0:r1])

        parallel.for_chunks(entry, B, H * total, step=1)
        self.q, self.k, self.v, self.p, self.out, self.scale = q, k, v, p, out, scale
        return out

    def backward(self, g):
        q, k, v, p, o = self.q, self.k, self.v, self.p, self.out
        B, H, T, _ = q.shape
        rows = query_rows(T)
        bounds, offsets, _ = _layout(T, rows)
        nq, nk, nv = self.needs_input_grad
        gq, gk, gv = (np.empty_like(a) for a in (q, k, v))
        s = q.dtype.type(self.scale)

        def entry(lo, hi):
            for b in range(lo, hi):
                gb, vb, kb, qb = g[b], v[b], k[b], q[b]
                d = (gb * o[b]).sum(axis=-1, keepdims=True, dtype=acc_dtype(gb.dtype))   # (H, T, 1)
                # the last block sees every key: it writes dk and dv, the others add to them
                for (r0, r1), off in reversed(list(zip(bounds, offsets))):
                    pi = p[b, H * off:H * (off + (r1 - r0) * r1)].reshape(H, r1 - r0, r1)
                    gi, first = gb[:, r0:r1], r1 == T
                    _product_into(gv[b, :, :r1], pi.swapaxes(-1, -2), gi, first)
                    ds = np.matmul(gi, vb[:, :r1].swapaxes(-1, -2))               # (H, R, r1)
                    ds -= d[:, r0:r1]
                    ds *= pi
                    np.matmul(ds, kb[:, :r1], out=gq[b, :, r0:r1])
                    _product_into(gk[b, :, :r1], ds.swapaxes(-1, -2), qb[:, r0:r1], first)
                gq[b] *= s
                gk[b] *= s

        parallel.for_chunks(entry, B, H * T * T, step=1)
        return gq if nq else None, gk if nk else None, gv if nv else None


def _product_into(dst, a, b, first: bool) -> None:
    """dst = a @ b when `first`, else dst += a @ b."""
    if first:
        np.matmul(a, b, out=dst)
    else:
        dst += np.matmul(a, b)


def causal_attention(q, k, v, scale: float):
    """q, k (B, H, T, hs), v (B, H, T, hv) Tensors (see `applies`) -> (B, H, T, hv) Tensor."""
    return CausalAttention.apply(q, k, v, scale=float(scale))
