"""causal_self_attention: a GPT attention sublayer (fused q, k, v projection, causal attention,
output projection) in one op on the CPU, by groups of batch entries.

Shapes: x (B, T, C), w_qkv (C, 3C), b_qkv (3C,), w_out (C, C), b_out (C,) -> (B, T, C); H heads
of hs = C / H; N = B * T rows. GPT-2's layout: the projection's columns are q, k, v, each with
its heads side by side.
    qkv = x @ w_qkv + b_qkv                      (N, 3C), saved
    q, k <- rope(q), rope(k)                      optional, in place in qkv (so saved rotated)
    y_e = attention(q_e, k_e, v_e)                per batch entry e, (T, C) with heads side by side
    out = y @ w_out + b_out                       y (N, C) saved
rope = (cos, sin), (T, hs / 2) constants, rotates each head's halves at position t in the layout
of autograd/ops/rope.py: with h = hs / 2, q[..., :h] <- q1 cos[t] - q2 sin[t] and
q[..., h:] <- q1 sin[t] + q2 cos[t], k alike.
Backward, g = dL/dout:
    dy = g @ w_out^T,  (dq, dk, dv) per entry (autograd/ops/causal_attention.py) from the saved
    q, k; with rope dq, dk are then rotated back by the opposite angles (rope's backward),
    dx = dqkv @ w_qkv^T,  dw_out = y^T @ g,  dw_qkv = x^T @ dqkv,  biases: sums over rows.
A pool task takes a group of entries through the first product, the rotation, the attention
and the second product (forward) or back (dx pass), with the heads read from and written into
the (T, 3C) and (T, C) row layouts directly: no transposed copies, and one hand-off for the
sublayer (none of its own inside an autograd.row_chain). The weight and bias gradients of leaf
parameters are deferred (autograd.parallel.defer).
The attention keeps only its probabilities (the causal blocks of causal_attention.layout).
Groups depend on the shapes only, so the result does not depend on the thread count.

A pre-norm block's whole attention sublayer, x + attn(norm(x)), is one op too: with `norm` the
rows are normalised first (x in the formulas above is then norm(x), which the backward rebuilds
from the norm's xhat instead of keeping x), and with `residual` x is added to the output
(autograd/ops/prenorm.py).

On the GPU (prenorm.on_device) the op runs whole-array: cuBLAS products around the fused
attention kernels, which keep their own saved arrays (q, k, v copies, output, probabilities or
log-sum-exps), and the rotation as whole-array ops; the sublayer saves its input rows and y.
"""
from __future__ import annotations

import math
import types

import numpy as np

from autograd import parallel
from autograd.backend import xp_of
from autograd.cuda import attention as _attn_kernels
from autograd.function import Function
from autograd.ops import causal_attention as _ca
from autograd.ops import prenorm
from autograd.ops._util import host_floats
from autograd.ops.attention import entries_per_task
from autograd.ops.rope import rotate_into, rotation_tables


def applies(x, *params) -> bool:
    """Whether the fused op runs: x (B, T, C) and the weight and bias arrays NumPy float32 or
    float64 of one dtype, or arrays of its GPU form (prenorm.on_device)."""
    return (host_floats(x, *params) or prenorm.on_device(x, *params)) and x.ndim == 3


