"""Indexing: x[idx] (basic slices, integer arrays, boolean masks) and embedding lookup.

Backward scatters the gradient back. Where no position can repeat (basic indexing, one
boolean mask) that is a plain assignment into zeros. Repeated rows (an integer array on the
first axis, embedding lookups) go through `scatter_rows`, faster than numpy.add.at
(benchmarks/bench_scatter.py): ids that occur once are assigned directly; the repeated ones
are sorted and each run of equal ids summed with add.reduceat, then assigned once. (A one-hot
matrix product is not used: multithreaded BLAS makes it far slower on a busy machine.)
Any other advanced index falls back to add.at (cupyx.scatter_add on the GPU).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from autograd.backend import xp_of
from autograd.function import Function
from autograd.ops._util import as_tensor
from autograd.tensor import Tensor  # defined before autograd.tensor imports the ops


def _index_array(value, xp):
    """A Tensor, list or array index as a backend array (ints and bools kept)."""
    data = value.data if isinstance(value, Tensor) else value
    if isinstance(data, list):
        data = np.asarray(data)
    if xp_of(data) is not xp:
        data = xp.asarray(data)
    return data


def _normalize_index(idx, xp):
    """Convert Tensors/lists inside an index to backend arrays; report whether it is basic."""
    items = idx if isinstance(idx, tuple) else (idx,)
    out, advanced = [], []
    for item in items:
        if item is None or item is Ellipsis or isinstance(item, (slice, int, np.integer)):
            if isinstance(item, bool):
                raise TypeError("indexing with a Python bool is not supported; use a boolean array")
            out.append(item)
            continue
        arr = _index_array(item, xp)
        if getattr(arr, "dtype", None) is None or arr.dtype.kind not in "biu":
            raise TypeError(f"index arrays must be integer or boolean, got {getattr(arr, 'dtype', type(arr))}")
        advanced.append(arr)
        out.append(arr)
    normalized = tuple(out) if isinstance(idx, tuple) else out[0]
    return normalized, advanced


def scatter_rows(rows: Any, g2d: Any, n_rows: int) -> Any:
    """Sum the rows of g2d (n, C) into a (n_rows, C) array at row ids `rows` (n,), repeats added."""
    xp = xp_of(g2d)
    n, width = g2d.shape
    if xp is not np:
        import cupyx  # only reached with cupy arrays

        out = xp.zeros((n_rows, width), dtype=g2d.dtype)
        cupyx.scatter_add(out, rows, g2d)
        return out
    out = np.zeros((n_rows, width), dtype=g2d.dtype)
    rep_rows, rep_g = rows, g2d
    if n < n_rows:
        # Sparse ids: those that occur once are a plain row assignment; only the repeated
        # ones need sorting and summing. (With n >= V most ids repeat: sort them all.)
        once = np.bincount(rows, minlength=n_rows)[rows] == 1
        if once.all():
            out[rows] = g2d
            return out
        out[rows[once]] = g2d[once]
        repeated = ~once
        rep_rows, rep_g = rows[repeated], g2d[repeated]
    order = np.argsort(rep_rows, kind="stable")
    sorted_rows = rep_rows[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_rows[1:] != sorted_rows[:-1])))
    out[sorted_rows[starts]] = np.add.reduceat(rep_g[order], starts, axis=0)
    return out


class GetItem(Function):
    def forward(self, x, idx, mode):
        self.in_shape, self.idx, self.mode = x.shape, idx, mode
        return x[idx]

    def backward(self, g):
        xp = xp_of(g)
        shape, idx = self.in_shape, self.idx
        if self.mode == "rows":  # one integer array selecting along axis 0
            rows = idx.reshape(-1)
            rows = xp.where(rows < 0, rows + shape[0], rows)
            width = 1
            for n in shape[1:]:
                width *= n
            out = scatter_rows(rows, g.reshape(rows.shape[0], width), shape[0])
            return (out if out.shape == shape else out.reshape(shape),)
        out = xp.zeros(shape, dtype=g.dtype)
        if self.mode == "unique":
            out[idx] = g
        elif xp is np:
            np.add.at(out, idx, g)
        else:
            import cupyx  # only reached with cupy arrays

            cupyx.scatter_add(out, idx, g)
        return (out,)


def getitem(x: Tensor, idx: Any) -> Tensor:
    """x[idx] for basic indices (ints, slices, None, ...), integer arrays and boolean masks."""
    xp = x.xp
    idx, advanced = _normalize_index(idx, xp)
    if not advanced:
        mode = "unique"
    elif len(advanced) == 1 and advanced[0].dtype == bool:
        mode = "unique"  # a mask selects each position at most once
    elif len(advanced) == 1 and not isinstance(idx, tuple) and advanced[0].ndim >= 1:
        mode = "rows"
    else:
        mode = "add"
    try:
        return GetItem.apply(x, idx=idx, mode=mode)
    except IndexError as exc:
        raise IndexError(f"getitem: index {idx!r} is invalid for a tensor of shape {x.shape}: {exc}") from None


class Gather(Function):
    def forward(self, x, index, axis):
        self.in_shape, self.index, self.axis = x.shape, index, axis
        return xp_of(x).take_along_axis(x, index, axis=axis)

    def backward(self, g):
        xp = xp_of(g)
        out = xp.zeros(self.in_shape, dtype=g.dtype)
        index, axis = self.index, self.axis
        if index.shape[axis] == 1 and hasattr(xp, "put_along_axis"):  # one pick per line: no repeats
            xp.put_along_axis(out, index, g, axis=axis)
            return (out,)
        # Full coordinates for every picked element, then a scatter-add (repeats possible).
        coords = []
        for d in range(g.ndim):
            if d == axis:
                coords.append(index)
            else:
                shape = [1] * g.ndim
                shape[d] = g.shape[d]
                coords.append(xp.arange(g.shape[d]).reshape(shape))
        coords = tuple(xp.broadcast_to(c, g.shape) for c in coords)
        if xp is np:
            np.add.at(out, coords, g)
        else:
            import cupyx  # only reached with cupy arrays

            cupyx.scatter_add(out, coords, g)
        return (out,)


def gather(x: Tensor, index: Any, axis: int = -1) -> Tensor:
    """Values of x at `index` along `axis` (numpy.take_along_axis; torch.gather):
    out[..., j, ...] = x[..., index[..., j, ...], ...]. index has x's number of dimensions
    and sizes no larger than x's on the other axes."""
    from autograd.ops._util import normalize_axis

    axis = normalize_axis(axis, x.ndim, "gather")
    idx = _index_array(index, x.xp)
    if not hasattr(idx, "dtype"):
        idx = x.xp.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"gather: index must be integers, got dtype {idx.dtype}")
    if idx.ndim != x.ndim:
        raise ValueError(f"gather: index of shape {idx.shape} needs {x.ndim} dimensions like x {x.shape}")
    try:
        return Gather.apply(x, index=idx, axis=axis)
    except (IndexError, ValueError) as exc:
        raise IndexError(f"gather: index of shape {idx.shape} does not fit x of shape {x.shape} "
                         f"along axis {axis}: {exc}") from None


