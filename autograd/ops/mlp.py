"""gelu_mlp: Linear -> GELU (tanh form) -> Linear in one op on the CPU, by blocks of rows.

Shapes: x (..., C), w1 (C, H), b1 (H,), w2 (H, Cout), b2 (Cout,) -> y (..., Cout); N rows.
    u = x @ w1 + b1,  t = tanh(sqrt(2/pi) (u + 0.044715 u^3)),  h = 0.5 u (1 + t),  y = h @ w2 + b2
Backward, g = dL/dy:
    dh = g @ w2^T,  du = dh * gelu'(u, t),  dx = du @ w1^T
    dw2 = h^T @ g,  db2 = sum g,  dw1 = x^T @ du,  db1 = sum du
Forward and the dx pass run block by block of rows on autograd.parallel's pool, each block's
product, GELU and second product while it is in cache, one hand-off for the three layers. Saved:
u and t (N x H each) and a reference to x; h is rebuilt from them in backward (one pass), which
spares the N x H array the three separate ops keep for the second product's weight gradient.
The weight and bias gradients of leaf parameters are deferred to the pool (autograd.parallel.defer)
as the Linear op's are. Rows per block depend on the shapes only, so the result does not depend
on the thread count. Equal to the three ops composed up to rounding (tests/autograd/test_mlp.py).
"""
from __future__ import annotations

import numpy as np

from autograd import parallel
from autograd.function import Function
from autograd.ops._util import host_floats
from autograd.ops.activation import _gelu_tanh_backward, _gelu_tanh_forward
from autograd.ops.matmul import weight_grads

BLOCK_ELEMENTS = 1 << 18   # about this many hidden values per block (fewer rows: slower products)
MIN_ROWS = 64


def block_rows(N: int, H: int) -> int:
    """Rows per block for N rows of hidden width H: blocks of about BLOCK_ELEMENTS values and
    equal size (two blocks of 384 rows rather than 512 + 256), at least MIN_ROWS rows."""
    blocks = max(1, -(-N * H // BLOCK_ELEMENTS))
    return max(MIN_ROWS, -(-N // blocks))


def applies(x, *params) -> bool:
    """Whether the fused op runs: x and the weight and bias arrays NumPy float32 or float64 of
    one dtype."""
    return host_floats(x, *params) and x.ndim >= 1


class GeluMLP(Function):
    def forward(self, x, w1, *rest, has_b1=False, has_b2=False):
        b1 = rest[0] if has_b1 else None
        w2 = rest[1] if has_b1 else rest[0]
        b2 = rest[-1] if has_b2 else None
        x2 = np.ascontiguousarray(x.reshape(-1, x.shape[-1]))               # (N, C)
        N, H = x2.shape[0], w1.shape[1]
        u, t = np.empty((N, H), dtype=x.dtype), np.empty((N, H), dtype=x.dtype)
        y = np.empty((N, w2.shape[1]), dtype=x.dtype)

        def block(lo, hi):
            ub = np.matmul(x2[lo:hi], w1, out=u[lo:hi])
            if b1 is not None:
                ub += b1
            hb = np.empty_like(ub)
            _gelu_tanh_forward(ub, t[lo:hi], hb)
            yb = np.matmul(hb, w2, out=y[lo:hi])
            if b2 is not None:
                yb += b2

        parallel.for_chunks(block, N, H, step=block_rows(N, H))
        self.x2, self.w1, self.w2, self.u, self.t = x2, w1, w2, u, t
        self.x_shape, self.has_b1, self.has_b2 = x.shape, has_b1, has_b2
        return y.reshape(x.shape[:-1] + (w2.shape[1],))

    def backward(self, g):
        x2, w1, w2, u, t = self.x2, self.w1, self.w2, self.u, self.t
        g2 = np.ascontiguousarray(g.reshape(-1, g.shape[-1]), dtype=u.dtype)    # (N, Cout)
        N, H = u.shape
        need_x = self.needs_input_grad[0]
        h, du = np.empty_like(u), np.empty_like(u)
        dx = np.empty_like(x2) if need_x else None

        def block(lo, hi):
            ub, tb, hb = u[lo:hi], t[lo:hi], h[lo:hi]
            np.add(tb, 1.0, out=hb)                                   # h = 0.5 u (1 + t), again
            hb *= ub
            hb *= 0.5
            dh = np.matmul(g2[lo:hi], w2.T)                            # (rows, H)
            _gelu_tanh_backward(dh, ub, tb, du[lo:hi])
            if need_x:
                np.matmul(du[lo:hi], w1.T, out=dx[lo:hi])

        parallel.for_chunks(block, N, H, step=block_rows(N, H))
        grads = [None if dx is None else dx.reshape(self.x_shape)]
        grads += weight_grads(self, 1, x2, du, self.has_b1)
        grads += weight_grads(self, 2 + self.has_b1, h, g2, self.has_b2)
        return tuple(grads)


def gelu_mlp(x, w1, b1, w2, b2):
    """x (..., C) Tensor through Linear(w1 (C, H), b1 (H,) or None), GELU (tanh), Linear(w2 (H, Cout),
    b2 (Cout,) or None) -> (..., Cout) Tensor; callers check `applies` first (NumPy only)."""
    params = [p for p in (w1, b1, w2, b2) if p is not None]
    return GeluMLP.apply(x, *params, has_b1=b1 is not None, has_b2=b2 is not None)
