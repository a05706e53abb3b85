"""scaled_dot_product_attention: matmul, masked softmax, matmul in one op with an analytic backward.

Shapes: q (B, H, Tq, hs), k (B, H, Tk, hs), v (B, H, Tk, hv) -> out (B, H, Tq, hv).
    S = scale * q @ k^T            (B, H, Tq, Tk), masked entries set to -inf
    P = softmax(S)                 in place in S's buffer
    out = dropout(P) @ v
Backward, with Pd = dropout(P), g = dL/dout and D = rowsum(g * out) (= rowsum(P * dL/dP),
which needs no (Tq, Tk) temporary):
    dv = Pd^T @ g,  dP = (g @ v^T) * keep / (1 - p),  dS = P * (dP - D),
    dq = scale * dS @ k,  dk = scale * dS^T @ q.
Only P (input dtype), the dropout keep-mask (bool, only when dropout is on) and references to
q, k, v and out are saved. Causal masking is bottom-right aligned: query i may attend key j iff
j <= i + (Tk - Tq), so one decode step against a KV cache (Tq = 1) sees every cached key.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from autograd import backend
from autograd.cuda import attention as kernels
from autograd.cuda import kernel_op
from autograd import parallel
from autograd.backend import acc_dtype, xp_of
from autograd.function import Function
from autograd.ops import causal_attention as _causal
from autograd.ops.softmax import softmax_array


def causal_mask(Tq: int, Tk: int, xp=np):
    """Bool (Tq, Tk), True where query i may attend key j (j <= i + Tk - Tq)."""
    if xp is np:
        return _host_causal_mask(Tq, Tk)
    return xp.tril(xp.ones((Tq, Tk), dtype=bool), k=Tk - Tq)


@functools.lru_cache(maxsize=16)
def _host_causal_mask(Tq: int, Tk: int):
    """causal_mask on the host, built once per (Tq, Tk) and read-only (every forward reads it)."""
    m = np.tril(np.ones((Tq, Tk), dtype=bool), k=Tk - Tq)
    m.flags.writeable = False
    return m


def _scale(q, scale) -> float:
    """The scores' factor: `scale`, or 1 / sqrt(head size) by default."""
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _blocks(q, k) -> bool:
    """Whether attention without dropout or an extra mask runs as blocks of the batch on the
    thread pool (each block is then independent): NumPy arrays with a batch axis to split and
    enough scores for the pool to take them (a decode step's few never are: the blocks would
    only add their bookkeeping)."""
    return (type(q) is np.ndarray and q.ndim > 2 and q.shape[0] > 1
            and q.size // q.shape[-1] * k.shape[-2] >= parallel.MIN_PARALLEL)


# Scores per pool task: fewer make the per-call overhead of small heads count. Two threads that
# both run short NumPy passes queue on the GIL, so fewer, larger tasks win while the entries are
# small.
TASK_SCORES = 6 << 14


def entries_per_task(scores: int) -> int:
    """Batch entries per pool task for entries of `scores` (H x Tq x Tk) scores each."""
    return max(1, -(-TASK_SCORES // max(1, scores)))


def _uniform(shape, dtype, array, generator):
    """Uniform [0, 1) samples of `shape` on `array`'s device, from `generator` or the global one."""
    from autograd import random as _random

    return _random.uniform(shape, dtype=dtype, device=backend.device_of(array), generator=generator)


def _probabilities(q, k, causal: bool, attn_mask, scale: float):
    """softmax(scale * q @ k^T), masked, on arrays: q (..., Tq, hs), k (..., Tk, hs) -> P
    (..., Tq, Tk), in q's dtype."""
    # Scaling q (Tq x hs) is cheaper than scaling the scores (Tq x Tk); the Python float is a
    # weak scalar, so q's dtype is kept.
    s = (q * scale) @ k.swapaxes(-1, -2)                     # (B, H, Tq, Tk)
    Tq = q.shape[-2]
    if not (causal and Tq > 1) and attn_mask is None:        # one query sees every key
        return softmax_array(s, axis=-1, out=s, masked=False)   # in place
    xp = xp_of(q)
    blocked = ~causal_mask(Tq, k.shape[-2], xp) if causal and Tq > 1 else None   # (Tq, Tk)
    if attn_mask is not None:
        blocked = ~attn_mask if blocked is None else (blocked | ~attn_mask)
    xp.copyto(s, s.dtype.type(-np.inf), where=blocked)      # True where attention is not allowed
    return softmax_array(s, axis=-1, out=s, masked=True)


def attention_array(q, k, v, causal: bool = True, scale: float | None = None):
    """Attention without dropout or an extra mask on arrays: q (B, H, Tq, hs), k (B, H, Tk, hs),
    v (B, H, Tk, hv) -> (out (B, H, Tq, hv), P (B, H, Tq, Tk)). The op's forward in that case,
    and a layer's no-graph decode step (nn/arrays.py)."""
    scale = _scale(q, scale)
    if _blocks(q, k):
        return _attention_blocks(q, k, v, causal, scale)
    p = _probabilities(q, k, causal, None, scale)
    return p @ v, p


def _attention_blocks(q, k, v, causal: bool, scale: float):
    """attention_array block by block of the first axis on the pool: a block's scores (its
    (H, Tq, Tk) slice) are masked, normalised and multiplied by v while still in cache."""
    Tq, Tk = q.shape[-2], k.shape[-2]
    blocked = ~causal_mask(Tq, Tk) if causal and Tq > 1 else None
    s = np.empty(q.shape[:-1] + (Tk,), dtype=q.dtype)             # (B, H, Tq, Tk)
    out = np.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)    # (B, H, Tq, hv)
    scale = q.dtype.type(scale)

    def block(lo, hi):
        sb = s[lo:hi]
        np.matmul(q[lo:hi] * scale, k[lo:hi].swapaxes(-1, -2), out=sb)
        if blocked is not None:
            np.copyto(sb, sb.dtype.type(-np.inf), where=blocked)
        softmax_array(sb, axis=-1, out=sb, masked=blocked is not None)
        np.matmul(sb, v[lo:hi], out=out[lo:hi])

    parallel.for_chunks(block, q.shape[0], s[0].size, step=1)   # on the pool when the scores are large
    return out, s


@kernel_op(kernels.forward, kernels.backward)
class ScaledDotProductAttention(Function):
    def forward(self, q, k, v, causal=True, attn_mask=None, dropout_p=0.0, scale=None, generator=None):
        scale = _scale(q, scale)
        self.scale, self.dropout_p = scale, dropout_p
        if attn_mask is None and dropout_p == 0.0:
            out, p = attention_array(q, k, v, causal, scale)
        else:
            p = _probabilities(q, k, causal, attn_mask, scale)
            if dropout_p > 0.0:
                keep = _uniform(p.shape, p.dtype, p, generator) >= dropout_p
                out = xp_of(q).matmul(p * keep, v)               # (B, H, Tq, hv)
                out *= out.dtype.type(1.0 / (1.0 - dropout_p))   # 1/(1-p) on the small side
                self.keep = keep
            else:
                out = xp_of(q).matmul(p, v)                      # (B, H, Tq, hv)
        self.q, self.k, self.v, self.p, self.out = q, k, v, p, out
        return out

    def _backward_blocks(self, g):
        """backward without dropout, block by block of the first axis on the pool."""
        q, k, v, p, o = self.q, self.k, self.v, self.p, self.out
        nq, nk, nv = self.needs_input_grad
        gq = np.empty_like(q) if nq else None
        gk = np.empty_like(k) if nk else None
        gv = np.empty_like(v) if nv else None
        post = p.dtype.type(self.scale)

        def block(lo, hi):
            pb, gb = p[lo:hi], g[lo:hi]
            if nv:
                np.matmul(pb.swapaxes(-1, -2), gb, out=gv[lo:hi])          # (b, H, Tk, hv)
            if not (nq or nk):
                return
            ds = np.matmul(gb, v[lo:hi].swapaxes(-1, -2))                 # (b, H, Tq, Tk)
            ds -= (gb * o[lo:hi]).sum(axis=-1, keepdims=True, dtype=acc_dtype(gb.dtype))   # dP - D
            ds *= pb
            if nq:
                np.matmul(ds, k[lo:hi], out=gq[lo:hi])
                gq[lo:hi] *= post
            if nk:
                np.matmul(ds.swapaxes(-1, -2), q[lo:hi], out=gk[lo:hi])
                gk[lo:hi] *= post

        parallel.for_chunks(block, q.shape[0], p[0].size, step=entries_per_task(p[0].size))
        return gq, gk, gv

    def backward(self, g):
        xp = xp_of(g)
        q, k, v, p = self.q, self.k, self.v, self.p
        if self.dropout_p == 0.0 and type(g) is np.ndarray and self.p.shape[0] > 1:
            return self._backward_blocks(g)
        nq, nk, nv = self.needs_input_grad
        dropout = self.dropout_p > 0.0
        inv_keep = p.dtype.type(1.0 / (1.0 - self.dropout_p)) if dropout else None
        gv = None
        if nv:
            if dropout:
                gv = xp.matmul((p * self.keep).swapaxes(-1, -2), g)   # (B, H, Tk, hv)
                gv *= inv_keep
            else:
                gv = xp.matmul(p.swapaxes(-1, -2), g)            # (B, H, Tk, hv)
        if not (nq or nk):
            return None, None, gv
        # dS = P * (dP - D) with dP = (g @ v^T) * keep / (1 - p). Constant factors (the scale,
        # 1 / (1 - p)) are applied to the (T, hs) results instead of the (Tq, Tk) scores:
        # dS / post = P * ((g @ v^T) * keep - D / inv_keep).
        ds = xp.matmul(g, v.swapaxes(-1, -2))                    # (B, H, Tq, Tk), owned
        d = (g * self.out).sum(axis=-1, keepdims=True, dtype=acc_dtype(g.dtype))   # (B, H, Tq, 1)
        post = self.scale
        if dropout:
            ds *= self.keep
            d /= inv_keep
            post *= float(inv_keep)
        ds -= d                                                  # in place: stays the input dtype
        ds *= p
        post = ds.dtype.type(post)
        gq = gk = None
        if nq:
            gq = xp.matmul(ds, k)                                # (B, H, Tq, hs)
            gq *= post
        if nk:
            gk = xp.matmul(ds.swapaxes(-1, -2), q)               # (B, H, Tk, hs)
            gk *= post
        return gq, gk, gv


def _mask_array(attn_mask: Any, q, Tq: int, Tk: int):
    from autograd.tensor import Tensor

    if isinstance(attn_mask, Tensor):
        attn_mask = attn_mask.data
    xp = q.xp
    if backend.xp_of(attn_mask) is not xp or not hasattr(attn_mask, "dtype"):
        attn_mask = backend.to_device(np.asarray(attn_mask), q.device)
    if attn_mask.dtype != bool:
        raise TypeError(
            f"scaled_dot_product_attention: attn_mask must be boolean (True = may attend), got dtype {attn_mask.dtype}"
        )
    target = tuple(q.shape[:-2]) + (Tq, Tk)
    try:
        fits = np.broadcast_shapes(tuple(attn_mask.shape), target) == target
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"scaled_dot_product_attention: attn_mask of shape {tuple(attn_mask.shape)} does not "
            f"broadcast to the scores' shape {target}"
        )
    return attn_mask


def scaled_dot_product_attention(q, k, v, causal: bool = True, attn_mask: Any = None,
                                 dropout_p: float = 0.0, scale: float | None = None, generator=None):
    """Attention of queries `q` (B, H, Tq, hs) over keys `k` (B, H, Tk, hs) and values `v`
    (B, H, Tk, hv) -> (B, H, Tq, hv), same dtype as `q`.

    `causal`: query i sees key j iff j <= i + (Tk - Tq) (bottom-right aligned). `attn_mask`:
    bool, broadcastable to (B, H, Tq, Tk), True where attending is allowed; combined with the
    causal mask. A query row with no allowed key outputs zeros. `dropout_p`: dropout on the
    attention probabilities (training only: pass 0.0 in eval), drawn from `generator` or the
    global generator. `scale` defaults to 1/sqrt(hs).
    """
    name = "scaled_dot_product_attention"
    for label, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim < 2:
            raise ValueError(f"{name}: {label} must have shape (..., T, head_size), got {tuple(t.shape)}")
        if t.dtype.kind != "f":
            raise TypeError(f"{name}: {label} must be floating point, got dtype {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{name}: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.xp is k.xp is v.xp):
        raise RuntimeError(f"{name}: q, k, v on different devices ({q.device}, {k.device}, {v.device})")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"{name}: expected q (B, H, Tq, hs), k (B, H, Tk, hs), v (B, H, Tk, hv), got q "
            f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{name}: dropout_p must be in [0, 1), got {dropout_p}")
    if _causal.applies(q.data, k.data, causal, attn_mask, dropout_p):   # training on the CPU
        return _causal.causal_attention(q, k, v, _scale(q, scale))
    Tq, Tk = q.shape[-2], k.shape[-2]
    mask = None if attn_mask is None else _mask_array(attn_mask, q, Tq, Tk)
    return ScaledDotProductAttention.apply(
        q, k, v, causal=bool(causal), attn_mask=mask, dropout_p=float(dropout_p), scale=scale,
        generator=generator,
    )
