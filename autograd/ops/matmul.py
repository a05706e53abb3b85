"""Matrix product with NumPy's @ semantics: batched, broadcasting batch axes, 1-D operands.

The common case of a stack times one matrix, (..., K) @ (K, N) (every Linear layer), runs as
one 2-D product over the flattened rows, both forward and for the weight gradient, instead
of a batch of small products followed by a sum: that is one large BLAS call and no
(batch, K, N) intermediate.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from autograd.function import Function, unbroadcast
from autograd import parallel
from autograd.parallel import deferred_matmul as _deferred_mm, deferred_row_sum as _deferred_sum, matmul as _mm
from autograd.ops._util import binary_operands
from autograd.sums import column_sums

if TYPE_CHECKING:
    from autograd.tensor import Tensor


# The two gradients of a product of at least this many flops each (a small GPT's output head) are
# computed side by side on the pool's threads, when each is too small to be split itself
# (GEMM_MIN_FLOPS).
SIDE_BY_SIDE_FLOPS = 1 << 22


def _rows_times(x, w):
    """x (..., K) @ w (K, N) -> (..., N), as one 2-D product when x is contiguous."""
    if x.ndim > 2 and x.flags.c_contiguous:
        return _mm(x.reshape(-1, x.shape[-1]), w).reshape(x.shape[:-1] + (w.shape[-1],))
    return _mm(x, w)


def _shaped(x, shape):
    # reshape() to the same shape still makes a view, which the engine would copy for a leaf
    return x if x.shape == shape else x.reshape(shape)


def _flat_rows(x):
    return x.reshape(-1, x.shape[-1])


class MatMul(Function):
    def forward(self, a, b):
        self.a_shape, self.b_shape = a.shape, b.shape
        # 1-D operands are promoted to matrices (a row, b a column) and the added axis is
        # removed from the result, exactly as numpy.matmul does.
        if a.ndim == 1:
            a = a.reshape(1, -1)
        if b.ndim == 1:
            b = b.reshape(-1, 1)
        self.a, self.b = a, b
        if b.ndim == 2:
            out = _rows_times(a, b)
        else:
            out = _mm(a, b)
        if len(self.a_shape) == 1:
            out = out.reshape(out.shape[:-2] + out.shape[-1:])
        if len(self.b_shape) == 1:
            out = out.reshape(out.shape[:-1])
        return out

    def backward(self, g):
        # Restore the axes that 1-D operands removed from the output.
        if len(self.a_shape) == 1:
            g = g.reshape(g.shape[:-1] + (1,) + g.shape[-1:])
        if len(self.b_shape) == 1:
            g = g.reshape(g.shape + (1,))
        na, nb = self.needs_input_grad
        if na and nb and type(g) is np.ndarray and (
                SIDE_BY_SIDE_FLOPS <= 2 * g.size * self.a.shape[-1] < parallel.GEMM_MIN_FLOPS):
            return tuple(parallel.side_by_side(lambda: self._grad_a(g), lambda: self._grad_b(g)))
        return (self._grad_a(g) if na else None), (self._grad_b(g) if nb else None)

    def _grad_a(self, g):
        a, b = self.a, self.b
        if b.ndim == 2:
            ga = _rows_times(g, b.T)            # (..., N) @ (N, K)
        else:
            ga = _mm(g, b.swapaxes(-1, -2))
        return _shaped(unbroadcast(ga, a.shape), self.a_shape)

    def _grad_b(self, g):
        a, b = self.a, self.b
        if b.ndim == 2 and b.flags.f_contiguous and not b.flags.c_contiguous:
            # b is a transposed view (a tied output head, wte.T): give its gradient the same
            # layout, so the transpose back to the weight is C-ordered and adds to the
            # embedding's gradient at full speed (adding arrays of mixed C and F order is far slower).
            gb = _mm(_flat_rows(g).T, _flat_rows(a)).T  # ((N, rows) @ (rows, K)).T
        elif b.ndim == 2 and a.ndim > 2:
            gb = _mm(_flat_rows(a).T, _flat_rows(g))  # (K, rows) @ (rows, N): one product
        else:
            gb = unbroadcast(_mm(a.swapaxes(-1, -2), g), b.shape)
        return _shaped(gb, self.b_shape)


def matmul(a: Tensor | Any, b: Tensor | Any) -> Tensor:
    """a @ b with numpy.matmul semantics (batched, broadcasting, 1-D operands)."""
    a, b = binary_operands(a, b, "matmul")
    sa, sb = a.shape, b.shape
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must have at least 1 dimension, got shapes {sa} and {sb}")
    k_a = sa[-1]
    k_b = sb[0] if b.ndim == 1 else sb[-2]
    if k_a != k_b:
        raise ValueError(f"matmul: shapes {sa} and {sb} do not align (inner sizes {k_a} and {k_b})")
    if a.ndim > 2 and b.ndim > 2:
        try:
            np.broadcast_shapes(sa[:-2], sb[:-2])
        except ValueError:
            raise ValueError(f"matmul: batch shapes of {sa} and {sb} cannot be broadcast together") from None
    return MatMul.apply(a, b)


def linear_array(x, w, b=None):
    """x (..., K) @ w (K, N) + b (N,) on arrays, the bias added in place into the product: the
    forward of the Linear op, and a layer's no-graph decode step (nn/arrays.py)."""
    out = _mm(x, w) if x.ndim <= 2 else _rows_times(x, w)   # a decode step's rows are 2-D
    if b is not None:
        out += b
    return out


