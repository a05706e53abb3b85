"""Multi-head self-attention with a fused q/k/v projection, optional RoPE and a KV cache.

B = batch, T = time (new tokens), C = n_embd, H = n_head, hs = C / H head size.
KVCache holds one layer's keys and values in arrays preallocated for max_len positions;
a decode step writes its new keys and values into them in place, so no step copies the past.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import autograd
from autograd.backend import device_of, module_for_device, parse_device, to_device, to_device_of
from autograd.grad_mode import is_grad_enabled
from autograd.ops import attention as attention_ops
from autograd.ops import self_attention
from autograd.ops.norm import RMS_NORM_EPS
from autograd.tensor import Tensor
from nn import arrays
from nn.dropout import Dropout
from nn.linear import Linear
from nn.module import Module
from nn.norm import RMSNorm


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
        self._row_shape = (batch, n_head, head_dim)
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

    def reorder(self, rows: Any) -> None:
        """Row i becomes former row rows[i] (beam search selecting and duplicating beams)."""
        L = self.length
        idx = to_device(np.asarray(rows, dtype=np.int64), self.device)
        self.k[:, :, :L] = self.k[idx, :, :L]  # fancy indexing copies first: no aliasing
        self.v[:, :, :L] = self.v[idx, :, :L]

    def append(self, k: Tensor | Any, v: Tensor | Any) -> tuple[Tensor, Tensor]:
        if is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in (k, v)):
            raise RuntimeError(
                "KVCache.append: these keys/values require grad, and the cache would cut them from the "
                "graph; run cached decoding under autograd.no_grad() (train without a cache)"
            )
        k_all, v_all = self.write(k.data if isinstance(k, Tensor) else k, v.data if isinstance(v, Tensor) else v)
        return Tensor._make(k_all, None), Tensor._make(v_all, None)

    def write(self, k: Any, v: Any) -> tuple[Any, Any]:
        """append on raw arrays: k, v (batch, n_head, t, head_dim) -> views of every cached position."""
        ks = k.shape
        if len(ks) != 4 or ks != v.shape or (ks[0], ks[1], ks[3]) != self._row_shape:
            raise ValueError(
                f"KVCache.append: k and v must both be (batch={self.batch}, n_head={self.n_head}, t, "
                f"head_dim={self.head_dim}), got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        start = self.length
        end = start + ks[2]
        if end > self.max_len:
            raise ValueError(
                f"KVCache full: {start} cached + {ks[2]} new positions exceed max_len={self.max_len}"
            )
        k, v = to_device_of(k, self.k), to_device_of(v, self.k)   # NumPy into a GPU cache, or back
        self.k[:, :, start:end] = k  # in place into the preallocated buffer
        self.v[:, :, start:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def __repr__(self) -> str:
        return (f"KVCache(batch={self.batch}, n_head={self.n_head}, length={self.length}/{self.max_len}, "
                f"head_dim={self.head_dim}, dtype={self.k.dtype}, device='{self.device}', nbytes={self.nbytes:,})")


class MultiHeadAttention(Module):
    """x (B, T, C) -> (B, T, C): causal (decoder) or bidirectional (encoder) self-attention.

    c_attn: Linear(C, 3C), the q, k, v projections fused in one matmul (GPT-2's layout: q, then
    k, then v along the last axis); c_proj: Linear(C, C). `rope`: a RotaryEmbedding applied to
    q and k at positions pos_offset.. ; `dropout` applies to the attention probabilities and to
    the output (training only). qk_norm: q and k are RMS-normalised per head before RoPE and the
    scores (q_norm, k_norm: RMSNorm(hs) with a learned gain each, as in modded-nanoGPT and OLMo 2),
    which bounds the logits of the softmax whatever the scale of the projections.

    `hook`: None, or a function (name, Tensor) -> Tensor through which forward passes the points
    of HOOKS, spelling the attention out (gpt/inspect/hooks.py lists them with their shapes).
    """

    HOOKS = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z")
    hook = None

    def __init__(self, n_embd: int, n_head: int, bias: bool = True, dropout: float = 0.0,
                 causal: bool = True, rope: Module | None = None, qk_norm: bool = False,
                 norm_eps: float = RMS_NORM_EPS, n_kv_head: int | None = None, qkv_bias: bool | None = None):
        super().__init__()
        if n_head < 1 or n_embd % n_head:
            raise ValueError(f"MultiHeadAttention: n_embd={n_embd} must be divisible by n_head={n_head}")
        n_kv_head = n_head if n_kv_head is None else int(n_kv_head)
        if n_kv_head < 1 or n_head % n_kv_head:
            raise ValueError(f"MultiHeadAttention: n_kv_head={n_kv_head} must divide n_head={n_head}")
        self.n_embd, self.n_head, self.head_dim = n_embd, n_head, n_embd // n_head
        self.n_kv_head = n_kv_head
        self.causal = bool(causal)
        self.attn_dropout = float(dropout)
        qkv_bias = bias if qkv_bias is None else qkv_bias  # Qwen2: a bias on c_attn alone
        self.c_attn = Linear(n_embd, n_embd + 2 * n_kv_head * self.head_dim, bias=qkv_bias)
        self.c_proj = Linear(n_embd, n_embd, bias=bias)
        self.resid_dropout = Dropout(dropout)
        if rope is not None and getattr(rope, "head_dim", None) != self.head_dim:
            raise ValueError(
                f"MultiHeadAttention: rope.head_dim={getattr(rope, 'head_dim', None)} must equal "
                f"n_embd / n_head = {self.head_dim}"
            )
        self.rope = rope
        self.q_norm = RMSNorm(self.head_dim, eps=norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, eps=norm_eps) if qk_norm else None

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

        if kv_cache is None and self.hook is None and self._fused(x, attn_mask):  # one op, by batch groups
            return self.resid_dropout(self.fused(x, pos_offset=pos_offset))
        Hkv = self.n_kv_head
        # one reshape and one transpose for all three (a decode step pays per op, not per byte)
        qkv = self.c_attn(x).reshape(B, T, H + 2 * Hkv, hs).transpose(1, 2)  # (B, H + 2Hkv, T, hs)
        q, k, v = autograd.split(qkv, [H, Hkv, Hkv], axis=1)    # (B, H, T, hs), 2 x (B, Hkv, T, hs)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope is not None:
            q = self.rope.rotate(q, offset=pos_offset)
            k = self.rope.rotate(k, offset=pos_offset)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)                        # (B, Hkv, cached + T, hs) views
        p = self.attn_dropout if self.training else 0.0
        if self.hook is not None:
            y = self._hooked_attention(q, k, v, attn_mask, p)   # (B, H, T, hs)
        else:
            if Hkv != H:  # each group of H / Hkv query heads reads one key/value head
                k, v = self._repeat_kv(k), self._repeat_kv(v)   # (B, H, L, hs)
            y = autograd.scaled_dot_product_attention(q, k, v, causal=self.causal, attn_mask=attn_mask,
                                                      dropout_p=p)  # (B, H, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)                  # (B, T, C), heads side by side
        return self.resid_dropout(self.c_proj(y))

    def _hooked_attention(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Any, dropout_p: float) -> Tensor:
        """scaled_dot_product_attention spelled out so that `hook` sees (and may replace) every
        step: q (B, H, T, hs), k, v (B, Hkv, L, hs) (after qk_norm and RoPE, every key the queries
        see), the scaled scores and the pattern (B, H, T, L) (masked scores are -inf, masked
        weights 0), and z = pattern @ v (B, H, T, hs), each head's output before c_proj."""
        hook = self.hook
        q, k, v = hook("hook_q", q), hook("hook_k", k), hook("hook_v", v)
        if self.n_kv_head != self.n_head:
            k, v = self._repeat_kv(k), self._repeat_kv(v)       # (B, H, L, hs)
        T, L = q.shape[-2], k.shape[-2]
        scores = (q @ k.transpose(-1, -2)) * (1.0 / np.sqrt(self.head_dim))   # (B, H, T, L)
        allowed = None if attn_mask is None else attn_mask.data if isinstance(attn_mask, Tensor) else attn_mask
        if self.causal:
            causal = attention_ops.causal_mask(T, L, q.xp)
            allowed = causal if allowed is None else causal & allowed
        if allowed is not None:
            scores = autograd.masked_fill(scores, ~to_device_of(allowed, q.data), float("-inf"))
        pattern = hook("hook_pattern", autograd.softmax(hook("hook_attn_scores", scores), axis=-1))
        if dropout_p:
            pattern = autograd.dropout(pattern, dropout_p)
        return hook("hook_z", pattern @ v)                      # (B, H, T, hs)

    def step(self, x: Any, kv_cache: KVCache, pos: int) -> Any:
        """One new position per row on raw arrays in eval mode (no graph; see nn/arrays.py):
        x (B, C) at position `pos` (= the cache length) -> (B, C); the cache grows by one."""
        B, C = x.shape
        H, Hkv, hs = self.n_head, self.n_kv_head, self.head_dim
        if pos != kv_cache.length:
            raise ValueError(f"MultiHeadAttention.step: position {pos} but the KV cache holds {kv_cache.length}")
        if self.training and self.attn_dropout > 0:
            raise RuntimeError("MultiHeadAttention.step has no dropout: call eval() first")
        qkv = self.c_attn.step(x).reshape(B, H + 2 * Hkv, 1, hs)  # a view
        q, k, v = qkv[:, :H], qkv[:, H:H + Hkv], qkv[:, H + Hkv:]  # (B, H, 1, hs), 2 x (B, Hkv, 1, hs)
        if self.q_norm is not None:
            q, k = self.q_norm.step(q), self.k_norm.step(k)
        if self.rope is not None:
            q, k = self.rope.step(q, k, pos)
        k, v = kv_cache.write(k, v)                              # (B, Hkv, pos + 1, hs) views
        if Hkv != H:
            # the H / Hkv query heads of a group are that many queries of one kv head (a single
            # new position sees every cached key, so no mask): the cache is read without repeats
            q = q.reshape(B, Hkv, H // Hkv, hs)                  # (B, Hkv, g, hs)
        y = arrays.attention(q, k, v, causal=False)              # (B, Hkv, H / Hkv, hs)
        return self.c_proj.step(y.reshape(B, C))                 # heads side by side

    def _fused(self, x: Tensor, attn_mask: Any) -> bool:
        """Whether forward without a KV cache runs as one causal_self_attention op (autograd/ops/
        self_attention.py): causal multi-head self-attention, with or without RoPE (whose tables
        the caller passes: rope_tables), without a mask, qk_norm, grouped heads or attention
        dropout, on arrays of one dtype the op takes, with no forward hook on the projections."""
        if not (self.causal and attn_mask is None and self.q_norm is None
                and self.n_kv_head == self.n_head and not (self.training and self.attn_dropout > 0)):
            return False
        c, o = self.c_attn, self.c_proj
        if c._forward_hooks or o._forward_hooks:
            return False
        params = [p.data for p in (c.weight, c.bias, o.weight, o.bias) if p is not None]
        return self_attention.applies(x.data, *params)

    def fused(self, x: Tensor, norm=None, residual: bool = False, pos_offset: int = 0) -> Tensor:
        """The layer as one causal_self_attention op (callers check _fused first), with a block's
        pre-norm (norm: the op's spec) and skip, x at positions pos_offset..; no dropout."""
        c, o = self.c_attn, self.c_proj
        return self_attention.causal_self_attention(x, c.weight, c.bias, o.weight, o.bias, self.n_head, norm=norm,
                                                    residual=residual, rope=self.rope_tables(x, pos_offset))

    def rope_tables(self, x: Tensor, pos_offset: int = 0) -> tuple | None:
        """None without RoPE, else (cos, sin), arrays (T, hs / 2) in x's dtype and on its device
        for the positions pos_offset..pos_offset+T-1 of x (B, T, C): the fused op's `rope`."""
        if self.rope is None:
            return None
        return self.rope._tables(x.data[:1, :, :self.head_dim], pos_offset)   # a (1, T, hs) view

    def _repeat_kv(self, a: Tensor) -> Tensor:
        """(B, Hkv, L, hs) -> (B, H, L, hs): key/value head j serves query heads j*g..j*g+g-1
        (g = H / Hkv), the grouping `step` reads from the cache without a copy."""
        B, Hkv, L, hs = a.shape
        g = self.n_head // Hkv
        wide = autograd.broadcast_to(a.reshape(B, Hkv, 1, L, hs), (B, Hkv, g, L, hs))  # a view
        return wide.reshape(B, self.n_head, L, hs)

    def extra_repr(self) -> str:
        rope = ", rope" if self.rope is not None else ""
        qk = ", qk_norm" if self.q_norm is not None else ""
        kv = f", n_kv_head={self.n_kv_head}" if self.n_kv_head != self.n_head else ""
        return (f"n_embd={self.n_embd}, n_head={self.n_head}{kv}, causal={self.causal}, "
                f"dropout={self.attn_dropout}{rope}{qk}")
