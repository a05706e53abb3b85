"""gelu_mlp: Linear -> GELU (tanh form) -> Linear in one op on the CPU, by blocks of rows.

Shapes: x (..., C), w1 (C, H), b1 (H,), w2 (H, Cout), b2 (Cout,) -> y (..., Cout); N rows.
    u = x @ w1 + b1,  a = (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))) / 2,  h = u a,  y = h @ w2 + b2
Backward, g = dL/dy:
    dh = g @ w2^T,  du = dh * gelu'(u, a),  dx = du @ w1^T
    dw2 = h^T @ g,  db2 = sum g,  dw1 = x^T @ du,  db1 = sum du
Forward and the dx pass run block by block of rows on autograd.parallel's pool, each block's
product, GELU and second product while it is in cache, one hand-off for the three layers (none
of its own inside an autograd.row_chain). Saved: u and a (N x H each) and a reference to x;
h is rebuilt from them in backward (one pass, with GELU's derivative), which spares the N x H
array the three separate ops keep for the second product's weight gradient. The last backward
over them (no retain_graph) writes h over u and dL/du over a: no N x H array is made in
backward.
The weight and bias gradients of leaf parameters are deferred to the pool (autograd.parallel.defer)
as the Linear op's are. Rows per block depend on the shapes only, so the result does not depend
on the thread count. Equal to the three ops composed up to rounding (tests/autograd/test_mlp.py).

A pre-norm block's whole feed-forward sublayer, x + mlp(norm(x)), is one op too: with `norm` the
rows are normalised first (x in the formulas above is then norm(x), which the backward rebuilds
from the norm's xhat instead of keeping x), and with `residual` x is added to the output
(autograd/ops/prenorm.py).

On the GPU (prenorm.on_device) the op runs whole-array: cuBLAS products and GELU's kernel;
saved: u (N x H), h recomputed in backward by the forward kernel.
"""
from __future__ import annotations

import types

import numpy as np

from autograd import parallel
from autograd.function import Function
from autograd.ops import prenorm
from autograd.ops._util import host_floats
from autograd.backend import xp_of
from autograd.cuda import activation as _gelu_kernels
from autograd.ops.activation import GELU_TANH_CUBIC, GELU_TANH_SCALE, _gelu_tanh_backward, _gelu_tanh_forward

_GELU = dict(scale=GELU_TANH_SCALE, cubic=GELU_TANH_CUBIC)   # the constants GELUTanh's kernel takes

BLOCK_ELEMENTS = 1 << 18   # about this many hidden values per block (fewer rows: slower products)
MIN_ROWS = 64


