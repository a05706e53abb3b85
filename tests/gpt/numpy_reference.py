"""A plain-NumPy float64 GPT forward, written independently of autograd and nn (llm.c style).

It reads the model's weights by their GPT-2 names and recomputes logits and loss with
explicit formulas, so a test can compare the whole model at once and take finite
differences of this loss to check every gradient. Variants: pos learned / sinusoidal / rope,
norm layernorm / rmsnorm, mlp gelu / swiglu / relu2, qk_norm, prenorm, residual, bias, tied head.

Shapes: B batch, T time, C channels, H heads, hs = C // H, V vocab.
"""
from __future__ import annotations

import math

import numpy as np


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps) * w
    return y + b if b is not None else y


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def sinusoidal(T, C, offset=0):
    """PE[p, 2i] = sin(p / 10000^(2i/C)), PE[p, 2i+1] = cos(p / 10000^(2i/C))."""
    pos = np.arange(offset, offset + T, dtype=np.float64)[:, None]
    freq = 10000.0 ** (-np.arange(0, C, 2, dtype=np.float64) / C)
    pe = np.zeros((T, C))
    pe[:, 0::2] = np.sin(pos * freq)
    pe[:, 1::2] = np.cos(pos * freq)
    return pe


def rope(x, base, offset=0, interleaved=False):
    """Rotate channel pairs of x (B, H, T, hs) by angle p * base^(-2i/hs).

    interleaved=True pairs (2i, 2i+1) (the LLaMA paper); False pairs (i, i + hs/2) (GPT-NeoX).
    """
    B, H, T, hs = x.shape
    pos = np.arange(offset, offset + T, dtype=np.float64)[:, None]
    ang = pos * base ** (-np.arange(0, hs, 2, dtype=np.float64) / hs)  # (T, hs/2)
    cos, sin = np.cos(ang), np.sin(ang)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out
    a, b = x[..., : hs // 2], x[..., hs // 2:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def reference_forward(params: dict, cfg, idx, targets=None, conventions=None):
    """(logits (B, T, V), mean cross-entropy or None) of the GPT described by cfg and params."""
    conv = {"rope_interleaved": False, "swiglu_gate_first": True, **(conventions or {})}
    P = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
    C, H, V = cfg.n_embd, cfg.n_head, cfg.vocab_size
    hs = C // H
    B, T = idx.shape

    def norm(prefix, x):
        if cfg.norm == "rmsnorm":
            return rms_norm(x, P[prefix + ".weight"], cfg.norm_eps)
        return layer_norm(x, P[prefix + ".weight"], P.get(prefix + ".bias"), cfg.norm_eps)

    def linear(prefix, x):
        y = x @ P[prefix + ".weight"]
        return y + P[prefix + ".bias"] if prefix + ".bias" in P else y

    def attention(prefix, x):
        q, k, v = np.split(linear(prefix + ".c_attn", x), 3, axis=-1)  # (B, T, C) each
        q, k, v = (a.reshape(B, T, H, hs).transpose(0, 2, 1, 3) for a in (q, k, v))  # (B, H, T, hs)
        if getattr(cfg, "qk_norm", False):  # per head, before the rotation (modded-nanoGPT, OLMo 2)
            q = rms_norm(q, P[prefix + ".q_norm.weight"], cfg.norm_eps)
            k = rms_norm(k, P[prefix + ".k_norm.weight"], cfg.norm_eps)
        if cfg.pos == "rope":
            q = rope(q, cfg.rope_base, interleaved=conv["rope_interleaved"])
            k = rope(k, cfg.rope_base, interleaved=conv["rope_interleaved"])
        att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hs)  # (B, H, T, T)
        att = np.where(np.tril(np.ones((T, T), dtype=bool)), att, -np.inf)
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)  # (B, T, C)
        return linear(prefix + ".c_proj", y)

    def mlp(prefix, x):
        h = linear(prefix + ".c_fc", x)
        if cfg.mlp == "swiglu":
            gate, up = np.split(h, 2, axis=-1)
            if not conv["swiglu_gate_first"]:
                gate, up = up, gate
            h = silu(gate) * up
        elif cfg.mlp == "relu2":
            h = np.maximum(h, 0.0) ** 2
        else:
            h = gelu_tanh(h)
        return linear(prefix + ".c_proj", h)

    x = P["transformer.wte.weight"][idx]  # (B, T, C)
    if cfg.pos == "learned":
        x = x + P["transformer.wpe.weight"][:T]
    elif cfg.pos == "sinusoidal":
        x = x * math.sqrt(C) + sinusoidal(T, C)
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}"
        for ln, f in ((".ln_1", lambda z: attention(p + ".attn", z)), (".ln_2", lambda z: mlp(p + ".mlp", z))):
            if cfg.prenorm:
                out = f(norm(p + ln, x))
                x = x + out if cfg.residual else out
            else:
                out = f(x)
                x = norm(p + ln, x + out if cfg.residual else out)
    if cfg.prenorm:
        x = norm("transformer.ln_f", x)
    w_out = P["transformer.wte.weight"].T if cfg.tie_weights else P["lm_head.weight"]
    logits = x @ w_out  # (B, T, V)
    if targets is None:
        return logits, None
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    loss = -np.take_along_axis(logp, targets[..., None], axis=-1).mean()
    return logits, float(loss)
