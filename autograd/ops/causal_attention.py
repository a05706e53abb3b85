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
result does not depend on the thread count. P_i is kept transposed, one (B, H, r1, R) array of
P_i^T per query block (q's dtype; a task's entries are a contiguous slice of each): with the keys
down, the softmax's sums reduce over the second-last axis, which NumPy runs across contiguous
rows (faster, for short rows of keys, than along the last axis), and the products read P_i or
P_i^T as BLAS transposes alike. The softmax exponentiates the scores unshifted where they are
in exp's range (_keys_softmax): no max and no subtraction over the scores, which the common
stable form makes. The same numbers as the full
masked attention (autograd/ops/attention.py) up to rounding, which
tests/autograd/test_causal_attention.py checks.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from autograd import parallel
from autograd.backend import acc_dtype
from autograd.function import Function
from autograd.ops.softmax import softmax_array
from autograd.sums import down_sums

MIN_ROWS = 64   # smaller query blocks cost more in calls than they save in products
# The least sum of a query's exponentials that _keys_softmax keeps: above it, what float32's
# subnormals (below e^-87) lose is under e^-87 / e^-60 of a probability.
LOW_SUM = math.exp(-60)


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


def layout(T: int) -> tuple:
    """Query blocks (r0, r1) for T positions: query_rows(T) rows each, or one block of all T
    when T is too short to cut."""
    return _bounds(T, query_rows(T) or T)


@functools.lru_cache(maxsize=16)
def _bounds(T: int, rows: int) -> tuple:
    return tuple((r0, min(T, r0 + rows)) for r0 in range(0, T, rows))


def scores_per_entry(T: int, H: int) -> int:
    """Probabilities one batch entry of H heads keeps (the blocks' (r1 - r0) x r1 each)."""
    return H * sum((r1 - r0) * r1 for r0, r1 in layout(T))


def new_probabilities(lead: tuple, T: int, dtype) -> list:
    """One uninitialised (*lead, r1, r1 - r0) array per query block of layout(T): P_i^T, its keys
    down and its queries across."""
    return [np.empty(lead + (r1, r1 - r0), dtype=dtype) for r0, r1 in layout(T)]


@functools.lru_cache(maxsize=16)
def _corner_bias(rows: int, dtype: str):
    """(rows, rows) of `dtype`, -inf below the diagonal and 0 elsewhere: added to a block's own
    keys x queries corner, it masks the keys after each query (an add is faster than a masked
    copy)."""
    m = np.where(np.tri(rows, k=-1, dtype=bool), -np.inf, 0.0).astype(dtype)
    m.flags.writeable = False
    return m


def entry_forward(q, k, v, scale: float, probs: list, out) -> None:
    """Entries (...) of q, k (..., T, hs), v (..., T, hv) -> out (..., T, hv) (written; may be a
    view), each query block's probabilities into probs (new_probabilities(..., T, ...)), keys
    down and queries across."""
    bounds = layout(q.shape[-2])
    qs = q * q.dtype.type(scale)                                  # (..., T, hs)
    corner = _corner_bias(bounds[0][1] - bounds[0][0], q.dtype.str)
    for (r0, r1), pi in zip(bounds, probs):

        def scores(i=...):                                        # (..., r1, R) into pi[i]
            np.matmul(k[i][..., :r1, :], qs[i][..., r0:r1, :].swapaxes(-1, -2), out=pi[i])
            own = pi[i][..., r0:, :]                              # the block's own keys
            n = r1 - r0
            np.add(own, corner[:n, :n], out=own)

        scores()
        _keys_softmax(pi, scores)                                 # each query sees its own key
        np.matmul(pi.swapaxes(-1, -2), v[..., :r1, :], out=out[..., r0:r1, :])


def _keys_softmax(p, scores) -> None:
    """Softmax over the keys (axis -2) of scores p (..., r1, R) in place, every query seeing a key.

    exp(x) / sum(exp(x)) unshifted: the same probabilities as exp(x - max) / sum(exp(x - max))
    while the exponentials are neither infinite nor tiny. Where a query's sum is not finite (a
    score above exp's range) or falls below LOW_SUM, its block p[i] of one entry and head is
    redone: scores(i) writes its scores into p[i] again, which _stable_keys_softmax then
    normalises query by query, each by its own max."""
    if p.dtype not in (np.float32, np.float64):      # float16's exp overflows at 11
        return _stable_keys_softmax(p)
    with np.errstate(over="ignore", invalid="ignore"):   # an inf or NaN is found in the sums
        np.exp(p, out=p)
        s = down_sums(p)                                               # (..., 1, R)
    bad = ~((s >= LOW_SUM) & (s < np.inf))
    if bad.any():
        for i in map(tuple, np.argwhere(bad.any(axis=(-2, -1)))):
            scores(i)
            _stable_keys_softmax(p[i])
            s[i] = 1
    p /= s


def _stable_keys_softmax(p, scores=None) -> None:
    """Softmax over the keys (axis -2) of p (..., r1, R) in place, each query shifted by its own
    max (the stable form); `scores` is not read: the signature of _keys_softmax, which benchmarks
    and tests swap it for."""
    softmax_array(p, axis=-2, out=p, masked=False)


def entry_backward(g, q, k, v, out, probs: list, scale: float, gq, gk, gv) -> None:
    """Gradients of entry_forward into gq, gk (..., T, hs), gv (..., T, hv) (written; may be
    views); g = dL/dout (..., T, hv)."""
    T = q.shape[-2]
    d = np.vecdot(g, out, dtype=acc_dtype(g.dtype))[..., None, :]      # (..., 1, T): rowsum(g * out)
    # the last block sees every key: it writes dk and dv, the others add to them
    for (r0, r1), pi in reversed(list(zip(layout(T), probs))):         # pi (..., r1, R) = P_i^T
        first, gi = r1 == T, g[..., r0:r1, :]
        _product_into(gv[..., :r1, :], pi, gi, first)
        ds = np.matmul(v[..., :r1, :], gi.swapaxes(-1, -2))            # (..., r1, R) = dP_i^T
        ds -= d[..., r0:r1]
        ds *= pi
        np.matmul(ds.swapaxes(-1, -2), k[..., :r1, :], out=gq[..., r0:r1, :])
        _product_into(gk[..., :r1, :], ds, q[..., r0:r1, :], first)
    s = gq.dtype.type(scale)
    gq *= s
    gk *= s


class CausalAttention(Function):
    """scaled_dot_product_attention(q, k, v, causal=True) by query blocks (module docstring)."""

    def forward(self, q, k, v, scale: float):
        B, H, T, _ = q.shape
        probs = new_probabilities((B, H), T, q.dtype)
        out = np.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)

        def entries(lo, hi):
            entry_forward(q[lo:hi], k[lo:hi], v[lo:hi], scale, [p[lo:hi] for p in probs], out[lo:hi])

        parallel.for_chunks(entries, B, scores_per_entry(T, H), step=1)
        self.q, self.k, self.v, self.probs, self.out, self.scale = q, k, v, probs, out, scale
        return out

    def backward(self, g):
        q, k, v, probs, o = self.q, self.k, self.v, self.probs, self.out
        B, H, T, _ = q.shape
        nq, nk, nv = self.needs_input_grad
        gq, gk, gv = (np.empty_like(a) for a in (q, k, v))

        def entries(lo, hi):
            sl = slice(lo, hi)
            entry_backward(g[sl], q[sl], k[sl], v[sl], o[sl], [p[sl] for p in probs], self.scale,
                           gq[sl], gk[sl], gv[sl])

        parallel.for_chunks(entries, B, H * T * T, step=1)
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
