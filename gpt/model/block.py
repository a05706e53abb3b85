"""One transformer block: attention and feed-forward sublayers, each with its norm and skip.

    pre-norm (GPT-2, prenorm=True):         post-norm (2017, prenorm=False):
        x = x + attn(ln_1(x))                   x = ln_1(x + attn(x))
        x = x + mlp(ln_2(x))                    x = ln_2(x + mlp(x))

With residual=False the "x +" disappears (x = attn(ln_1(x)), or x = ln_1(attn(x))), which is
what the gradient-flow study compares against. The wiring is nn.sublayer's.

Training, a plain pre-norm block (LayerNorm or RMSNorm, causal attention with or without RoPE
and without qk_norm or grouped heads, a GELU-tanh MLP or SwiGLU, no dropout at work, no hooks,
no record) runs as two ops, x + attn(ln_1(x)) and x + mlp(ln_2(x)) (autograd/ops/prenorm.py),
with the same bits as the layers one by one; anything else runs layer by layer.

Gradient-flow hooks: set `block.record = {}` (or `GPT.trace(True)`) and every forward runs layer
by layer and fills it with the Tensors of that pass (names in `RECORD_KEYS`), so a study can
call `retain_grad()` on them before `backward()`:
    input      (B, T, C)  the residual stream entering the block
    attn_out   (B, T, C)  the attention branch's contribution (what is added to the stream)
    mid        (B, T, C)  the stream between the two sublayers
    mlp_out    (B, T, C)  the feed-forward branch's contribution
    output     (B, T, C)  the stream leaving the block

Inspection hooks (gpt/inspect/hooks.py, which lists every name): `block.hook`, like the hook of
each layer inside, is None or a function (name, Tensor) -> Tensor; while it is set the block runs
layer by layer and passes HOOKS through it (the attention's and MLP's outputs before they join
the stream, and the stream at each stage), so an inspection reads or replaces them.
mlp="none" builds no feed-forward sublayer and no ln_2 (attention-only blocks).
"""
from __future__ import annotations

import nn
from autograd.ops._util import host_floats
from gpt.model.config import GPTConfig
from nn.module import any_forward_hooks
from nn.sublayer import sublayer

RECORD_KEYS = ("input", "attn_out", "mid", "mlp_out", "output")


def make_norm(cfg: GPTConfig) -> nn.Module:
    """The norm of `cfg.norm` over n_embd channels (one of config.NORM_CHOICES)."""
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.n_embd, eps=cfg.norm_eps)
    if cfg.norm == "layernorm":
        return nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps, bias=cfg.bias)
    raise ValueError(f"no norm layer for norm={cfg.norm!r}")


def make_mlp(cfg: GPTConfig) -> nn.Module | None:
    """The feed-forward sublayer of `cfg.mlp`: SwiGLU, MoE, None for "none", or an MLP whose
    activation is named by the choice itself (gelu, relu2: any name nn.activation knows)."""
    if cfg.mlp == "none":
        return None
    if cfg.mlp == "swiglu":
        return nn.SwiGLU(cfg.n_embd, cfg.hidden, bias=cfg.bias)
    if cfg.mlp == "moe":
        return nn.MoE(cfg.n_embd, cfg.hidden, n_experts=cfg.n_experts, top_k=cfg.moe_top_k,
                      activation="gelu", bias=cfg.bias)
    return nn.MLP(cfg.n_embd, cfg.hidden, activation=cfg.mlp, bias=cfg.bias)


def _norm_spec(norm) -> tuple:
    """(centered, weight, bias, eps) of a LayerNorm (centered) or RMSNorm, as the fused ops take it."""
    return isinstance(norm, nn.LayerNorm), norm.weight, getattr(norm, "bias", None), norm.eps


