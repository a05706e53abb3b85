"""One pre-norm transformer block written by hand in plain NumPy, forward and manual backward.

This is the floor for any NumPy-based engine: the same matmuls, the same elementwise math,
in-place updates wherever an array is owned, and only what the backward needs is kept. Sums
over an axis are BLAS products with a vector of ones (NumPy's reductions over short rows or
down columns are 3-4x slower), as a careful hand-written version would do them.
    h1 = LN1(x);  a = proj(attention(qkv(h1)));  x1 = x + a
    h2 = LN2(x1); m = fc2(gelu_tanh(fc1(h2)));   out = x1 + m
Shapes: x (B, T, C); weights stored (in, out) so that y = x @ W + b; N = B * T rows.
"""
from __future__ import annotations

import math

import numpy as np

_GELU_C = math.sqrt(2.0 / math.pi)


def init_params(C: int, rng: np.random.Generator, dtype=np.float32) -> dict[str, np.ndarray]:
    def w(n_in, n_out):
        return (rng.standard_normal((n_in, n_out)) * 0.02).astype(dtype)

    def vec(n, base=0.0):
        return (base + 0.02 * rng.standard_normal(n)).astype(dtype)

    return {
        "ln1_w": vec(C, 1.0), "ln1_b": vec(C), "attn_w": w(C, 3 * C), "attn_b": vec(3 * C),
        "proj_w": w(C, C), "proj_b": vec(C), "ln2_w": vec(C, 1.0), "ln2_b": vec(C),
        "fc_w": w(C, 4 * C), "fc_b": vec(4 * C), "fc2_w": w(4 * C, C), "fc2_b": vec(C),
    }


def _ones(n: int, dtype) -> np.ndarray:
    return np.ones(n, dtype=dtype)


def _row_means(a):
    """a (N, C) -> (N, 1): the mean of each row, as one BLAS product."""
    return (a @ _ones(a.shape[-1], a.dtype))[:, None] * (1.0 / a.shape[-1])


def _col_sums(a):
    """a (N, C) -> (C,): the sum of each column, as one BLAS product."""
    return _ones(a.shape[0], a.dtype) @ a


def _ln_fwd(x, w, b, eps=1e-5):
    xc = x - _row_means(x)
    rstd = np.vecdot(xc, xc)[:, None]
    rstd *= 1.0 / x.shape[-1]
    rstd += eps
    np.sqrt(rstd, out=rstd)
    np.reciprocal(rstd, out=rstd)
    xc *= rstd                                   # xhat
    y = xc * w
    y += b
    return y, (xc, rstd)


def _ln_bwd(dy, cache, w):
    xhat, rstd = cache
    t = dy * xhat
    dw = _col_sums(t)
    db = _col_sums(dy)
    dxhat = dy * w
    c2 = ((t @ w) * (1.0 / w.size))[:, None]    # mean(dxhat * xhat) per row
    c1 = ((dy @ w) * (1.0 / w.size))[:, None]   # mean(dxhat) per row
    np.multiply(xhat, c2, out=t)
    dxhat -= t
    dxhat -= c1
    dxhat *= rstd
    return dxhat, dw, db


def _gelu_fwd(u):
    t = u * u
    t *= 0.044715
    t += 1.0
    t *= u
    t *= _GELU_C
    np.tanh(t, out=t)
    y = t + 1.0
    y *= u
    y *= 0.5
    return y, t


def _gelu_bwd(dy, u, t):
    # d/du = a (1 + u z' (1 - t)), a = 0.5 (1 + t), z' = c (1 + 3 * 0.044715 u^2)
    d = u * u
    d *= 3 * 0.044715 * _GELU_C
    d += _GELU_C
    d *= u
    s = t * d
    d -= s
    d += 1.0
    np.add(t, 1.0, out=s)
    s *= 0.5
    d *= s
    d *= dy
    return d