def block_rows(N: int, H: int) -> int:
    """Rows per block for N rows of hidden width H: blocks of about BLOCK_ELEMENTS values and
    equal size (two blocks of 384 rows rather than 512 + 256), at least MIN_ROWS rows."""
    blocks = max(1, -(-N * H // BLOCK_ELEMENTS))
    return max(MIN_ROWS, -(-N // blocks))


def applies(x, *params) -> bool:
    """Whether the fused op runs: x and the weight and bias arrays NumPy float32 or float64 of
    one dtype, or arrays of its GPU form (prenorm.on_device)."""
    return (host_floats(x, *params) or prenorm.on_device(x, *params)) and x.ndim >= 1


class GeluMLP(Function):
    def forward(self, x, *params, names=("w1", "w2"), centered=None, eps=0.0, residual=False):
        p = dict(zip(names, params))
        self.device = prenorm.on_device(x)
        if self.device:
            return self._device_forward(x, p, names, params, centered, eps, residual)
        w1, b1, w2, b2 = p["w1"], p.get("b1"), p["w2"], p.get("b2")
        x2 = np.ascontiguousarray(x.reshape(-1, x.shape[-1]))               # (N, C)
        norm = prenorm.row_norm(x2, names, params, centered, eps, device=False)
        N, H = x2.shape[0], w1.shape[1]
        u, a = np.empty((N, H), dtype=x.dtype), np.empty((N, H), dtype=x.dtype)
        y = prenorm.output_rows(x2, norm, residual, w2.shape[1])
        over = y is x2

        def block(lo, hi):
            ub = np.matmul(prenorm.first_rows(x2, norm, lo, hi), w1, out=u[lo:hi])
            if b1 is not None:
                ub += b1
            hb = np.empty_like(ub)
            _gelu_tanh_forward(ub, a[lo:hi], hb)
            prenorm.last_product(hb, w2, b2, y[lo:hi], x2[lo:hi] if residual else None, over)

        self.rows_in = prenorm.forward_blocks(block, x2, norm, y, N, H, block_rows(N, H))
        self.norm = norm
        self.w1, self.w2, self.u, self.a = w1, w2, u, a
        self.x_shape, self.names, self.residual = x.shape, names, residual
        return y.reshape(x.shape[:-1] + (w2.shape[1],))

    def backward(self, g):
        if self.device:
            return self._device_backward(g)
        w1, w2, u, a = self.w1, self.w2, self.u, self.a
        g2 = np.ascontiguousarray(g.reshape(-1, g.shape[-1]), dtype=u.dtype)    # (N, Cout)
        N, H = u.shape
        # the last backward over u and a writes h over u and du over a (both this op's own)
        h, du = (u, a) if self.last_backward else (np.empty_like(u), np.empty_like(u))
        dn = np.empty((N, w1.shape[0]), dtype=u.dtype) if prenorm.needs_dn(self) else None

        def block(lo, hi):
            dh = np.matmul(g2[lo:hi], w2.T)                            # (rows, H)
            _gelu_tanh_backward(dh, u[lo:hi], a[lo:hi], du[lo:hi], h[lo:hi])   # h rebuilt too
            if dn is not None:
                np.matmul(du[lo:hi], w1.T, out=dn[lo:hi])

        parallel.for_chunks(block, N, H, step=block_rows(N, H))
        products = (("w1", "b1", prenorm.input_rows(self), du), ("w2", "b2", h, g2))
        return prenorm.sublayer_grads(self, products, dn, g2, self.x_shape)


    def _device_forward(self, x, p, names, params, centered, eps, residual):
        """The GPU form: cuBLAS products, GELU's kernel (autograd/cuda/activation.py); saves u."""
        xp = xp_of(x)
        w1, b1, w2, b2 = p["w1"], p.get("b1"), p["w2"], p.get("b2")
        x2 = xp.ascontiguousarray(x.reshape(-1, x.shape[-1]))
        norm = prenorm.row_norm(x2, names, params, centered, eps, device=True)
        rows_in = x2 if norm is None else norm.out
        u = xp.matmul(rows_in, w1)
        if b1 is not None:
            u += b1
        self.gelu = types.SimpleNamespace()
        y = xp.matmul(_gelu_kernels.gelu_forward(self.gelu, u, **_GELU), w2)
        if b2 is not None:
            y += b2
        if residual:
            y += x2
        self.rows_in, self.norm = prenorm.kept_rows(x2, norm), norm
        self.w1, self.w2, self.u = w1, w2, u
        self.x_shape, self.names, self.residual = x.shape, names, residual
        return y.reshape(x.shape[:-1] + (w2.shape[1],))

    def _device_backward(self, g):
        """The GPU form's backward: h is recomputed from u by GELU's forward kernel."""
        xp = xp_of(g)
        g2 = xp.ascontiguousarray(g.reshape(-1, g.shape[-1]), dtype=self.u.dtype)
        (du,) = _gelu_kernels.gelu_backward(self.gelu, xp.matmul(g2, self.w2.T), **_GELU)
        h = _gelu_kernels.gelu_forward(types.SimpleNamespace(), self.u, **_GELU)
        dn = xp.matmul(du, self.w1.T) if prenorm.needs_dn(self) else None
        products = (("w1", "b1", prenorm.input_rows(self), du), ("w2", "b2", h, g2))
        return prenorm.sublayer_grads(self, products, dn, g2, self.x_shape)


def gelu_mlp(x, w1, b1, w2, b2, norm=None, residual: bool = False):
    """x (..., C) Tensor through Linear(w1 (C, H), b1 (H,) or None), GELU (tanh), Linear(w2 (H, Cout),
    b2 (Cout,) or None) -> (..., Cout) Tensor; callers check `applies` first.
    norm: (centered, weight, bias, eps), a LayerNorm (centered) or RMSNorm of x in front
    (weight, bias (C,) Tensors or None), or None; residual: x is added to the output (Cout = C),
    so that gelu_mlp(x, ..., norm, True) is a pre-norm block's x + mlp(ln_2(x)) (ops/prenorm.py)."""
    if residual and w2.shape[-1] != x.shape[-1]:
        raise ValueError(f"gelu_mlp: residual needs Cout = C, got x {tuple(x.shape)} and w2 {tuple(w2.shape)}")
    names, params = prenorm.named_inputs(norm, w1=w1, b1=b1, w2=w2, b2=b2)
    return GeluMLP.apply(x, *params, **prenorm.options(norm, residual, names))
