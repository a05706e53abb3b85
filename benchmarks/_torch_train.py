"""The peer of benchmarks/bench_train.py: the same GPT training step in PyTorch eager on the CPU.

PyTorch is never a dependency of the project: it is imported here with importlib, only when
bench_train.py runs where it is installed, only to compare. The model is ours, layer for layer:
learned positions, pre-norm blocks with LayerNorm (weight and bias), fused q,k,v, GELU-tanh MLP,
biases everywhere, no dropout, a tied head; cross-entropy over all positions; clip_grad_norm 1.0
and AdamW with nanoGPT's decay groups (every 2-D parameter decays), float32. Attention is
PyTorch's own F.scaled_dot_product_attention(is_causal=True), what a PyTorch user runs (nanoGPT
does); `attention="explicit"` writes the T x T softmax out as nanoGPT's fallback does.
"""
from __future__ import annotations

import importlib
import math


def torch_module():
    """torch, or None where it is not installed."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def torch_gpt(torch, C: int, H: int, L: int, V: int, T: int, attention: str = "sdpa"):
    """The GPT above as a torch.nn.Module (built on the default device; move it with .to()):
    model(idx, targets) -> the mean cross-entropy. bench_train.py and bench_gpu.py both use it."""
    nnt, F = torch.nn, torch.nn.functional

    class Block(nnt.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nnt.LayerNorm(C), nnt.LayerNorm(C)
            self.c_attn, self.c_proj = nnt.Linear(C, 3 * C), nnt.Linear(C, C)
            self.c_fc, self.c_fc_proj = nnt.Linear(C, 4 * C), nnt.Linear(4 * C, C)

        def attend(self, q, k, v):                                   # (B, H, T, hs) each
            if attention == "sdpa":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            Tx = q.shape[-2]
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
            mask = torch.ones(Tx, Tx, dtype=torch.bool, device=q.device).tril()
            return F.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v

        def forward(self, x):
            Bx, Tx, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(Bx, Tx, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hs)
            y = self.attend(q, k, v).transpose(1, 2).contiguous().view(Bx, Tx, C)
            x = x + self.c_proj(y)
            return x + self.c_fc_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nnt.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nnt.Embedding(V, C), nnt.Embedding(T, C)
            self.h = nnt.ModuleList([Block() for _ in range(L)])
            self.ln_f = nnt.LayerNorm(C)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.t()                # tied head, (B, T, V)
            return F.cross_entropy(logits.view(-1, V).float(), targets.view(-1))

    return GPT()


def build_torch_step(c: dict, threads: int, attention: str = "sdpa", mark=None):
    """(step(x, y) -> loss float, n_params) for config dict `c` (bench_train.CONFIGS) on
    `threads` intra-op threads; x, y are int64 NumPy arrays (B, T). `mark(phase)`, when given,
    is called at the start and at the end of each phase (bench_train.PHASES)."""
    torch = importlib.import_module("torch")
    torch.set_num_threads(threads)
    C, H, L, V, T = c["n_embd"], c["n_head"], c["n_layer"], c["vocab_size"], c["block_size"]
    torch.manual_seed(0)
    model = torch_gpt(torch, C, H, L, V, T, attention)
    params = list(model.parameters())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))
    mark = mark or (lambda phase: None)

    def step(x, y):
        mark("start")
        loss = model(torch.from_numpy(x), torch.from_numpy(y))
        mark("forward")
        loss.backward()
        mark("backward")
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        mark("clip")
        opt.step()
        opt.zero_grad(set_to_none=True)
        value = float(loss.item())
        mark("optimizer")
        return value

    return step, sum(p.numel() for p in params)
