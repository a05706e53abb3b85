"""A lean decode step: one new token per row through the GPT on raw backend arrays.

The model's own forward (with kv_caches) is correct for a decode step, but it builds every
Tensor and op node of the graph machinery even under no_grad: about 140 small ops per token
for 6 layers, which costs as much as the matmuls of a small model. A decode step has only
one position per row, so it can run as a short list of 2-D array operations on the model's
parameter arrays, writing its keys and values into the same preallocated `nn.KVCache`
buffers the prefill filled, and forming only the last position's logits.

It mirrors gpt/model.py and gpt/block.py for every variant except MoE (positions learned /
sinusoidal / rope, layernorm / rmsnorm, gelu / swiglu, pre- / post-norm, residual on / off,
bias, tied head); `supports(model)` says whether it applies. Its output is checked in
tests/gpt/test_generate.py against the uncached forward of the whole window, so any drift
between the two implementations fails the tests.

Shapes: B rows, C = n_embd, H heads of hs = C / H, L = cached positions, V = vocab.
"""
from __future__ import annotations

import math

import numpy as np

import nn
from autograd.backend import xp_of

_GELU_C = math.sqrt(2.0 / math.pi)


def supports(model) -> bool:
    """Whether `FastDecoder` covers this model's variant (all but MoE)."""
    return model.config.mlp in ("gelu", "swiglu")


def _data(p):
    return None if p is None else p.data


class _Layer:
    """The arrays of one block."""

    def __init__(self, block):
        a = block.attn
        self.ln_1 = (_data(block.ln_1.weight), _data(getattr(block.ln_1, "bias", None)), block.ln_1.eps)
        self.ln_2 = (_data(block.ln_2.weight), _data(getattr(block.ln_2, "bias", None)), block.ln_2.eps)
        self.w_attn, self.b_attn = a.c_attn.weight.data, _data(a.c_attn.bias)
        self.w_aproj, self.b_aproj = a.c_proj.weight.data, _data(a.c_proj.bias)
        self.w_fc, self.b_fc = block.mlp.c_fc.weight.data, _data(block.mlp.c_fc.bias)
        self.w_mproj, self.b_mproj = block.mlp.c_proj.weight.data, _data(block.mlp.c_proj.bias)


