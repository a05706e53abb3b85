"""Shape and axis movement: reshape/view, transpose, permute, squeeze, unsqueeze,
expand/broadcast_to, flatten.

Forward returns a view whenever the backend can (reshape of a contiguous array, every
transpose, every expand); backward is the inverse movement of the gradient.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from autograd.backend import xp_of
from autograd.function import Function, unbroadcast
from autograd.ops._util import normalize_axis, shape_of_args

if TYPE_CHECKING:
    from autograd.tensor import Tensor


class Reshape(Function):
    def forward(self, x, shape):
        self.in_shape = x.shape
        return x.reshape(shape)

    def backward(self, g):
        return (g.reshape(self.in_shape),)


class Transpose(Function):
    def forward(self, x, a, b):
        self.a, self.b = a, b
        return x.swapaxes(a, b)

    def backward(self, g):
        return (g.swapaxes(self.a, self.b),)


class Permute(Function):
    def forward(self, x, axes):
        self.inverse = tuple(int(i) for i in np.argsort(axes))
        return x.transpose(axes)

    def backward(self, g):
        return (g.transpose(self.inverse),)


class Expand(Function):
    def forward(self, x, shape):
        self.in_shape = x.shape
        return xp_of(x).broadcast_to(x, shape)

    def backward(self, g):
        return (unbroadcast(g, self.in_shape),)


def _resolve_shape(in_shape: tuple, size: int, shape: tuple, op: str) -> tuple:
    """Replace one -1 by the size that makes the element counts agree, or raise clearly."""
    unknown = [i for i, n in enumerate(shape) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in shape):
        raise ValueError(f"{op}: invalid target shape {shape} (at most one -1, no other negatives)")
    known = 1
    for n in shape:
        if n != -1:
            known *= n
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"{op}: cannot reshape a tensor of shape {in_shape} (size {size}) into {shape}")
        shape = shape[: unknown[0]] + (size // known,) + shape[unknown[0] + 1:]
    elif known != size:
        raise ValueError(f"{op}: cannot reshape a tensor of shape {in_shape} (size {size}) into {shape}")
    return shape


def reshape(x: Tensor, *shape: int) -> Tensor:
    """x with a new shape (one entry may be -1); a view when x is contiguous."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    if shape == x.shape:
        return x
    try:
        return Reshape.apply(x, shape=shape)  # the backend resolves -1 and checks the size
    except (ValueError, TypeError):
        # Say clearly what was wrong (the backend's message names neither op nor shapes).
        _resolve_shape(x.shape, x.size, shape_of_args(shape, "reshape"), "reshape")
        raise


view = reshape


def transpose(x: Tensor, a: int = -2, b: int = -1) -> Tensor:
    """Swap axes a and b (a view)."""
    if x.ndim < 2:
        raise ValueError(f"transpose: needs at least 2 dimensions, got shape {x.shape}")
    a, b = normalize_axis(a, x.ndim, "transpose"), normalize_axis(b, x.ndim, "transpose")
    if a == b:
        return x
    return Transpose.apply(x, a=a, b=b)


def permute(x: Tensor, *axes: int) -> Tensor:
    """Reorder the axes: out.shape[i] == x.shape[axes[i]] (a view)."""
    axes = shape_of_args(axes, "permute")
    if sorted(a % max(x.ndim, 1) for a in axes) != list(range(x.ndim)) or len(axes) != x.ndim:
        raise ValueError(f"permute: axes {axes} are not a permutation of the {x.ndim} axes of shape {x.shape}")
    axes = tuple(a % x.ndim for a in axes)
    if axes == tuple(range(x.ndim)):
        return x
    return Permute.apply(x, axes=axes)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    """Drop size-1 axes (all of them, or the given int/tuple, which must have size 1)."""
    if axis is None:
        shape = tuple(n for n in x.shape if n != 1)
    else:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
        axes = {normalize_axis(a, x.ndim, "squeeze") for a in axes}
        for a in axes:
            if x.shape[a] != 1:
                raise ValueError(f"squeeze: axis {a} of shape {x.shape} has size {x.shape[a]}, not 1")
        shape = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    return reshape(x, shape)


def unsqueeze(x: Tensor, axis: int) -> Tensor:
    """Insert a size-1 axis at `axis` (negative counts from the end of the result)."""
    axis = normalize_axis(axis, x.ndim + 1, "unsqueeze")
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def flatten(x: Tensor, start: int = 0, end: int = -1) -> Tensor:
    """Merge axes start..end (inclusive) into one."""
    if x.ndim == 0:
        return reshape(x, (1,))
    start, end = normalize_axis(start, x.ndim, "flatten"), normalize_axis(end, x.ndim, "flatten")
    if start > end:
        raise ValueError(f"flatten: start axis {start} comes after end axis {end}")
    merged = 1
    for n in x.shape[start:end + 1]:
        merged *= n
    return reshape(x, x.shape[:start] + (merged,) + x.shape[end + 1:])


def broadcast_to(x: Tensor, shape: Sequence[int] | int) -> Tensor:
    """x broadcast to `shape` (a read-only view); backward sums over the broadcast axes."""
    shape = shape_of_args((shape,) if isinstance(shape, (int, np.integer)) else tuple(shape), "broadcast_to")
    if shape == x.shape:
        return x
    try:
        np.broadcast_shapes(x.shape, shape)
        if len(shape) < x.ndim or np.broadcast_shapes(x.shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(f"broadcast_to: cannot broadcast a tensor of shape {x.shape} to {shape}") from None
    return Expand.apply(x, shape=shape)


def expand(x: Tensor, *shape: int) -> Tensor:
    """Like broadcast_to; an entry of -1 keeps that axis's size."""
    shape = shape_of_args(shape, "expand")
    lead = len(shape) - x.ndim
    if lead < 0:
        raise ValueError(f"expand: target {shape} has fewer dimensions than shape {x.shape}")
    shape = tuple(x.shape[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(shape))
    return broadcast_to(x, shape)
