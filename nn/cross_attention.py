"""Cross-attention (queries from one sequence, keys and values from another) and PyTorch's masks.

B = batch, T = query positions (target), S = key positions (source / memory), C = d_model,
H = n_head, hs = C / H.

PyTorch's nn.Transformer masks say where attention is *not* allowed; the attention op here
takes a boolean mask that says where it *is* allowed. `attention_mask` converts one into the
other and checks shapes:
    attn_mask (T, S) or (B * H, T, S): bool, True = not allowed; or float, 0 = allowed and
        -inf = not allowed (what Transformer.generate_square_subsequent_mask returns). Other
        float values (a general additive bias) are refused with a message.
    key_padding_mask (B, S): bool, True = this key is padding, ignore it (float 0 / -inf too).
The result is a bool array broadcastable to (B, H, T, S), True = may attend, or None.
One difference from PyTorch: a query row with no allowed key gives zeros here (PyTorch: NaN).
"""
from __future__ import annotations

from typing import Any

import numpy as np

import autograd
from autograd.tensor import Tensor
from nn.dropout import Dropout
from nn.linear import Linear
from nn.module import Module


def _blocked(mask: Any, name: str):
    """A PyTorch-style mask as a bool array, True = not allowed."""
    arr = mask.data if isinstance(mask, Tensor) else mask
    if not hasattr(arr, "dtype"):
        arr = np.asarray(arr)
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be boolean (True = not allowed) or float (0 / -inf), got dtype {arr.dtype}")
    xp = autograd.backend.xp_of(arr)
    if not bool(xp.all((arr == 0) | xp.isneginf(arr))):
        raise ValueError(f"{name}: a float mask must hold only 0 (attend) and -inf (blocked); "
                         "general additive attention biases are not supported")
    return xp.isneginf(arr)


def attention_mask(attn_mask: Any, key_padding_mask: Any, B: int, H: int, T: int, S: int,
                   names: tuple[str, str] = ("attn_mask", "key_padding_mask")):
    """PyTorch-style masks (True / -inf = blocked) -> bool (B or 1, H or 1, T, S), True = may attend, or None.

    attn_mask: (T, S) or (B * H, T, S); key_padding_mask: (B, S). `names` label the two in errors
    (for example "tgt_mask", "tgt_key_padding_mask")."""
    allowed = None
    if attn_mask is not None:
        blocked = _blocked(attn_mask, names[0])
        if blocked.shape == (T, S):
            blocked = blocked[None, None]                             # (1, 1, T, S)
        elif blocked.shape == (B * H, T, S):
            blocked = blocked.reshape(B, H, T, S)
        else:
            raise ValueError(f"{names[0]} must have shape (T, S) = ({T}, {S}) or (B * n_head, T, S) = "
                             f"({B * H}, {T}, {S}), got {tuple(blocked.shape)}")
        allowed = ~blocked
    if key_padding_mask is not None:
        pad = _blocked(key_padding_mask, names[1])
        if pad.shape != (B, S):
            raise ValueError(f"{names[1]} must have shape (B, S) = ({B}, {S}), got {tuple(pad.shape)}")
        keep = ~pad[:, None, None, :]                                 # (B, 1, 1, S)
        if allowed is not None:
            xp = autograd.backend.xp_of(keep)
            if autograd.backend.xp_of(allowed) is not xp:
                allowed = autograd.backend.to_device(allowed, autograd.backend.device_of(keep))
        allowed = keep if allowed is None else (allowed & keep)
    return allowed


def causal_blocked(T: int, S: int | None = None) -> np.ndarray:
    """Bool (T, S), True above the diagonal (PyTorch's convention: True = not allowed); S defaults to T."""
    S = T if S is None else S
    return ~np.tril(np.ones((T, S), dtype=bool), k=S - T)


class CrossAttention(Module):
    """x (B, T, C) attends over memory (B, S, C) -> (B, T, C): the decoder's second sublayer.

    c_q: Linear(C, C) makes the queries from x; c_kv: Linear(C, 2C) makes keys then values from
    the memory (one matmul; heads side by side in each half, as in c_attn); c_proj: Linear(C, C).
    PyTorch's MultiheadAttention in_proj_weight (3C, C) maps as c_q.weight = W[:C].T and
    c_kv.weight = W[C:].T (nn/transformer_layout.py). `dropout` applies to the attention
    probabilities and to the output, as PyTorch's attention dropout plus the layer's dropout2.
    """

    def __init__(self, n_embd: int, n_head: int, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        if n_head < 1 or n_embd % n_head:
            raise ValueError(f"CrossAttention: n_embd={n_embd} must be divisible by n_head={n_head}")
        self.n_embd, self.n_head, self.head_dim = n_embd, n_head, n_embd // n_head
        self.attn_dropout = float(dropout)
        self.c_q = Linear(n_embd, n_embd, bias=bias)
        self.c_kv = Linear(n_embd, 2 * n_embd, bias=bias)
        self.c_proj = Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = Dropout(dropout)

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """memory (B, S, C) -> (k, v), each (B, H, S, hs): computed once per source and reused by
        every decoding step (pass it back as forward(..., memory_kv=...))."""
        if memory.ndim != 3 or memory.shape[-1] != self.n_embd:
            raise ValueError(f"CrossAttention: expected memory (B, S, {self.n_embd}), got {tuple(memory.shape)}")
        B, S, _ = memory.shape
        kv = self.c_kv(memory).reshape(B, S, 2 * self.n_head, self.head_dim).transpose(1, 2)  # (B, 2H, S, hs)
        k, v = autograd.split(kv, self.n_head, axis=1)                                      # 2 x (B, H, S, hs)
        return k, v

    def forward(self, x: Tensor, memory: Tensor | None = None, attn_mask: Any = None,
                memory_kv: tuple | None = None) -> Tensor:
        """x (B, T, C); memory (B, S, C) or its precomputed memory_kv; attn_mask: bool broadcastable
        to (B, H, T, S), True = may attend (see attention_mask)."""
        if x.ndim != 3 or x.shape[-1] != self.n_embd:
            raise ValueError(f"CrossAttention: expected x (B, T, {self.n_embd}), got {tuple(x.shape)}")
        if (memory is None) == (memory_kv is None):
            raise ValueError("CrossAttention: give exactly one of memory and memory_kv")
        k, v = self.memory_kv(memory) if memory_kv is None else memory_kv
        B, T, C = x.shape
        if k.shape[0] != B:
            raise ValueError(f"CrossAttention: x has batch {B} but the memory has batch {k.shape[0]}")
        q = self.c_q(x).reshape(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, hs)
        p = self.attn_dropout if self.training else 0.0
        y = autograd.scaled_dot_product_attention(q, k, v, causal=False, attn_mask=attn_mask, dropout_p=p)
        y = y.transpose(1, 2).reshape(B, T, C)                                     # (B, T, C)
        return self.resid_dropout(self.c_proj(y))

    def extra_repr(self) -> str:
        return f"n_embd={self.n_embd}, n_head={self.n_head}, dropout={self.attn_dropout}"