def _heads(rows, n: int, H: int, parts: int = 1, part: int = 0):
    """Head view (n, H, T, hs) of piece `part` of `parts` equal pieces of (n T, width) rows of n
    entries: the q, k or v of (n T, 3C) projections (parts=3), or all of (n T, C) rows (parts=1)."""
    width = rows.shape[1]
    return rows.reshape(n, -1, parts, H, width // parts // H)[:, :, part].swapaxes(1, 2)


def _rotated(rows, n: int, H: int):
    """The q and k heads that RoPE rotates: a (n, T, 2H, hs) view of contiguous (n T, 3C)
    projection rows of n entries."""
    return rows.reshape(n, -1, 3 * H, rows.shape[1] // (3 * H))[:, :, :2 * H]


class CausalSelfAttention(Function):
    def forward(self, x, *params, names=("w_qkv", "w_out"), n_head=1, centered=None, eps=0.0,
                residual=False, rope=None):
        p = dict(zip(names, params))
        self.device = prenorm.on_device(x)
        B, T, C = x.shape
        # q and k of a row side by side as (2H, hs): one product over each row's 2C columns
        self.rope = None if rope is None else rotation_tables(*(a.astype(x.dtype, copy=False) for a in rope),
                                                               heads=2 * n_head)
        if self.device:
            return self._device_forward(x, p, names, params, n_head, centered, eps, residual)
        w_qkv, b_qkv, w_out, b_out = p["w_qkv"], p.get("b_qkv"), p["w_out"], p.get("b_out")
        tables = self.rope
        H, scale = n_head, 1.0 / math.sqrt(C // n_head)
        x2 = np.ascontiguousarray(x.reshape(B * T, C))
        norm = prenorm.row_norm(x2, names, params, centered, eps, device=False)
        qkv, y = (np.empty((B * T, n), dtype=x.dtype) for n in (3 * C, C))
        out = prenorm.output_rows(x2, norm, residual, C)
        over = out is x2
        probs = _ca.new_probabilities((B, H), T, x.dtype)

        def group(lo, hi):
            rows, n = slice(lo * T, hi * T), hi - lo
            np.matmul(prenorm.first_rows(x2, norm, lo * T, hi * T), w_qkv, out=qkv[rows])
            if b_qkv is not None:
                qkv[rows] += b_qkv
            if tables is not None:
                rotate_into(_rotated(qkv[rows], n, H), tables)
            q, k, v = (_heads(qkv[rows], n, H, 3, i) for i in range(3))      # (n, H, T, hs) views
            _ca.entry_forward(q, k, v, scale, [p[lo:hi] for p in probs], _heads(y[rows], n, H))
            prenorm.last_product(y[rows], w_out, b_out, out[rows], x2[rows] if residual else None, over)

        per_entry = _ca.scores_per_entry(T, H)
        self.rows_in = prenorm.forward_blocks(group, x2, norm, out, B, per_entry, entries_per_task(per_entry),
                                              unit=T)
        self.norm = norm
        self.w_qkv, self.w_out, self.qkv, self.y = w_qkv, w_out, qkv, y
        self.probs, self.shape, self.H, self.scale = probs, (B, T, C), H, scale
        self.names, self.residual = names, residual
        return out.reshape(B, T, C)

    def backward(self, g):
        if self.device:
            return self._device_backward(g)
        B, T, C = self.shape
        H, qkv, y, probs, w_qkv, w_out = self.H, self.qkv, self.y, self.probs, self.w_qkv, self.w_out
        tables = self.rope
        g2 = np.ascontiguousarray(g.reshape(B * T, C), dtype=y.dtype)
        dqkv = np.empty_like(qkv)
        dn = np.empty_like(g2) if prenorm.needs_dn(self) else None

        def group(lo, hi):
            rows, n = slice(lo * T, hi * T), hi - lo
            dy = np.matmul(g2[rows], w_out.T)                                # (n T, C)
            q, k, v = (_heads(qkv[rows], n, H, 3, i) for i in range(3))
            dq, dk, dv = (_heads(dqkv[rows], n, H, 3, i) for i in range(3))
            _ca.entry_backward(_heads(dy, n, H), q, k, v, _heads(y[rows], n, H), [p[lo:hi] for p in probs],
                               self.scale, dq, dk, dv)
            if tables is not None:   # from the rotated q, k back to the projection's
                rotate_into(_rotated(dqkv[rows], n, H), tables, inverse=True)
            if dn is not None:
                np.matmul(dqkv[rows], w_qkv.T, out=dn[rows])

        parallel.for_chunks(group, B, H * T * T, step=entries_per_task(H * T * T))
        products = (("w_qkv", "b_qkv", prenorm.input_rows(self), dqkv), ("w_out", "b_out", y, g2))
        return prenorm.sublayer_grads(self, products, dn, g2, (B, T, C))


    def _device_forward(self, x, p, names, params, n_head, centered, eps, residual):
        """The GPU form: cuBLAS products around the fused causal attention (autograd/cuda/
        attention.py, flash or matmul as autograd.cuda.set_attention chose), which saves its own."""
        xp = xp_of(x)
        w_qkv, b_qkv, w_out, b_out = p["w_qkv"], p.get("b_qkv"), p["w_out"], p.get("b_out")
        B, T, C = x.shape
        x2 = xp.ascontiguousarray(x.reshape(B * T, C))
        norm = prenorm.row_norm(x2, names, params, centered, eps, device=True)
        rows_in = x2 if norm is None else norm.out
        qkv = xp.matmul(rows_in, w_qkv)
        if b_qkv is not None:
            qkv += b_qkv
        if self.rope is not None:
            rotate_into(_rotated(qkv, B, n_head), self.rope)
        q, k, v = qkv.reshape(B, T, 3, n_head, C // n_head).transpose(2, 0, 3, 1, 4)   # (B, H, T, hs) views
        self.attn = types.SimpleNamespace(needs_input_grad=(True, True, True))
        yh = _attn_kernels.forward(self.attn, q, k, v, causal=True)                  # (B, H, T, hs)
        y = xp.ascontiguousarray(yh.transpose(0, 2, 1, 3)).reshape(B * T, C)
        out = xp.matmul(y, w_out)
        if b_out is not None:
            out += b_out
        if residual:
            out += x2
        self.rows_in, self.norm = prenorm.kept_rows(x2, norm), norm
        self.w_qkv, self.w_out, self.y = w_qkv, w_out, y
        self.shape, self.H, self.names, self.residual = (B, T, C), n_head, names, residual
        return out.reshape(B, T, C)

    def _device_backward(self, g):
        xp = xp_of(g)
        B, T, C = self.shape
        H = self.H
        g2 = xp.ascontiguousarray(g.reshape(B * T, C), dtype=self.y.dtype)
        dyh = xp.matmul(g2, self.w_out.T).reshape(B, T, H, C // H).transpose(0, 2, 1, 3)
        dqkv = xp.empty((B, T, 3, H, C // H), dtype=self.y.dtype)
        for i, d in enumerate(_attn_kernels.backward(self.attn, dyh)):
            dqkv[:, :, i] = d.transpose(0, 2, 1, 3)
        dqkv = dqkv.reshape(B * T, 3 * C)
        if self.rope is not None:
            rotate_into(_rotated(dqkv, B, H), self.rope, inverse=True)
        dn = xp.matmul(dqkv, self.w_qkv.T) if prenorm.needs_dn(self) else None
        products = (("w_qkv", "b_qkv", prenorm.input_rows(self), dqkv), ("w_out", "b_out", self.y, g2))
        return prenorm.sublayer_grads(self, products, dn, g2, (B, T, C))


def causal_self_attention(x, w_qkv, b_qkv, w_out, b_out, n_head: int, norm=None, residual: bool = False,
                          rope=None):
    """The sublayer of the module docstring on Tensors; callers check `applies` first. norm:
    (centered, weight, bias, eps), a LayerNorm (centered) or RMSNorm of x in front (weight, bias
    (C,) Tensors or None), or None; residual: x is added to the output, so that
    causal_self_attention(x, ..., norm, True) is a pre-norm block's x + attn(ln_1(x))
    (ops/prenorm.py); rope: None or (cos, sin), arrays (T, hs / 2) of x's backend and dtype
    (constants, autograd/ops/rope.py's layout): q and k of x's position t rotated by row t."""
    if rope is not None:
        cos, sin = rope
        T, hs = x.shape[1], x.shape[-1] // int(n_head)
        if hs % 2 or tuple(cos.shape) != (T, hs // 2) or tuple(sin.shape) != (T, hs // 2):
            raise ValueError(f"causal_self_attention: expected rope (cos, sin) of shape (T, hs / 2) = "
                             f"({T}, {hs / 2:g}) for x {tuple(x.shape)} with {n_head} heads of hs={hs} "
                             f"(even); got cos {tuple(cos.shape)}, sin {tuple(sin.shape)}")
    names, params = prenorm.named_inputs(norm, w_qkv=w_qkv, b_qkv=b_qkv, w_out=w_out, b_out=b_out)
    return CausalSelfAttention.apply(x, *params, n_head=int(n_head), rope=rope,
                                     **prenorm.options(norm, residual, names))
