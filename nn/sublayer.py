"""A residual sublayer's wiring: where its norm sits and whether the skip is there.

    pre-norm (GPT-2):    x + f(norm(x))        residual=False: f(norm(x))
    post-norm (2017):    norm(x + f(x))        residual=False: norm(f(x))

The one definition of the wiring for nn's Transformer layers, the GPT block (Tensors and raw
decode-step arrays alike) and the gradient-flow study's blocks.
"""
from __future__ import annotations

from typing import Any, Callable


def sublayer(x: Any, norm: Callable, f: Callable, prenorm: bool = True, residual: bool = True,
             args: tuple = ()) -> tuple:
    """(f's output, the new stream) for the stream x (..., C): f(norm(x), *args) or f(x, *args)
    by `prenorm`, added to x when `residual`; the same shape as x."""
    if prenorm:
        out = f(norm(x), *args)
        return out, (x + out if residual else out)
    out = f(x, *args)
    return out, norm(x + out if residual else out)
