"""Joining and splitting along an axis: concat, stack, split, chunk."""
from __future__ import annotations

import builtins
from typing import Sequence

import numpy as np

from autograd.backend import xp_of
from autograd.function import Function
from autograd.grad_mode import is_grad_enabled
from autograd.ops._util import as_tensor, normalize_axis, same_device
from autograd.tensor import Tensor  # defined before autograd.tensor imports the ops


class Concat(Function):
    def forward(self, *arrays, axis):
        self.axis = axis
        self.bounds = []
        start = 0
        for a in arrays:
            self.bounds.append((start, start + a.shape[axis]))
            start += a.shape[axis]
        return xp_of(arrays[0]).concatenate(arrays, axis=axis)

    def backward(self, g):
        lead = (slice(None),) * self.axis
        return tuple(
            g[lead + (slice(lo, hi),)] if need else None
            for (lo, hi), need in zip(self.bounds, self.needs_input_grad)
        )


class Stack(Function):
    def forward(self, *arrays, axis):
        self.axis = axis
        return xp_of(arrays[0]).stack(arrays, axis=axis)

    def backward(self, g):
        lead = (slice(None),) * self.axis
        return tuple(g[lead + (i,)] if need else None for i, need in enumerate(self.needs_input_grad))


def _tensors(tensors, op: str) -> list:
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError(f"{op}: expects a non-empty list of tensors")
    out = [as_tensor(t, op) for t in tensors]
    same_device(out, op)
    return out


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis; all other sizes must match."""
    ts = _tensors(tensors, "concat")
    first = ts[0]
    if first.ndim == 0:
        raise ValueError("concat: zero-dimensional tensors cannot be concatenated; use stack")
    axis = normalize_axis(axis, first.ndim, "concat")
    for t in ts[1:]:
        if t.ndim != first.ndim or any(
            n != m for i, (n, m) in enumerate(zip(t.shape, first.shape)) if i != axis
        ):
            raise ValueError(
                f"concat: shapes {first.shape} and {t.shape} differ outside axis {axis}"
            )
    if len(ts) == 1:
        return first
    return Concat.apply(*ts, axis=axis)


cat = concat


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join same-shaped tensors along a new axis."""
    ts = _tensors(tensors, "stack")
    first = ts[0]
    for t in ts[1:]:
        if t.shape != first.shape:
            raise ValueError(f"stack: all tensors must have one shape, got {first.shape} and {t.shape}")
    axis = normalize_axis(axis, first.ndim + 1, "stack")
    return Stack.apply(*ts, axis=axis)


class _SplitGather(Function):
    """The one node between the pieces of a split and its input: the pieces' backwards write
    into one shared buffer, which reaches the input as a single gradient (no per-piece
    full-size zeros and no sum of them). The buffer starts uninitialised; only the pieces
    that received no gradient are zero-filled, when the input's gradient is handed on."""

    def __init__(self, shape, axis, bounds):
        self.shape, self.axis, self.bounds = shape, axis, bounds
        self.buffer, self.written = None, set()

    def _piece(self, lo, hi):
        return (slice(None),) * self.axis + (slice(lo, hi),)

    def slot(self, g, lo, hi):
        """Write a piece's gradient; return the buffer to the first writer of this pass."""
        first = self.buffer is None
        if first:
            self.buffer, self.written = xp_of(g).empty(self.shape, dtype=g.dtype), set()
        self.buffer[self._piece(lo, hi)] = g
        self.written.add((lo, hi))
        return self.buffer if first else None

    def backward(self, g):
        for lo, hi in self.bounds:
            if (lo, hi) not in self.written:
                g[self._piece(lo, hi)] = 0
        self.buffer = None  # the next pass (retain_graph=True) starts a new buffer
        return (g,)


class _SplitPiece(Function):
    def __init__(self, gather, lo, hi):
        self.gather, self.lo, self.hi = gather, lo, hi

    def backward(self, g):
        return (self.gather.slot(g, self.lo, self.hi),)


def _split_sizes(x, size_or_sections, axis: int) -> list:
    length = x.shape[axis]
    if isinstance(size_or_sections, (int, np.integer)):
        size = int(size_or_sections)
        if size <= 0:
            raise ValueError(f"split: piece size must be positive, got {size}")
        sizes = [size] * (length // size)
        if length % size:
            sizes.append(length % size)
        return sizes
    sizes = [int(s) for s in size_or_sections]
    if builtins.sum(sizes) != length or builtins.any(s < 0 for s in sizes):
        raise ValueError(
            f"split: sections {sizes} do not add up to size {length} of axis {axis} (shape {x.shape})"
        )
    return sizes


def split(x: Tensor, size_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Pieces of x along `axis` (views): an int gives pieces of that size (the last may be
    smaller), a list gives the size of each piece (they must add up to the axis length)."""
    axis = normalize_axis(axis, x.ndim, "split")
    sizes = _split_sizes(x, size_or_sections, axis)
    lead = (slice(None),) * axis
    bounds, start = [], 0
    for s in sizes:
        bounds.append((start, start + s))
        start += s
    views = [x.data[lead + (slice(lo, hi),)] for lo, hi in bounds]
    if not (x.requires_grad and is_grad_enabled()):
        return [Tensor._make(v, None) for v in views]
    gather = _SplitGather(x.shape, axis, bounds)
    gather.needs_input_grad = (True,)
    gather.parents = (x._node if x._node is not None else x,)
    pieces = []
    for v, (lo, hi) in zip(views, bounds):
        node = _SplitPiece(gather, lo, hi)
        node.needs_input_grad, node.parents = (True,), (gather,)
        pieces.append(Tensor._make(v, node))
    return pieces


def chunk(x: Tensor, n: int, axis: int = 0) -> list[Tensor]:
    """Split into `n` pieces of size ceil(len / n) along `axis` (fewer if it runs out)."""
    if n <= 0:
        raise ValueError(f"chunk: number of chunks must be positive, got {n}")
    axis = normalize_axis(axis, x.ndim, "chunk")
    length = x.shape[axis]
    size = max(-(-length // n), 1)
    return split(x, size, axis)