def _query_blocks(T: int) -> list:
    """Query rows (r0, r1) per block: 64 rows from T = 128 on (what the engine's causal attention
    cuts), else one block. Block i needs keys 0..r1-1 only: the floor skips the masked half too."""
    rows = max(64, T // 8) if T >= 128 else T
    return [(r0, min(T, r0 + rows)) for r0 in range(0, T, rows)]


def _attention_fwd(q, k, v, scale):
    """Causal softmax(q k^T * scale) v by query blocks -> (y (B, H, T, hs), [P_i (B, H, R, r1)])."""
    T = q.shape[2]
    y = np.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    probs = []
    for r0, r1 in _query_blocks(T):
        s = q[:, :, r0:r1] @ k[:, :, :r1].transpose(0, 1, 3, 2)   # (B, H, R, r1)
        s *= scale
        np.copyto(s[..., r0:], -np.inf, where=np.triu(np.ones((r1 - r0, r1 - r0), dtype=bool), k=1))
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= (s @ _ones(r1, s.dtype))[..., None]
        np.matmul(s, v[:, :, :r1], out=y[:, :, r0:r1])
        probs.append(s)
    return y, probs


def _attention_bwd(dy, q, k, v, y, probs, scale, dq, dk, dv):
    """Gradients of _attention_fwd into dq, dk, dv (B, H, T, hs) (views of one dqkv buffer)."""
    dd = np.vecdot(dy, y)[..., None]                      # (B, H, T, 1)
    dk[...] = 0
    dv[...] = 0
    for (r0, r1), att in zip(_query_blocks(q.shape[2]), probs):
        dyi = dy[:, :, r0:r1]
        dv[:, :, :r1] += att.transpose(0, 1, 3, 2) @ dyi
        datt = dyi @ v[:, :, :r1].transpose(0, 1, 3, 2)     # (B, H, R, r1)
        datt -= dd[:, :, r0:r1]
        datt *= att
        datt *= scale
        np.matmul(datt, k[:, :, :r1], out=dq[:, :, r0:r1])
        dk[:, :, :r1] += datt.transpose(0, 1, 3, 2) @ q[:, :, r0:r1]


def forward_backward(x, p, dout, n_head):
    """Run the block on x (B, T, C); return (out, grads) with grads[name] for x and each param."""
    B, T, C = x.shape
    N, hs = B * T, C // n_head
    scale = 1.0 / math.sqrt(hs)
    x2 = x.reshape(N, C)
    # ---- forward
    h1, ln1 = _ln_fwd(x2, p["ln1_w"], p["ln1_b"])
    qkv = h1 @ p["attn_w"]
    qkv += p["attn_b"]
    q, k, v = (qkv.reshape(B, T, 3, n_head, hs)[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B, H, T, hs)
    y, att = _attention_fwd(q, k, v, scale)              # (B, H, T, hs), saved probabilities
    y2 = y.transpose(0, 2, 1, 3).reshape(N, C)          # copy: (N, C)
    a = y2 @ p["proj_w"]
    a += p["proj_b"]
    a += x2                                              # x1 = x + a
    x1 = a
    h2, ln2 = _ln_fwd(x1, p["ln2_w"], p["ln2_b"])
    u = h2 @ p["fc_w"]
    u += p["fc_b"]
    g, t = _gelu_fwd(u)
    m = g @ p["fc2_w"]
    m += p["fc2_b"]
    m += x1
    out = m.reshape(B, T, C)
    # ---- backward
    grads = {}
    d = dout.reshape(N, C)
    grads["fc2_w"] = g.T @ d
    grads["fc2_b"] = _col_sums(d)
    dg = d @ p["fc2_w"].T
    del g
    du = _gelu_bwd(dg, u, t)
    del dg, u, t
    grads["fc_w"] = h2.T @ du
    grads["fc_b"] = _col_sums(du)
    dh2 = du @ p["fc_w"].T
    del du, h2
    dx1, grads["ln2_w"], grads["ln2_b"] = _ln_bwd(dh2, ln2, p["ln2_w"])
    del dh2, ln2
    dx1 += d                                             # residual
    grads["proj_w"] = y2.T @ dx1
    grads["proj_b"] = _col_sums(dx1)
    dy2 = dx1 @ p["proj_w"].T
    del y2
    dy = dy2.reshape(B, T, n_head, hs).transpose(0, 2, 1, 3)   # (B, H, T, hs) view
    dqkv = np.empty((B, T, 3, n_head, hs), dtype=x.dtype)
    dq, dk, dv = (dqkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))   # (B, H, T, hs) views
    _attention_bwd(dy, q, k, v, y, att, scale, dq, dk, dv)
    del att, y, dy2, dy
    dqkv2 = dqkv.reshape(N, 3 * C)
    grads["attn_w"] = h1.T @ dqkv2
    grads["attn_b"] = _col_sums(dqkv2)
    dh1 = dqkv2 @ p["attn_w"].T
    del dqkv, dqkv2, h1, qkv
    dx, grads["ln1_w"], grads["ln1_b"] = _ln_bwd(dh1, ln1, p["ln1_w"])
    dx += dx1
    grads["x"] = dx.reshape(B, T, C)
    return out, grads


def matmul_flops(B: int, T: int, C: int, n_head: int) -> int:
    """Matmul FLOPs (2 M N K each) of one forward of the block, counting the full T x T attention
    (the causal blocks skip part of it; GFLOP/s are quoted on this nominal count)."""
    N, hs = B * T, C // n_head
    linear = 2 * N * C * (3 * C) + 2 * N * C * C + 2 * N * C * (4 * C) * 2
    attention = 2 * (2 * B * n_head * T * T * hs)
    return linear + attention
