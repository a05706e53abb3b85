"""swiglu_mlp: LLaMA's gated feed-forward, Linear -> silu(gate) * up -> Linear, in one op.

Shapes: x (..., C), w1 (C, 2H) (gate columns first, then up: nn.SwiGLU's c_fc), b1 (2H,),
w2 (H, Cout), b2 (Cout,) -> y (..., Cout); N rows.
    u = x @ w1 + b1 = [a | b],  s = sigmoid(a),  h = a s b,  y = h @ w2 + b2
Backward, g = dL/dy:
    dh = g @ w2^T,  da = dh b s (1 + a (1 - s)),  db = dh a s,  du = [da | db],  dx = du @ w1^T
    dw2 = h^T @ g,  db2 = sum g,  dw1 = x^T @ du,  db1 = sum du
On the CPU, forward and the dx pass run block by block of rows on autograd.parallel's pool, as
the GELU MLP's do (autograd/ops/mlp.py, whose block sizes this op shares): each block's product,
gate and second product while it is in cache, one hand-off for the three layers (none of its
own inside an autograd.row_chain). Saved: u (N x 2H) and s (N x H) and a reference to x; h is
rebuilt in backward in the same pass as the gate's derivative, and the last backward over them
(no retain_graph) writes du over u and h over s. The sigmoid is 1 / (1 + exp(-a)): exp
overflows to inf for a very negative a, which gives the exact limit 0, so it needs neither the
stable form's branch nor its extra passes.
Weight and bias gradients of leaf parameters are deferred to the pool (autograd.parallel.defer).
Equal to the composed ops (Linear, chunk, silu, multiply, Linear) up to rounding
(tests/autograd/test_swiglu.py).

With `norm` and `residual` the op is a pre-norm block's whole feed-forward sublayer,
x + mlp(norm(x)) (autograd/ops/prenorm.py). On the GPU (prenorm.on_device) the same row passes
run once over all rows, with cuBLAS products (the array's matmul) and CuPy's elementwise ops.
"""
from __future__ import annotations

import numpy as np

from autograd import parallel
from autograd.backend import xp_of
from autograd.function import Function
from autograd.ops import prenorm
from autograd.ops.mlp import block_rows


def _forward_rows(rows, w1, b1, w2, b2, u, s, y, skip, over_skip=False) -> None:
    """One block's forward into u (n, 2H), s (n, H) and y (n, Cout); skip: rows to add or None,
    over_skip: y is skip's memory (prenorm.last_product)."""
    xp = xp_of(rows)
    xp.matmul(rows, w1, out=u)
    if b1 is not None:
        u += b1
    H = s.shape[1]
    a, b = u[:, :H], u[:, H:]
    with np.errstate(over="ignore"):   # exp(-a) = inf is the sigmoid's limit 0
        xp.negative(a, out=s)
        xp.exp(s, out=s)
    s += 1.0
    xp.divide(1.0, s, out=s)   # reciprocal's bits; NumPy's divide has SIMD loops
    h = xp.multiply(a, s)
    h *= b
    prenorm.last_product(h, w2, b2, y, skip, over_skip)


def _backward_rows(dh, u, s, du, h) -> None:
    """One block's gate backward: du (n, 2H) = [da | db] from dh (n, H) = dL/dh, and the forward's
    h (n, H) rebuilt into h; eight passes, two scratch arrays. du may be u and h may be s: each
    is written after its last read (a backward that owns them needs no new array)."""
    xp = xp_of(dh)
    H = s.shape[1]
    a, b = u[:, :H], u[:, H:]
    as_ = xp.multiply(a, s, out=xp.empty_like(s))     # a s
    t = xp.subtract(a, as_, out=xp.empty_like(s))      # a (1 - s)
    t += 1.0
    t *= s
    xp.multiply(as_, b, out=h)                         # h
    t *= b
    xp.multiply(dh, as_, out=du[:, H:])                # dL/db = dh a s
    xp.multiply(t, dh, out=du[:, :H])                  # dL/da = dh b s (1 + a (1 - s))


