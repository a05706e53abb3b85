"""Multi-head self-attention with a fused q/k/v projection, optional RoPE and a KV cache.

B = batch, T = time (new tokens), C = n_embd, H = n_head, hs = C / H head size.
KVCache holds one layer's keys and values in arrays preallocated for max_len positions;
a decode step writes its new keys and values into them in place, so no step copies the past.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import autograd
from autograd.backend import device_of, module_for_device, parse_device, to_device
from autograd.grad_mode import is_grad_enabled
from autograd.tensor import Tensor
from nn.dropout import Dropout
from nn.linear import Linear
from nn.module import Module


class KVCache:
    """Keys and values of one attention layer: k, v arrays (batch, n_head, max_len, head_dim).

    append(k, v) with k, v (batch, n_head, t, head_dim) writes positions length..length+t-1 and
    returns (k_all, v_all), Tensors that view the first `length` positions (no copy). The cache
    is for inference: appended values are detached from any graph.
    """

    def __init__(self, batch: int, n_head: int, max_len: int, head_dim: int,
                 dtype: Any = np.float32, device: str = "cpu"):
        if min(batch, n_head, max_len, head_dim) < 1:
            raise ValueError(
                f"KVCache needs positive sizes, got batch={batch}, n_head={n_head}, max_len={max_len}, head_dim={head_dim}"
            )
        kind, index = parse_device(device)
        xp = module_for_device(device)
        self.batch, self.n_head, self.max_len, self.head_dim = batch, n_head, max_len, head_dim
        shape = (batch, n_head, max_len, head_dim)
        if kind == "cuda":
            with xp.cuda.Device(index):
                self.k, self.v = xp.zeros(shape, dtype), xp.zeros(shape, dtype)
        else:
            self.k, self.v = np.zeros(shape, dtype), np.zeros(shape, dtype)
        self.length = 0

    @property
    def nbytes(self) -> int:
        return int(self.k.nbytes + self.v.nbytes)

    @property
    def device(self) -> str:
        return device_of(self.k)

    def reset(self) -> None:
        """Forget the cached positions (the buffers are reused, not freed)."""
        self.length = 0

    def append(self, k: Tensor | Any, v: Tensor | Any) -> tuple[Tensor, Tensor]:
        if is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in (k, v)):
            raise RuntimeError(
                "KVCache.append: these keys/values require grad, and the cache would cut them from the "
                "graph; run cached decoding under autograd.no_grad() (train without a cache)"
            )
        k = k.data if isinstance(k, Tensor) else k
        v = v.data if isinstance(v, Tensor) else v
        expect = (self.batch, self.n_head, self.head_dim)
        for name, a in (("k", k), ("v", v)):
            if a.ndim != 4 or (a.shape[0], a.shape[1], a.shape[3]) != expect:
                raise ValueError(
                    f"KVCache.append: {name} must be (batch={self.batch}, n_head={self.n_head}, t, "
                    f"head_dim={self.head_dim}), got {tuple(a.shape)}"
                )
        if k.shape != v.shape:
            raise ValueError(f"KVCache.append: k {tuple(k.shape)} and v {tuple(v.shape)} differ in shape")
        t = k.shape[2]
        if self.length + t > self.max_len:
            raise ValueError(
                f"KVCache full: {self.length} cached + {t} new positions exceed max_len={self.max_len}"
            )
        if device_of(k) != self.device:
            k, v = to_device(k, self.device), to_device(v, self.device)
        end = self.length + t
        self.k[:, :, self.length:end] = k  # in place into the preallocated buffer
        self.v[:, :, self.length:end] = v
        self.length = end
        return Tensor._make(self.k[:, :, :end], None), Tensor._make(self.v[:, :, :end], None)

    def __repr__(self) -> str:
        return (f"KVCache(batch={self.batch}, n_head={self.n_head}, length={self.length}/{self.max_len}, "
                f"head_dim={self.head_dim}, dtype={self.k.dtype}, device='{self.device}', nbytes={self.nbytes:,})")


class MultiHeadAttention(Module):
    """x (B, T, C) -> (B, T, C): causal (decoder) or bidirectional (encoder) self-attention.

    c_attn: Linear(C, 3C), the q, k, v projections fused in one matmul (GPT-2's layout: q, then
    k, then v along the last axis); c_proj: Linear(C, C). `rope`: a RotaryEmbedding applied to
    q and k at positions pos_offset.. ; `dropout` applies to the attention probabilities and to
    the output (training only).
    """

    def __init__(self, n_embd: int, n_head: int, bias: bool = True, dropout: float = 0.0,
                 causal: bool = True, rope: Module | None = None):
        super().__init__()
        if n_head < 1 or n_embd % n_head:
            raise ValueError(f"MultiHeadAttention: n_embd={n_embd} must be divisible by n_head={n_head}")
        self.n_embd, self.n_head, self.head_dim = n_embd, n_head, n_embd // n_head
        self.causal = bool(causal)
        self.attn_dropout = float(dropout)
        self.c_attn = Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = Dropout(dropout)
        if rope is not None and getattr(rope, "head_dim", None) != self.head_dim:
            raise ValueError(
                f"MultiHeadAttention: rope.head_dim={getattr(rope, 'head_dim', None)} must equal "
                f"n_embd / n_head = {self.head_dim}"
            )
        self.rope = rope

    def forward(self, x: Tensor, kv_cache: KVCache | None = None, pos_offset: int | None = None,
                attn_mask: Any = None) -> Tensor:
        """x (B, T, C); kv_cache: this layer's KVCache (keys/values of earlier positions);
        pos_offset: position of x[:, 0] (defaults to the cache length, else 0);
        attn_mask: optional bool broadcastable to (B, H, T, T_total), True = may attend."""
        if x.ndim != 3 or x.shape[-1] != self.n_embd:
            raise ValueError(f"MultiHeadAttention: expected x (B, T, {self.n_embd}), got {tuple(x.shape)}")
        B, T, C = x.shape
        H, hs = self.n_head, self.head_dim
        cached = 0 if kv_cache is None else kv_cache.length
        if pos_offset is None:
            pos_offset = cached
        elif kv_cache is not None and pos_offset != cached:
            raise ValueError(f"MultiHeadAttention: pos_offset={pos_offset} but the KV cache holds {cached} positions")

        qkv = self.c_attn(x)                                    # (B, T, 3C)
        q, k, v = autograd.chunk(qkv, 3, axis=-1)               # 3 x (B, T, C)
        q = q.reshape(B, T, H, hs).transpose(1, 2)              # (B, H, T, hs)
        k = k.reshape(B, T, H, hs).transpose(1, 2)              # (B, H, T, hs)
        v = v.reshape(B, T, H, hs).transpose(1, 2)              # (B, H, T, hs)
        if self.rope is not None:
            q = self.rope.apply(q, offset=pos_offset)
            k = self.rope.apply(k, offset=pos_offset)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)                        # (B, H, cached + T, hs) views

        p = self.attn_dropout if self.training else 0.0
        y = autograd.scaled_dot_product_attention(q, k, v, causal=self.causal, attn_mask=attn_mask,
                                                  dropout_p=p)  # (B, H, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)                  # (B, T, C), heads side by side
        return self.resid_dropout(self.c_proj(y))

    def extra_repr(self) -> str:
        rope = ", rope" if self.rope is not None else ""
        return f"n_embd={self.n_embd}, n_head={self.n_head}, causal={self.causal}, dropout={self.attn_dropout}{rope}"