class Block(nn.Module):
    """x (B, T, C) -> (B, T, C); see the module docstring for the variants."""

    HOOKS = ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")
    hook = None

    def __init__(self, cfg: GPTConfig, rope=None):
        super().__init__()
        self.ln_1 = make_norm(cfg)
        self.attn = nn.MultiHeadAttention(cfg.n_embd, cfg.n_head, bias=cfg.bias, dropout=cfg.dropout,
                                          causal=True, rope=rope, qk_norm=cfg.qk_norm,
                                          norm_eps=cfg.norm_eps, n_kv_head=cfg.n_kv_head,
                                          qkv_bias=cfg.has_qkv_bias)
        self.mlp = make_mlp(cfg)
        self.ln_2 = None if self.mlp is None else make_norm(cfg)
        self.mlp_drop = nn.Dropout(cfg.dropout)  # the attention applies its own residual dropout
        self.prenorm = cfg.prenorm
        self.residual = cfg.residual
        self.record = None  # a dict to fill with this block's activations, or None

    def forward(self, x, kv_cache=None, pos_offset: int = 0):
        if kv_cache is None and self._fuses(x):   # two ops, each a sublayer with its norm and skip
            x = self.attn.fused(x, norm=_norm_spec(self.ln_1), residual=True, pos_offset=pos_offset)
            return self.mlp.fused(x, norm=_norm_spec(self.ln_2), residual=True)

        point = self._point

        def attn(h):
            return point("hook_attn_out", self.attn(h, kv_cache=kv_cache, pos_offset=pos_offset))

        def mlp(h):
            return point("hook_mlp_out", self.mlp_drop(self.mlp(h)))

        return self._wire(point("hook_resid_pre", x), self.ln_1, attn, self.ln_2, mlp, self.record)

    def _point(self, name: str, x):
        """x through the inspection hook of `name`, or x itself when no hook is set."""
        return x if self.hook is None else self.hook(name, x)

    def _fuses(self, x) -> bool:
        """Whether forward runs as the two ops x + attn(ln_1(x)) and x + mlp(ln_2(x)) (autograd/
        ops/prenorm.py): pre-norm with the skip, no record to fill or hook to call, LayerNorm or
        RMSNorm, no dropout at work, no forward hook on a layer inside, and both sublayers' own fused ops
        applying (causal attention, with RoPE or without, and a GELU-tanh MLP or SwiGLU on NumPy
        arrays of one dtype, or on CuPy arrays through their GPU forms: prenorm.on_device)."""
        ln_1, ln_2, mlp = self.ln_1, self.ln_2, self.mlp
        if not (self.prenorm and self.residual and self.record is None and self.hook is None
                and isinstance(mlp, (nn.MLP, nn.SwiGLU))
                and all(isinstance(n, (nn.LayerNorm, nn.RMSNorm)) for n in (ln_1, ln_2))
                and x.ndim == 3 and x.shape[-1] == ln_1.dim):
            return False
        drops = (self.attn.resid_dropout, mlp.dropout, self.mlp_drop)
        if self.training and any(d.p > 0 for d in drops):
            return False
        if any_forward_hooks() and any(m._forward_hooks for m in self.modules() if m is not self):
            return False
        norms = [p.data for p in ln_1.parameters()] + [p.data for p in ln_2.parameters()]
        from autograd.ops.prenorm import on_device

        return ((host_floats(x.data, *norms) or on_device(x.data, *norms))
                and self.attn._fused(x, None) and mlp._fused(x))

    def step(self, x, kv_cache, pos: int):
        """forward of one new position per row on raw arrays, eval mode (no graph; see
        nn/arrays.py): x (B, C) at position `pos` -> (B, C). The two sublayers without _wire's
        record (a step fills none) or a closure per call: a decode step's cost is its calls."""
        pre, res = self.prenorm, self.residual
        x = sublayer(x, self.ln_1.step, self.attn.step, pre, res, (kv_cache, pos))[1]
        if self.mlp is None:
            return x
        return sublayer(x, self.ln_2.step, self.mlp.step, pre, res)[1]

    def _wire(self, x, ln_1, attn, ln_2, mlp, rec):
        """The block's wiring, for Tensors (forward) and raw arrays (step) alike."""
        if rec is not None:
            rec["input"] = x
        a, x = sublayer(x, ln_1, attn, self.prenorm, self.residual)
        if self.mlp is None:  # attention-only
            if rec is not None:
                rec["attn_out"], rec["mid"], rec["output"] = a, x, x
            return self._point("hook_resid_post", x)
        x = self._point("hook_resid_mid", x)
        if rec is not None:
            rec["attn_out"], rec["mid"] = a, x
        m, x = sublayer(x, ln_2, mlp, self.prenorm, self.residual)
        if rec is not None:
            rec["mlp_out"], rec["output"] = m, x
        return self._point("hook_resid_post", x)
