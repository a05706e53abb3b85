"""cross_entropy: log-softmax and negative log-likelihood fused into one op.

For logits x (N, V) and integer targets t (N,):
    loss_n = logsumexp(x_n) - x_n[t_n]                  (0 where t_n == ignore_index)
    dloss_n/dx_n = softmax(x_n) - onehot(t_n)           (0 where ignored)
On the CPU's pool the forward keeps exp(x_n - max x_n) (N, V) and the reciprocal row sums
instead of the logits, so the backward scales it into the gradient with one multiply and no
second exp, in place unless the graph is kept for another backward. Elsewhere the forward
saves the logits and the row-wise logsumexp (N,), and the backward rebuilds the softmax in the
buffer that becomes the gradient. Either way 1 is
subtracted at the target positions: no one-hot and no second (N, V) array is ever saved.
The logsumexp, the losses and their sum are float32 for float16 logits (backend.acc_dtype, as
the CUDA kernels): in float16, 20,000 losses of ln 200 already sum past 65504 to inf.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from autograd import backend
from autograd.cuda import kernel_op
from autograd.cuda import loss as kernels
from autograd import parallel
from autograd.backend import HOST_FLOATS, acc_dtype, xp_of
from autograd.function import Function
from autograd.grad_mode import is_grad_enabled
from autograd.ops.index import check_ids
from autograd.sums import row_sums

IGNORE_INDEX = -100  # cross_entropy's default target that skips a position (PyTorch's)
_REDUCTIONS = ("mean", "sum", "none")


# Rows per block of the forward's logsumexp: the exp temporary stays near 16 MiB of float32
# however large N * V is (a GPT-2 batch of logits is gigabytes).
_BLOCK_ELEMENTS = 1 << 22


# Entries per pool task of the passes over logits on the CPU: long rows in blocks this large
# (2 MiB of float32, in the last-level cache) spend less in hand-offs between the threads than
# the L2-sized chunks of parallel.for_chunks.
_TASK_ELEMENTS = 1 << 19


def _rows_per(elements: int, V: int) -> int:
    """Rows of V entries in a block of about `elements` entries (at least one)."""
    return max(1, elements // max(V, 1))


def _row_blocks(N: int, V: int):
    """(lo, hi) slices of N rows of V entries, about _BLOCK_ELEMENTS entries each."""
    step = _rows_per(_BLOCK_ELEMENTS, V)
    return [(lo, min(N, lo + step)) for lo in range(0, N, step)]


def _on_pool(x2) -> bool:
    """Whether the row blocks run on autograd.parallel's threads (large float32/64 NumPy logits)."""
    return type(x2) is np.ndarray and x2.dtype in HOST_FLOATS


def _shifted_exp_rows(x2, keep: bool):
    """(e, r, lse) of NumPy logits x2 (N, V) on the pool: e = exp(x2 - rowmax) (N, V) when `keep`
    (else None: each block's is a temporary), r = 1 / its row sums (N, 1), lse = log of the row
    sums of exp(x2) (N, 1); all of x2's dtype."""
    e = np.empty_like(x2) if keep else None
    r = np.empty((x2.shape[0], 1), dtype=x2.dtype)
    lse = np.empty_like(r)

    def block(lo, hi):
        m = x2[lo:hi].max(axis=1, keepdims=True)
        eb = np.subtract(x2[lo:hi], m, out=None if e is None else e[lo:hi])
        np.exp(eb, out=eb)
        s = row_sums(eb)
        np.log(s, out=lse[lo:hi])
        lse[lo:hi] += m
        np.divide(1, s, out=r[lo:hi])

    parallel.for_chunks(block, x2.shape[0], x2.shape[1], _rows_per(_TASK_ELEMENTS, x2.shape[1]))
    return e, r, lse


def _logsumexp_rows(x2):
    """log(sum(exp(x2), axis=1)) as (N, 1) in acc_dtype(x2.dtype), stable, in row blocks."""
    xp = xp_of(x2)
    lse = x2.max(axis=1, keepdims=True).astype(acc_dtype(x2.dtype), copy=False)   # (N, 1), the shift
    for lo, hi in _row_blocks(*x2.shape):
        e = xp.subtract(x2[lo:hi], lse[lo:hi])
        xp.exp(e, out=e)
        s = e.sum(axis=1, keepdims=True)
        xp.log(s, out=s)
        lse[lo:hi] += s
    return lse


def _softmax_rows(x2, lse):
    """exp(x2 - lse) as a new (N, V) array of x2's dtype; computed in lse's dtype (row blocks
    when that is wider than x2's)."""
    xp = xp_of(x2)
    if x2.dtype == lse.dtype:
        p = xp.subtract(x2, lse)
        return xp.exp(p, out=p)
    p = xp.empty_like(x2)
    for lo, hi in _row_blocks(*x2.shape):
        e = xp.subtract(x2[lo:hi], lse[lo:hi])
        p[lo:hi] = xp.exp(e, out=e)
    return p