class FastDecoder:
    """step(tokens (B,) host int, caches, pos) -> logits (B, V) backend array, float32.

    `pos` is the position of the new token in the window (= every cache's length before the
    step); the caches' lengths advance by one.
    """

    def __init__(self, model):
        if not supports(model):
            raise ValueError(f"the fast decode step does not cover mlp={model.config.mlp!r}")
        cfg = model.config
        t = model.transformer
        self.cfg = cfg
        self.wte = t.wte.weight.data                                  # (V, C)
        self.xp = xp_of(self.wte)
        self.dtype = self.wte.dtype
        # tied: logits = (wte @ x^T)^T reads wte in its own row-major layout, which BLAS runs
        # ~3x faster for a few rows than x @ wte.T through the transposed view
        self.tied = bool(cfg.tie_weights)
        self.w_out = model.output_weight().data                       # (C, V), a view when tied
        self.wpe = t.wpe.weight.data if cfg.pos == "learned" else None
        self.sin_table = None
        if cfg.pos == "sinusoidal":
            host = nn.sinusoidal_table(cfg.block_size, cfg.n_embd, dtype=np.float64).astype(self.dtype)
            self.sin_table = host if self.xp is np else self.xp.asarray(host)
        self.rope = t.h[0].attn.rope if cfg.pos == "rope" else None
        self.layers = [_Layer(b) for b in t.h]
        self.ln_f = (_data(t.ln_f.weight), _data(getattr(t.ln_f, "bias", None)), t.ln_f.eps) \
            if cfg.has_ln_f else None
        self.rms = cfg.norm == "rmsnorm"
        self.scale = self.dtype.type(1.0 / math.sqrt(cfg.head_dim))
        self.emb_scale = self.dtype.type(math.sqrt(cfg.n_embd))

    # ---- pieces ----------------------------------------------------------------------------
    def _norm(self, x, params):
        w, b, eps = params
        xp = self.xp
        if self.rms:
            ms = xp.mean(x * x, axis=-1, keepdims=True)
            y = x / xp.sqrt(ms + self.dtype.type(eps))
        else:
            xc = x - xp.mean(x, axis=-1, keepdims=True)
            var = xp.mean(xc * xc, axis=-1, keepdims=True)
            y = xc / xp.sqrt(var + self.dtype.type(eps))
        y *= w
        if b is not None:
            y += b
        return y

    def _linear(self, x, w, b):
        y = x @ w
        if b is not None:
            y += b
        return y

    def _rotate(self, x, cos, sin):
        """x (B, H, hs) rotated in the half-split layout by cos, sin (hs/2,)."""
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        out = self.xp.empty_like(x)
        out[..., :h] = x1 * cos - x2 * sin
        out[..., h:] = x1 * sin + x2 * cos
        return out

    def _attention(self, h, layer, cache, pos, rope_cs):
        xp, cfg = self.xp, self.cfg
        B = h.shape[0]
        H, hs, C = cfg.n_head, cfg.head_dim, cfg.n_embd
        qkv = self._linear(h, layer.w_attn, layer.b_attn)              # (B, 3C)
        q = qkv[:, :C].reshape(B, H, hs)
        k = qkv[:, C:2 * C].reshape(B, H, hs)
        v = qkv[:, 2 * C:].reshape(B, H, hs)
        if rope_cs is not None:
            q, k = self._rotate(q, *rope_cs), self._rotate(k, *rope_cs)
        L = cache.length
        if L != pos or L >= cache.max_len:
            raise ValueError(f"fast decode: cache holds {L} of {cache.max_len} positions, step at {pos}")
        cache.k[:, :, L] = k                                           # (B, H, hs) into slot L
        cache.v[:, :, L] = v
        cache.length = L + 1
        keys, vals = cache.k[:, :, :L + 1], cache.v[:, :, :L + 1]      # (B, H, L+1, hs) views
        s = xp.matmul(keys, q[..., None])[..., 0]                      # (B, H, L+1)
        s *= self.scale
        s -= s.max(axis=-1, keepdims=True)
        xp.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        y = xp.matmul(s[:, :, None, :], vals)                          # (B, H, 1, hs)
        return self._linear(y.reshape(B, C), layer.w_aproj, layer.b_aproj)

    def _mlp(self, h, layer):
        xp = self.xp
        u = self._linear(h, layer.w_fc, layer.b_fc)
        if self.cfg.mlp == "swiglu":
            half = u.shape[-1] // 2
            gate, up = u[:, :half], u[:, half:]
            act = gate / (1 + xp.exp(-gate)) * up                      # silu(gate) * up
        else:
            inner = u * u
            inner *= u
            inner *= self.dtype.type(0.044715)
            inner += u
            inner *= self.dtype.type(_GELU_C)
            xp.tanh(inner, out=inner)
            inner += 1
            inner *= u
            inner *= self.dtype.type(0.5)
            act = inner                                                # gelu, tanh form
        return self._linear(act, layer.w_mproj, layer.b_mproj)

    # ---- the step ---------------------------------------------------------------------------
    def step(self, tokens, caches, pos: int):
        xp, cfg = self.xp, self.cfg
        if pos >= cfg.block_size:
            raise ValueError(f"fast decode: position {pos} is past block_size={cfg.block_size}")
        idx = tokens if xp is np else xp.asarray(tokens)
        x = self.wte[idx]                                              # (B, C), a copy
        if self.wpe is not None:
            x += self.wpe[pos]
        elif self.sin_table is not None:
            x *= self.emb_scale
            x += self.sin_table[pos]
        rope_cs = None
        if self.rope is not None:
            rope_cs = (self.rope.cos[pos].astype(self.dtype), self.rope.sin[pos].astype(self.dtype))
            if xp_of(rope_cs[0]) is not xp:
                rope_cs = tuple(xp.asarray(a) for a in rope_cs)
        residual = cfg.residual
        for layer, cache in zip(self.layers, caches):
            if cfg.prenorm:
                a = self._attention(self._norm(x, layer.ln_1), layer, cache, pos, rope_cs)
                x = x + a if residual else a
                m = self._mlp(self._norm(x, layer.ln_2), layer)
                x = x + m if residual else m
            else:
                a = self._attention(x, layer, cache, pos, rope_cs)
                x = self._norm(x + a if residual else a, layer.ln_1)
                m = self._mlp(x, layer)
                x = self._norm(x + m if residual else m, layer.ln_2)
        if self.ln_f is not None:
            x = self._norm(x, self.ln_f)
        if self.tied:
            return (self.wte @ x.T).T                                  # (B, V), a transposed view
        return x @ self.w_out                                          # (B, V)