class SwiGLUMLP(Function):
    def forward(self, x, *params, names=("w1", "w2"), centered=None, eps=0.0, residual=False):
        p = dict(zip(names, params))
        self.device = prenorm.on_device(x)
        xp = xp_of(x)
        w1, b1, w2, b2 = p["w1"], p.get("b1"), p["w2"], p.get("b2")
        x2 = xp.ascontiguousarray(x.reshape(-1, x.shape[-1]))               # (N, C)
        norm = prenorm.row_norm(x2, names, params, centered, eps, device=self.device)
        N, H = x2.shape[0], w2.shape[0]
        u, s = xp.empty((N, 2 * H), dtype=x.dtype), xp.empty((N, H), dtype=x.dtype)
        y = prenorm.output_rows(x2, norm, residual, w2.shape[1])
        over = y is x2

        def block(lo, hi):
            _forward_rows(prenorm.first_rows(x2, norm, lo, hi), w1, b1, w2, b2, u[lo:hi], s[lo:hi], y[lo:hi],
                          x2[lo:hi] if residual else None, over)

        if self.device:
            block(0, N)
            self.rows_in = prenorm.kept_rows(x2, norm)
        else:
            self.rows_in = prenorm.forward_blocks(block, x2, norm, y, N, *_cut(N, H))
        self.norm = norm
        self.w1, self.w2, self.u, self.s = w1, w2, u, s
        self.x_shape, self.names, self.residual = x.shape, names, residual
        return y.reshape(x.shape[:-1] + (w2.shape[1],))

    def backward(self, g):
        xp = xp_of(g)
        w1, w2, u, s = self.w1, self.w2, self.u, self.s
        g2 = xp.ascontiguousarray(g.reshape(-1, g.shape[-1]), dtype=u.dtype)    # (N, Cout)
        N, H = s.shape
        # the last backward over u and s writes du over u and h over s (both this op's own)
        h, du = (s, u) if self.last_backward else (xp.empty_like(s), xp.empty_like(u))
        dn = xp.empty((N, w1.shape[0]), dtype=u.dtype) if prenorm.needs_dn(self) else None

        def block(lo, hi):
            _backward_rows(xp.matmul(g2[lo:hi], w2.T), u[lo:hi], s[lo:hi], du[lo:hi], h[lo:hi])
            if dn is not None:
                xp.matmul(du[lo:hi], w1.T, out=dn[lo:hi])

        self._run(block, N, H)
        products = (("w1", "b1", prenorm.input_rows(self), du), ("w2", "b2", h, g2))
        return prenorm.sublayer_grads(self, products, dn, g2, self.x_shape)

    def _run(self, block, N: int, H: int) -> None:
        """block(lo, hi) over all N rows: once on the GPU, by blocks on the CPU's pool (rows per
        block from the shapes only, so the bits do not depend on the thread count)."""
        if self.device:
            block(0, N)
        else:
            parallel.for_chunks(block, N, *_cut(N, H))


def _cut(N: int, H: int) -> tuple:
    """(values per row, rows per block) of the CPU's blocks over N rows of hidden width H."""
    return 3 * H, block_rows(N, 2 * H)


def swiglu_mlp(x, w1, b1, w2, b2, norm=None, residual: bool = False):
    """x (..., C) Tensor through Linear(w1 (C, 2H), b1 (2H,) or None), silu(gate) * up (gate the
    first H columns), Linear(w2 (H, Cout), b2 (Cout,) or None) -> (..., Cout) Tensor; callers
    check autograd.ops.mlp.applies first. norm and residual as gelu_mlp's (autograd/ops/mlp.py): a pre-norm
    block's x + mlp(norm(x)) with both."""
    if w1.shape[-1] != 2 * w2.shape[0]:
        raise ValueError(f"swiglu_mlp: w1 must be (C, 2H) and w2 (H, Cout), got {tuple(w1.shape)} "
                         f"and {tuple(w2.shape)}")
    if residual and w2.shape[-1] != x.shape[-1]:
        raise ValueError(f"swiglu_mlp: residual needs Cout = C, got x {tuple(x.shape)} and w2 {tuple(w2.shape)}")
    names, params = prenorm.named_inputs(norm, w1=w1, b1=b1, w2=w2, b2=b2)
    return SwiGLUMLP.apply(x, *params, **prenorm.options(norm, residual, names))
