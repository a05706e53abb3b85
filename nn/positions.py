"""Positional encodings: a learned table, the fixed sinusoids of "Attention Is All You Need",
and rotary embeddings (RoPE) that rotate queries and keys by their position.

LearnedPositions and SinusoidalPositions return vectors to add to the token embeddings;
RotaryEmbedding is applied inside attention to q and k, with an offset so that a cached
decode step at position t rotates its single query exactly as the full sequence would.

The fixed tables (sinusoids, RoPE's cos and sin) are built lazily: they grow to the positions
used, at most doubling each time, never beyond block_size / max_len. Row p depends on p only,
so a grown table holds the same bits an eager one would, and a model whose block_size is huge
costs memory only for the positions it sees.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import autograd
from autograd.backend import device_of, to_device, xp_of
from autograd.ops.rope import rope, rotate_array
from autograd.tensor import Tensor
from nn import init
from nn.module import Module, Parameter


def _grown_rows(have: int, needed: int, limit: int) -> int:
    """Rows of a lazily grown table that must hold `needed`: at least double, so decoding one
    position at a time rebuilds it O(log n) times; never past `limit`."""
    return min(limit, max(needed, 2 * have))


def _positions(pos: Any, offset: int, limit: int, name: str):
    """(kind, value): ('range', (start, stop)) for an int length, ('index', array) for position ids."""
    if isinstance(pos, (int, np.integer)) and not isinstance(pos, bool):
        T = int(pos)
        if T < 0 or offset < 0:
            raise ValueError(f"{name}: length and offset must be >= 0, got T={T}, offset={offset}")
        if offset + T > limit:
            raise ValueError(
                f"{name}: positions {offset}..{offset + T - 1} exceed the table's {limit} positions "
                f"(block_size / max_len={limit})"
            )
        return "range", (offset, offset + T)
    arr = pos.data if isinstance(pos, Tensor) else pos
    if getattr(arr, "dtype", None) is None or arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an int length or an integer array of positions, got {type(pos).__name__}")
    if arr.size and (int(arr.min()) + offset < 0 or int(arr.max()) + offset >= limit):
        raise ValueError(f"{name}: a position is outside 0..{limit - 1} (block_size / max_len={limit})")
    return "index", (arr + offset if offset else arr)


class LearnedPositions(Module):
    """A trained table of position vectors (GPT-2's `wpe`): weight (block_size, n_embd), N(0, 0.02).

    forward(T, offset=0) -> (T, n_embd) for positions offset..offset+T-1, or forward(pos int array
    (...)) -> (..., n_embd).
    """

    def __init__(self, block_size: int, n_embd: int):
        super().__init__()
        self.block_size, self.n_embd = int(block_size), int(n_embd)
        self.weight = init.normal_(Parameter(np.empty((block_size, n_embd), np.float32)), std=0.02)

    def forward(self, pos: Any, offset: int = 0) -> Tensor:
        kind, value = _positions(pos, offset, self.block_size, "LearnedPositions")
        if kind == "range":
            start, stop = value
            return self.weight[start:stop]  # (T, C)
        return autograd.embedding(self.weight, value)

    def extra_repr(self) -> str:
        return f"{self.block_size}, {self.n_embd}"


def sinusoidal_table(T: int, C: int, offset: int = 0, base: float = 10000.0, dtype=np.float32) -> np.ndarray:
    """(T, C) numpy table, row p for position offset + p:

        PE[p, 2i] = sin(p / base**(2i / C)),   PE[p, 2i + 1] = cos(p / base**(2i / C))

    (Vaswani et al., 2017). Computed in float64, returned in `dtype`.
    """
    if T < 0 or C < 1 or offset < 0:
        raise ValueError(f"sinusoidal_table needs T >= 0, C >= 1, offset >= 0; got T={T}, C={C}, offset={offset}")
    pos = np.arange(offset, offset + T, dtype=np.float64)[:, None]          # (T, 1)
    inv_freq = base ** (-np.arange(0, C, 2, dtype=np.float64) / C)          # (ceil(C/2),)
    angles = pos * inv_freq                                                 # (T, ceil(C/2))
    table = np.empty((T, C), np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : C // 2])
    return table.astype(dtype)


class SinusoidalPositions(Module):
    """Fixed sinusoid position vectors (no parameters): forward(T, offset=0) -> (T, n_embd) in
    the dtype and on the device the module was moved to (float32 by default)."""

    def __init__(self, block_size: int, n_embd: int, base: float = 10000.0):
        super().__init__()
        self.block_size, self.n_embd, self.base = int(block_size), int(n_embd), float(base)
        self.register_buffer("table", sinusoidal_table(0, n_embd, base=base), persistent=False)  # grown in _table
        self._exact_dtype = self.table.dtype

    def _table(self, stop: int):
        """The buffer with at least `stop` rows, recomputed from the formula when it is short or
        was cast (float32 cast to float64 is not exact)."""
        have = self.table.shape[0]
        if have < stop or self.table.dtype != self._exact_dtype:
            rows = _grown_rows(have, stop, self.block_size) if have < stop else have
            host = sinusoidal_table(rows, self.n_embd, base=self.base, dtype=self.table.dtype)
            self.table = to_device(host, device_of(self.table))
            self._exact_dtype = self.table.dtype
        return self.table

    def forward(self, pos: Any, offset: int = 0) -> Tensor:
        kind, value = _positions(pos, offset, self.block_size, "SinusoidalPositions")
        if kind == "range":
            start, stop = value
            return Tensor(self._table(stop)[start:stop])  # (T, C), a constant
        return Tensor(self._table(int(value.max()) + 1 if value.size else 0)[value])

    def extra_repr(self) -> str:
        return f"{self.block_size}, {self.n_embd}"


class RotaryEmbedding(Module):
    """RoPE (Su et al., 2021) in the half-split layout (GPT-NeoX, LLaMA in Hugging Face form).

    Frequency i (0 <= i < head_dim/2) is theta_i = base**(-2i / head_dim); position p rotates
    the pair (x_i, x_{i + head_dim/2}) by p * theta_i. Then q_m . k_n depends on m - n only.
    rotate(x (B, H, T, head_dim), offset=0) (also its forward) -> same shape; the tables are
    buffers (not saved), float64 (n, head_dim/2) grown to the positions used.
    """

    def __init__(self, head_dim: int, max_len: int, base: float = 10000.0):
        super().__init__()
        if head_dim < 2 or head_dim % 2:
            raise ValueError(f"RotaryEmbedding needs an even head_dim >= 2, got {head_dim}")
        self.head_dim, self.max_len, self.base = int(head_dim), int(max_len), float(base)
        cos, sin = self._host_tables(0)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def _host_tables(self, n: int) -> tuple:
        """cos, sin float64 (n, head_dim/2) of positions 0..n-1."""
        inv_freq = self.base ** (-np.arange(0, self.head_dim, 2, dtype=np.float64) / self.head_dim)  # (hs/2,)
        angles = np.arange(n, dtype=np.float64)[:, None] * inv_freq                                 # (n, hs/2)
        return np.cos(angles), np.sin(angles)

    def _grow(self, stop: int) -> None:
        """Make the tables hold positions 0..stop-1, in their current dtype and on their device."""
        have = self.cos.shape[0]
        if have >= stop:
            return
        cos, sin = self._host_tables(_grown_rows(have, stop, self.max_len))
        device = device_of(self.cos)
        self.cos = to_device(cos.astype(self.cos.dtype, copy=False), device)
        self.sin = to_device(sin.astype(self.sin.dtype, copy=False), device)

    def rotate(self, x: Tensor, offset: int = 0) -> Tensor:
        """x (..., T, head_dim) at positions offset..offset+T-1 -> rotated, same shape and dtype."""
        return rope(x, *self._tables(x.data, offset))

    forward = rotate

    def step(self, q, k, offset: int) -> tuple:
        """rotate of raw arrays q and k (..., T, head_dim) at the same positions (no graph; see
        nn/arrays.py) -> (q, k) rotated."""
        cos, sin = self._tables(q, offset)
        return rotate_array(q, cos, sin), rotate_array(k, cos, sin)

    def _tables(self, x, offset: int) -> tuple:
        """cos, sin (T, head_dim / 2) for the positions of array x (..., T, head_dim), in its dtype."""
        if x.ndim < 2 or x.shape[-1] != self.head_dim:
            raise ValueError(f"RotaryEmbedding(head_dim={self.head_dim}): expected x (..., T, {self.head_dim}), "
                             f"got shape {tuple(x.shape)}")
        T = x.shape[-2]
        _positions(T, offset, self.max_len, "RotaryEmbedding")
        if xp_of(self.cos) is not xp_of(x):  # used standalone on another device: move the tables once
            self.to(device_of(x))
        self._grow(offset + T)
        cos = self.cos[offset:offset + T].astype(x.dtype, copy=False)  # (T, hs/2)
        sin = self.sin[offset:offset + T].astype(x.dtype, copy=False)
        return cos, sin

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, max_len={self.max_len}, base={self.base:g}"

