"""Joining and splitting along an axis: concat, stack, split, chunk."""
from __future__ import annotations

from autograd.backend import xp_of
from autograd.function import Function
from autograd.ops._util import as_tensor, normalize_axis, same_device


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


def concat(tensors, axis: int = 0):
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


def stack(tensors, axis: int = 0):
    """Join same-shaped tensors along a new axis."""
    ts = _tensors(tensors, "stack")
    first = ts[0]
    for t in ts[1:]:
        if t.shape != first.shape:
            raise ValueError(f"stack: all tensors must have one shape, got {first.shape} and {t.shape}")
    axis = normalize_axis(axis, first.ndim + 1, "stack")
    return Stack.apply(*ts, axis=axis)


def split(x, size_or_sections, axis: int = 0) -> list:
    """Pieces of x along `axis`: an int gives pieces of that size (the last may be smaller),
    a list gives the size of each piece (they must add up to the axis length)."""
    from autograd.ops.index import getitem

    axis = normalize_axis(axis, x.ndim, "split")
    length = x.shape[axis]
    if isinstance(size_or_sections, int):
        if size_or_sections <= 0:
            raise ValueError(f"split: piece size must be positive, got {size_or_sections}")
        sizes = [size_or_sections] * (length // size_or_sections)
        if length % size_or_sections:
            sizes.append(length % size_or_sections)
    else:
        sizes = [int(s) for s in size_or_sections]
        if sum(sizes) != length or any(s < 0 for s in sizes):
            raise ValueError(
                f"split: sections {sizes} do not add up to size {length} of axis {axis} (shape {x.shape})"
            )
    lead = (slice(None),) * axis
    pieces, start = [], 0
    for s in sizes:
        pieces.append(getitem(x, lead + (slice(start, start + s),)))
        start += s
    return pieces


def chunk(x, n: int, axis: int = 0) -> list:
    """Split into `n` pieces of size ceil(len / n) along `axis` (fewer if it runs out)."""
    if n <= 0:
        raise ValueError(f"chunk: number of chunks must be positive, got {n}")
    axis = normalize_axis(axis, x.ndim, "chunk")
    length = x.shape[axis]
    size = max(-(-length // n), 1)
    return split(x, size, axis)