class Linear(Function):
    """x (..., K) @ w (K, N) + b (N,), the bias added in place into the product."""

    def forward(self, x, w, *bias):
        self.x, self.w, self.has_bias = x, w, bool(bias)
        return linear_array(x, w, bias[0] if bias else None)

    def backward(self, g):
        gx = _rows_times(g, self.w.T) if self.needs_input_grad[0] else None      # (..., K)
        return (gx, *weight_grads(self, 1, _flat_rows(self.x), _flat_rows(g), self.has_bias))


def weight_grads(node, i: int, rows_x, rows_g, has_bias: bool) -> list:
    """[dw] or, with has_bias, [dw, db] of a linear map inside `node`: its weight (K, N) is input
    i, its bias (N,) input i + 1, its input rows rows_x (rows, K) and their output's gradient
    rows_g (rows, N); None where not needed. A leaf's gradient is read only after the whole
    backward (by the engine's last pass, the optimizer): on NumPy its products are deferred to the
    pool's workers, overlapping the rest of the backward, instead of each being split across the
    threads in turn."""
    need, host = node.needs_input_grad, type(rows_g) is np.ndarray
    out = [None] * (1 + has_bias)
    if need[i]:
        out[0] = (_deferred_mm if host and leaf_parent(node, i) else _mm)(rows_x.T, rows_g)   # (K, N)
    if has_bias and need[i + 1]:
        out[1] = (_deferred_sum(rows_g) if host and leaf_parent(node, i + 1)
                  else column_sums(rows_g))                                                   # (N,)
    return out


def leaf_parent(node, i: int) -> bool:
    """Whether input i of `node` is a leaf tensor (its gradient goes to .grad, not to a node)."""
    return not isinstance(node.parents[i], Function)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x (..., in) @ weight (in, out) + bias (out,) -> (..., out), one op: the product is one
    2-D GEMM over the rows and the bias is added into it in place (no second full-size array)."""
    x, weight = binary_operands(x, weight, "linear")
    if weight.ndim != 2:
        raise ValueError(f"linear: weight must be (in, out), got shape {weight.shape}")
    if x.ndim == 0 or x.shape[-1] != weight.shape[0]:
        raise ValueError(f"linear: x of shape {x.shape} does not match weight of shape {weight.shape} "
                         f"(x's last size must be {weight.shape[0]})")
    if bias is None:
        return Linear.apply(x, weight)
    _, bias = binary_operands(x, bias, "linear")
    if bias.shape != (weight.shape[1],):
        raise ValueError(f"linear: bias must have shape ({weight.shape[1]},), got {bias.shape}")
    if bias.dtype != weight.dtype and x.dtype == weight.dtype:
        bias = bias.astype(weight.dtype)
    return Linear.apply(x, weight, bias)
