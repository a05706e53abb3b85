"""rope: the rotary position embedding's rotation of queries or keys, forward and backward.

Half-split layout (GPT-NeoX, LLaMA in Hugging Face form): with h = hs / 2, the pair
(x[..., i], x[..., i + h]) is rotated by the angle whose cosine and sine are cos[t, i], sin[t, i]:
    out[..., :h] = x1 cos - x2 sin,   out[..., h:] = x1 sin + x2 cos
The rotation is orthogonal, so backward rotates the gradient by the opposite angles:
    g_x1 = g1 cos + g2 sin,           g_x2 = g2 cos - g1 sin
Shapes: x (..., T, hs), cos and sin (T, hs / 2) constants (not differentiated).

Both directions are one formula over whole heads, x <- x c +/- swap(x) s with c = [cos, cos],
s = [-sin, sin] and swap(x) = [x2, x1] (`rotation_tables`, `rotate_into`): three passes along
whole rows of heads instead of the halves' six passes over half rows. The same bits as the
halves' formulas: x2 (-sin) is -(x2 sin) exactly, and a sum does not depend on its order.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from autograd.backend import xp_of
from autograd.function import Function

SCRATCH_BYTES = 1 << 20   # a NumPy scratch this small stays in cache, and off the allocator's fresh pages


def rotation_tables(cos, sin, heads: int | None = None) -> tuple:
    """(c, s) = ([cos, cos], [-sin, sin]) along the last axis from cos, sin (T, hs / 2): each
    (T, hs), or (T, heads, hs) repeated for `heads` heads side by side (contiguous, so that a
    product over a row's heads runs as one)."""
    xp = xp_of(cos)
    c, s = xp.concatenate([cos, cos], axis=-1), xp.concatenate([-sin, sin], axis=-1)   # (T, hs)
    if heads is not None:
        shape = (c.shape[0], heads, c.shape[1])
        c, s = (xp.ascontiguousarray(xp.broadcast_to(a[:, None], shape)) for a in (c, s))
    return c, s


def rotate_into(x, tables: tuple, inverse: bool = False) -> None:
    """Rotate x (..., hs) in place (it may be a view) by rotation_tables' (c, s), which broadcast
    against it, or by the opposite angles (inverse: the backward); one scratch of x's size."""
    c, s = tables
    swapped = _swapped(x, s)
    x *= c
    _add(x, swapped, inverse)


def _swapped(x, s):
    """swap(x) s for x (..., hs) and s broadcasting against it -> a new array of x's shape."""
    h = x.shape[-1] // 2
    # one product: each head's (2, h) halves read in reverse order
    out = x.reshape(*x.shape[:-1], 2, h)[..., ::-1, :] * s.reshape(*s.shape[:-1], 2, h)
    return out.reshape(out.shape[:-2] + (2 * h,))


def rotate_array(x, cos, sin):
    """x (..., T, hs) rotated by cos, sin (T, hs / 2), all arrays -> a new array of x's shape:
    the forward of the Rotate op, and a layer's no-graph decode step (nn/arrays.py)."""
    return _rotated_copy(x, rotation_tables(cos, sin))


def _rotated_copy(x, tables: tuple, inverse: bool = False):
    """rotate_into on a new array, x c +/- swap(x) s: one pass fewer than a copy rotated in place.
    A large NumPy x has swap(x) s made by slabs of its first axis of at most SCRATCH_BYTES."""
    c, s = tables
    out = x * c
    if out.nbytes <= SCRATCH_BYTES or out.ndim < 3 or type(out) is not np.ndarray:
        _add(out, _swapped(x, s), inverse)
        return out
    step = max(1, SCRATCH_BYTES // out[0].nbytes)
    for i in range(0, len(out), step):
        _add(out[i:i + step], _swapped(x[i:i + step], s), inverse)
    return out


def _add(out, swapped, inverse: bool) -> None:
    if inverse:
        out -= swapped
    else:
        out += swapped


class Rotate(Function):
    def forward(self, x, cos, sin):
        self.tables = rotation_tables(cos, sin)
        return _rotated_copy(x, self.tables)

    def backward(self, g):
        return (_rotated_copy(g, self.tables, inverse=True),)


def rope(x: Any, cos: Any, sin: Any):
    """x (..., T, hs) Tensor rotated pairwise by cos, sin arrays (T, hs / 2) of x's backend and
    dtype -> Tensor of x's shape and dtype."""
    h = x.shape[-1] // 2
    if x.ndim < 2 or x.shape[-1] % 2 or tuple(cos.shape) != (x.shape[-2], h) or cos.shape != sin.shape:
        raise ValueError(f"rope: expected x (..., T, hs) with an even hs and cos, sin (T, hs / 2); got x "
                         f"{tuple(x.shape)}, cos {tuple(cos.shape)}, sin {tuple(sin.shape)}")
    return Rotate.apply(x, cos=cos, sin=sin)
