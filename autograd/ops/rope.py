"""rope: the rotary position embedding's rotation of queries or keys, forward and backward.

Half-split layout (GPT-NeoX, LLaMA in Hugging Face form): with h = hs / 2, the pair
(x[..., i], x[..., i + h]) is rotated by the angle whose cosine and sine are cos[t, i], sin[t, i]:
    out[..., :h] = x1 cos - x2 sin,   out[..., h:] = x1 sin + x2 cos
The rotation is orthogonal, so backward rotates the gradient by the opposite angles:
    g_x1 = g1 cos + g2 sin,           g_x2 = g2 cos - g1 sin
Shapes: x (..., T, hs), cos and sin (T, hs / 2) constants (not differentiated).
"""
from __future__ import annotations

from typing import Any

from autograd.function import Function


def rotate_array(x, cos, sin):
    """x (..., T, hs) rotated by cos, sin (T, hs / 2), all arrays -> a new array of x's shape:
    the forward of the Rotate op, and a layer's no-graph decode step (nn/arrays.py)."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    out = x.copy()
    out[..., :h] = x1 * cos - x2 * sin
    out[..., h:] = x1 * sin + x2 * cos
    return out


class Rotate(Function):
    def forward(self, x, cos, sin):
        self.cos, self.sin = cos, sin
        return rotate_array(x, cos, sin)

    def backward(self, g):
        h = g.shape[-1] // 2
        cos, sin = self.cos, self.sin
        g1, g2 = g[..., :h], g[..., h:]
        gx = g.copy()
        gx[..., :h] = g1 * cos + g2 * sin
        gx[..., h:] = g2 * cos - g1 * sin
        return (gx,)


def rope(x: Any, cos: Any, sin: Any):
    """x (..., T, hs) Tensor rotated pairwise by cos, sin arrays (T, hs / 2) of x's backend and
    dtype -> Tensor of x's shape and dtype."""
    h = x.shape[-1] // 2
    if x.ndim < 2 or x.shape[-1] % 2 or tuple(cos.shape) != (x.shape[-2], h) or cos.shape != sin.shape:
        raise ValueError(f"rope: expected x (..., T, hs) with an even hs and cos, sin (T, hs / 2); got x "
                         f"{tuple(x.shape)}, cos {tuple(cos.shape)}, sin {tuple(sin.shape)}")
    return Rotate.apply(x, cos=cos, sin=sin)