@kernel_op(kernels.cross_entropy_forward, kernels.cross_entropy_backward)
class CrossEntropy(Function):
    def forward(self, x, targets, ignore_index=IGNORE_INDEX, reduction="mean"):
        xp = xp_of(x)
        V = x.shape[-1]
        x2 = x.reshape(-1, V)                                  # (N, V)
        t = targets.reshape(-1)                                # (N,)
        valid = t != ignore_index
        safe_t = xp.where(valid, t, 0)
        rows = xp.arange(x2.shape[0])
        if _on_pool(x2):   # without a graph no backward comes: keep no (N, V) array
            self.e, self.r, lse = _shifted_exp_rows(x2, keep=is_grad_enabled())
        else:
            self.x2, lse = x2, _logsumexp_rows(x2)              # (N, 1)
        losses = lse[:, 0] - x2[rows, safe_t]                  # (N,), acc dtype
        losses *= valid
        self.lse, self.safe_t, self.valid, self.dtype = lse, safe_t, valid, x.dtype
        self.shape, self.reduction = x.shape, reduction
        if reduction == "none":
            return losses.astype(x.dtype, copy=False).reshape(targets.shape)
        total = losses.sum()
        if reduction == "sum":
            return xp.asarray(total, dtype=x.dtype)            # a 0-d array, not a NumPy scalar
        self.count = xp.asarray(valid.sum(), dtype=lse.dtype)
        with np.errstate(invalid="ignore", divide="ignore"):  # all targets ignored: NaN, as in PyTorch
            return xp.asarray(total / self.count, dtype=x.dtype)

    def backward(self, g):
        xp = xp_of(g)
        valid = self.valid
        if self.reduction == "none":
            scale = g.reshape(-1) * valid
        elif self.reduction == "sum":
            scale = xp.where(valid, g, 0)
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                scale = xp.where(valid, g / self.count, 0)
        scale = scale.astype(self.dtype, copy=False)[:, None]  # (N, 1)
        if getattr(self, "e", None) is not None:
            return self._backward_rows(scale), None
        x2 = self.x2
        gx = _softmax_rows(x2, self.lse)                       # (N, V), becomes the gradient
        rows = xp.arange(x2.shape[0])
        gx[rows, self.safe_t] -= 1
        gx *= scale
        return gx.reshape(self.shape), None

    def _backward_rows(self, scale):
        """e * (r * scale) - onehot(t) * scale, i.e. (softmax(x) - onehot(t)) * scale, as blocks of
        rows on the pool."""
        e, r, t = self.e, self.r, self.safe_t
        gx = e if self.last_backward else np.empty_like(e)   # an (N, V) array fewer at the peak

        def block(lo, hi):
            sb = scale[lo:hi]
            gb = np.multiply(e[lo:hi], r[lo:hi] * sb, out=gx[lo:hi])
            gb[np.arange(hi - lo), t[lo:hi]] -= sb[:, 0]

        parallel.for_chunks(block, e.shape[0], e.shape[1], _rows_per(_TASK_ELEMENTS, e.shape[1]))
        # gx itself when no reshape is needed: a view would be copied into a leaf's .grad
        return gx if gx.shape == self.shape else gx.reshape(self.shape)


def _targets_array(targets: Any, logits) -> Any:
    """`targets` as an integer array on the logits' backend."""
    from autograd.tensor import Tensor

    if isinstance(targets, Tensor):
        targets = targets.data
    xp = logits.xp
    if backend.xp_of(targets) is not xp or not hasattr(targets, "dtype"):
        targets = backend.to_device(np.asarray(targets), logits.device)
    if targets.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: targets must be integer class indices, got dtype {targets.dtype}")
    return targets


def cross_entropy(logits, targets, ignore_index: int = IGNORE_INDEX, reduction: str = "mean",
                  check_range: bool = True):
    """Cross-entropy of `logits` (N, V) or (B, T, V) against integer `targets` (N,) or (B, T).

    Targets equal to `ignore_index` contribute nothing; others outside [0, V) raise an
    IndexError unless `check_range=False` (which skips that check, one device-to-host sync on
    the GPU, for a caller that has checked the targets already; a target out of range is then
    not detected). `reduction`: "mean" (over the targets
    that are not ignored; NaN when all are), "sum", or "none" (per-position losses of the
    targets' shape, 0 at ignored positions). Returns a Tensor of the logits' dtype.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if logits.dtype.kind != "f":
        raise TypeError(f"cross_entropy: logits must be floating point, got dtype {logits.dtype}")
    if logits.ndim < 2:
        raise ValueError(f"cross_entropy: expected logits of shape (N, V) or (B, T, V), got {logits.shape}")
    t = _targets_array(targets, logits)
    if tuple(t.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"cross_entropy: targets of shape {tuple(t.shape)} do not match logits of shape "
            f"{tuple(logits.shape)}: expected targets of shape {tuple(logits.shape[:-1])}"
        )
    if check_range:
        check_ids(t, logits.shape[-1], "cross_entropy", "target", ignore_index=ignore_index)
    from autograd.tensor import Tensor

    return CrossEntropy.apply(logits, Tensor._make(t, None), ignore_index=ignore_index, reduction=reduction)
