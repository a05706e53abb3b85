"""softmax and log_softmax along one axis: a fused, numerically stable forward and an analytic backward.

Both subtract the row maximum before exponentiating, so large logits never overflow, and sum
in float32 for float16 inputs (backend.acc_dtype, as the CUDA kernels do). Each saves only its
output (the same dtype as the input) and derives the gradient from it:
    softmax      y = exp(x - lse)    dx = y * (g - sum(g * y))
    log_softmax  y = x - lse         dx = g - exp(y) * sum(g)
"""
from __future__ import annotations

from autograd.cuda import kernel_op
from autograd.cuda import softmax as kernels
from autograd.backend import acc_dtype, xp_of
from autograd.function import Function
from autograd.sums import down_sums, row_sums


def _check_axis(axis: int, ndim: int, op: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    if ndim == 0:
        raise ValueError(f"{op}: expected a tensor with at least one dimension, got a scalar")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor with {ndim} dimensions")
    return axis


def softmax_array(x, axis: int = -1, out=None, masked: bool = True):
    """exp(x - logsumexp(x)) along `axis` as a new array (or into `out`, which may be `x`).

    Rows whose entries are all -inf (fully masked) come out as zeros instead of NaN. A caller
    whose rows are never fully masked (masked=False: attention without a mask, a decode step,
    causal blocks where every query sees its own key) skips those guards, which are a third of
    the work on a decode step's few scores.
    """
    xp = xp_of(x)
    m = x.max(axis=axis, keepdims=True)
    guard = masked and m.dtype.kind == "f"
    if guard:  # a fully masked row (max -inf) subtracts a finite number instead:
        xp.maximum(m, xp.finfo(m.dtype).min, out=m)  # exp(-inf) = 0 everywhere, not NaN
    y = xp.subtract(x, m, out=out)
    xp.exp(y, out=y)
    s = _sums(y, axis)
    if guard:
        xp.maximum(s, xp.finfo(s.dtype).tiny, out=s)  # >= 1 unless the row was fully masked: then 0 / tiny
    y /= s
    return y


def _sums(y, axis: int):
    """y summed over `axis`, keepdims, in acc_dtype: the last two axes as BLAS products
    (autograd/sums.py)."""
    axis = axis % y.ndim
    if axis == y.ndim - 1:
        return row_sums(y)
    if axis == y.ndim - 2:
        return down_sums(y)
    return y.sum(axis=axis, keepdims=True, dtype=acc_dtype(y.dtype))


def log_softmax_array(x, axis: int = -1):
    """x - logsumexp(x) along `axis` as a new array."""
    xp = xp_of(x)
    m = x.max(axis=axis, keepdims=True)
    y = x - m
    e = xp.exp(y)
    lse = xp.log(e.sum(axis=axis, keepdims=True, dtype=acc_dtype(e.dtype)))
    del e
    y -= lse
    return y


@kernel_op(kernels.softmax_forward, kernels.softmax_backward)
class Softmax(Function):
    def forward(self, x, axis=-1):
        self.axis = axis
        self.y = softmax_array(x, axis)
        return self.y

    def backward(self, g):
        xp, y = xp_of(g), self.y
        gx = g * y
        s = gx.sum(axis=self.axis, keepdims=True, dtype=acc_dtype(gx.dtype))
        xp.subtract(g, s, out=gx)  # reuse the buffer: dx = (g - s) * y
        gx *= y
        return (gx,)


@kernel_op(kernels.softmax_forward, kernels.softmax_backward, log=True)
class LogSoftmax(Function):
    def forward(self, x, axis=-1):
        self.axis = axis
        self.y = log_softmax_array(x, axis)
        return self.y

    def backward(self, g):
        xp = xp_of(g)
        gx = xp.exp(self.y)
        gx *= g.sum(axis=self.axis, keepdims=True, dtype=acc_dtype(g.dtype))
        xp.subtract(g, gx, out=gx)
        return (gx,)


def softmax(x, axis: int = -1):
    """Softmax of tensor `x` along `axis` (default last); same shape and dtype as `x`."""
    _check_axis(axis, x.ndim, "softmax")
    _require_float(x, "softmax")
    return Softmax.apply(x, axis=axis)


def log_softmax(x, axis: int = -1):
    """Log-softmax of tensor `x` along `axis` (default last); same shape and dtype as `x`."""
    _check_axis(axis, x.ndim, "log_softmax")
    _require_float(x, "log_softmax")
    return LogSoftmax.apply(x, axis=axis)


def _require_float(x, op: str) -> None:
    if x.dtype.kind != "f":
        raise TypeError(f"{op}: expected a floating-point tensor, got dtype {x.dtype}")
