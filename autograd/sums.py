"""Sums over one axis of NumPy float32/float64 arrays as BLAS products with a vector of ones.

NumPy reduces an axis of short rows row by row, with a loop's overhead per row, where one BLAS
call (ones @ a, or a dot product of each row with ones) takes the whole block at once. The
norms, the attention's softmax and the bias gradients sum this way.
Each of row_sums' sums is one BLAS dot product of its row alone, so it does not depend on how
many rows come with it: a decode step's single row sums as the same row of a whole sequence.
Other arrays (CuPy, float16) fall back to sum(), accumulated in backend.acc_dtype.
"""
from __future__ import annotations

import functools

import numpy as np

from autograd.backend import HOST_FLOATS, acc_dtype


def _blas(a) -> bool:
    return type(a) is np.ndarray and a.dtype in HOST_FLOATS and a.ndim > 0


@functools.lru_cache(maxsize=64)
def ones(n: int, dtype, row: bool = False):
    """A read-only vector of n ones of `dtype` (a np.dtype or its name): shape (n,), or (1, n)
    with `row`. The callers key it by the array's dtype object: `dtype.str` builds a new string
    on every call, which cost a decode step's row sums a third of their time."""
    v = np.ones((1, n) if row else n, dtype=dtype)
    v.flags.writeable = False
    return v


def column_sums(a2, out=None):
    """a2 (rows, n) summed over its rows -> (n,), into `out` when given (a bias gradient, the
    norms' weight gradients)."""
    if _blas(a2) and a2.ndim == 2:
        return np.matmul(ones(a2.shape[0], a2.dtype), a2, out=out)
    return a2.sum(axis=0, out=out)


def row_sums(x):
    """x (..., C) summed over its last axis -> (..., 1) (row means of the norms, softmax's
    denominators)."""
    if _blas(x):
        return np.vecdot(x, ones(x.shape[-1], x.dtype))[..., None]
    return x.sum(axis=-1, keepdims=True, dtype=acc_dtype(x.dtype))


def down_sums(x):
    """x (..., n, m) summed over its second-last axis -> (..., 1, m) (a softmax whose rows run
    down, as the causal attention keeps its probabilities)."""
    if _blas(x) and x.ndim >= 2:
        return np.matmul(ones(x.shape[-2], x.dtype, row=True), x)
    return x.sum(axis=-2, keepdims=True, dtype=acc_dtype(x.dtype))
