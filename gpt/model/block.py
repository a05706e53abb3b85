"""One transformer block: attention and feed-forward sublayers, each with its norm and skip.

    pre-norm (GPT-2, prenorm=True):         post-norm (2017, prenorm=False):
        x = x + attn(ln_1(x))                   x = ln_1(x + attn(x))
        x = x + mlp(ln_2(x))                    x = ln_2(x + mlp(x))

With residual=False the "x +" disappears (x = attn(ln_1(x)), or x = ln_1(attn(x))), which is
what the gradient-flow study compares against.

Gradient-flow hooks: set `block.record = {}` (or `GPT.trace(True)`) and every forward fills it
with the Tensors of that pass (names in `RECORD_KEYS`), so a study can call `retain_grad()` on
them before `backward()`:
    input      (B, T, C)  the residual stream entering the block
    attn_out   (B, T, C)  the attention branch's contribution (what is added to the stream)
    mid        (B, T, C)  the stream between the two sublayers
    mlp_out    (B, T, C)  the feed-forward branch's contribution
    output     (B, T, C)  the stream leaving the block
"""
from __future__ import annotations

import nn
from gpt.model.config import GPTConfig

RECORD_KEYS = ("input", "attn_out", "mid", "mlp_out", "output")


def make_norm(cfg: GPTConfig) -> nn.Module:
    """The norm of `cfg.norm` over n_embd channels (one of config.NORM_CHOICES)."""
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.n_embd, eps=cfg.norm_eps)
    if cfg.norm == "layernorm":
        return nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps, bias=cfg.bias)
    raise ValueError(f"no norm layer for norm={cfg.norm!r}")


def make_mlp(cfg: GPTConfig) -> nn.Module:
    """The feed-forward sublayer of `cfg.mlp`: SwiGLU, MoE, or an MLP whose activation is named
    by the choice itself (gelu, relu2: any name nn.activation knows)."""
    if cfg.mlp == "swiglu":
        return nn.SwiGLU(cfg.n_embd, cfg.hidden, bias=cfg.bias)
    if cfg.mlp == "moe":
        return nn.MoE(cfg.n_embd, cfg.hidden, n_experts=cfg.n_experts, top_k=cfg.moe_top_k,
                      activation="gelu", bias=cfg.bias)
    return nn.MLP(cfg.n_embd, cfg.hidden, activation=cfg.mlp, bias=cfg.bias)


class Block(nn.Module):
    """x (B, T, C) -> (B, T, C); see the module docstring for the variants."""

    def __init__(self, cfg: GPTConfig, rope=None):
        super().__init__()
        self.ln_1 = make_norm(cfg)
        self.attn = nn.MultiHeadAttention(cfg.n_embd, cfg.n_head, bias=cfg.bias, dropout=cfg.dropout,
                                          causal=True, rope=rope, qk_norm=cfg.qk_norm,
                                          norm_eps=cfg.norm_eps, n_kv_head=cfg.n_kv_head,
                                          qkv_bias=cfg.has_qkv_bias)
        self.ln_2 = make_norm(cfg)
        self.mlp = make_mlp(cfg)
        self.mlp_drop = nn.Dropout(cfg.dropout)  # the attention applies its own residual dropout
        self.prenorm = cfg.prenorm
        self.residual = cfg.residual
        self.record = None  # a dict to fill with this block's activations, or None

    def forward(self, x, kv_cache=None, pos_offset: int = 0):
        def attn(h):
            return self.attn(h, kv_cache=kv_cache, pos_offset=pos_offset)

        def mlp(h):
            return self.mlp_drop(self.mlp(h))

        return self._wire(x, self.ln_1, attn, self.ln_2, mlp, self.record)

    def step(self, x, kv_cache, pos: int):
        """forward of one new position per row on raw arrays, eval mode (no graph; see
        nn/arrays.py): x (B, C) at position `pos` -> (B, C)."""
        return self._wire(x, self.ln_1.step, lambda h: self.attn.step(h, kv_cache, pos),
                          self.ln_2.step, self.mlp.step, None)

    def _wire(self, x, ln_1, attn, ln_2, mlp, rec):
        """The block's wiring, for Tensors (forward) and raw arrays (step) alike."""
        if rec is not None:
            rec["input"] = x
        a, x = self._sublayer(x, ln_1, attn)
        if rec is not None:
            rec["attn_out"], rec["mid"] = a, x
        m, x = self._sublayer(x, ln_2, mlp)
        if rec is not None:
            rec["mlp_out"], rec["output"] = m, x
        return x

    def _sublayer(self, x, norm, f):
        """(f's output, the new stream): pre-norm x + f(norm(x)), post-norm norm(x + f(x)),
        without the skip when residual is off. (B, T, C) or (B, C) alike."""
        if self.prenorm:
            out = f(norm(x))
            return out, (x + out if self.residual else out)
        out = f(x)
        return out, norm(x + out if self.residual else out)
