"""The peer of benchmarks/bench_decode.py: our GPT's KV-cached decode step in PyTorch eager.

PyTorch is never a dependency of the project: it is imported by the caller, only when
bench_decode.py runs where it is installed, only to compare. The step is what a PyTorch user
writes for this model (as Hugging Face's GPT-2 does under torch.inference_mode): F.layer_norm,
F.linear on weights in PyTorch's own (out, in) layout, the new key and value written into
preallocated (B, H, max_len, hs) cache tensors, F.scaled_dot_product_attention over the cached
positions, GELU-tanh, a tied head. It covers the variant bench_decode.py times (learned
positions, pre-norm, LayerNorm, GELU MLP, tied head, biases optional).
"""
from __future__ import annotations

import numpy as np


def torch_decoder(torch, model, batch: int):
    """step(tokens (B,) int NumPy, pos) -> logits (B, V) NumPy float32, on a copy of `model`'s
    weights (our GPT, eval mode) with its own cache of model.config.block_size positions."""
    F, cfg, t = torch.nn.functional, model.config, model.transformer
    C, H, hs = cfg.n_embd, cfg.n_head, cfg.head_dim

    def tensor(p, transpose=False):
        if p is None:
            return None
        a = np.asarray(p.data, dtype=np.float32)
        return torch.from_numpy(np.ascontiguousarray(a.T if transpose else a))

    def norm(m):
        return tensor(m.weight), tensor(getattr(m, "bias", None))

    layers = [dict(ln_1=norm(b.ln_1), ln_2=norm(b.ln_2),
                   attn=(tensor(b.attn.c_attn.weight, True), tensor(b.attn.c_attn.bias)),
                   proj=(tensor(b.attn.c_proj.weight, True), tensor(b.attn.c_proj.bias)),
                   fc=(tensor(b.mlp.c_fc.weight, True), tensor(b.mlp.c_fc.bias)),
                   out=(tensor(b.mlp.c_proj.weight, True), tensor(b.mlp.c_proj.bias)),
                   eps=b.ln_1.eps) for b in t.h]
    wte, wpe, ln_f = tensor(t.wte.weight), tensor(t.wpe.weight), norm(t.ln_f)
    shape = (batch, H, cfg.block_size, hs)
    caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in layers]

    def step(tokens, pos: int):
        with torch.inference_mode():
            x = wte[torch.from_numpy(np.asarray(tokens, dtype=np.int64))] + wpe[pos]    # (B, C)
            for p, (kc, vc) in zip(layers, caches):
                h = F.layer_norm(x, (C,), *p["ln_1"], p["eps"])
                q, k, v = F.linear(h, *p["attn"]).view(batch, 3, H, 1, hs).unbind(1)  # (B, H, 1, hs)
                kc[:, :, pos:pos + 1] = k
                vc[:, :, pos:pos + 1] = v
                y = F.scaled_dot_product_attention(q, kc[:, :, :pos + 1], vc[:, :, :pos + 1])
                x = x + F.linear(y.reshape(batch, C), *p["proj"])
                h = F.layer_norm(x, (C,), *p["ln_2"], p["eps"])
                x = x + F.linear(F.gelu(F.linear(h, *p["fc"]), approximate="tanh"), *p["out"])
            return F.linear(F.layer_norm(x, (C,), *ln_f, cfg.norm_eps), wte).numpy()

    return step