class Embedding(Function):
    def forward(self, weight, idx):
        self.idx, self.n_rows = idx, weight.shape[0]
        return weight.take(idx, axis=0)

    def backward(self, g):
        width = g.shape[-1]
        grad = scatter_rows(self.idx.reshape(-1), g.reshape(-1, width), self.n_rows)
        return (grad,)


def check_ids(ids: Any, n: int, op: str, what: str = "id", ignore_index: int | None = None) -> None:
    """An IndexError naming the first value of the integer array `ids` outside [0, n) (values
    equal to `ignore_index` are allowed). Costs one device-to-host sync on the GPU."""
    if not ids.size:
        return
    bad = (ids < 0) | (ids >= n)
    if ignore_index is not None:
        bad &= ids != ignore_index
    if bool(bad.any()):
        first = int(ids[bad].reshape(-1)[0])
        also = f" (or ignore_index={ignore_index})" if ignore_index is not None else ""
        raise IndexError(f"{op}: {what} {first} is outside [0, {n}){also}")


def embedding(weight: Tensor, idx: Any, check_range: bool = True) -> Tensor:
    """Rows of `weight` (V, C) at integer ids `idx` (...) -> (..., C).

    Ids outside [0, V) raise an IndexError; `check_range=False` skips that check (one
    device-to-host sync on the GPU) for a caller that has checked the ids already: an id out of
    range is then not detected (NumPy wraps negative ids). The backward
    sums the gradient rows of repeated ids (see scatter_rows), much faster than numpy.add.at.
    """
    weight = as_tensor(weight, "embedding")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be (V, C), got shape {weight.shape}")
    ids = _index_array(idx, weight.xp)
    if not hasattr(ids, "dtype"):
        ids = weight.xp.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"embedding: ids must be integers, got dtype {ids.dtype}")
    if check_range:
        check_ids(ids, weight.shape[0], "embedding")
    return Embedding.apply(weight, idx=ids)
