"""The peer of benchmarks/bench_train.py: the same GPT training step in PyTorch eager on the CPU.

PyTorch is never a dependency of the project: it is imported here with importlib, only when
bench_train.py runs where it is installed, only to compare. The model is ours, layer for layer,
under GPT-2's parameter names (as ours): learned positions, pre-norm blocks with LayerNorm
(weight and bias), fused q,k,v, GELU-tanh MLP, biases everywhere, no dropout, a tied head;
cross-entropy over all positions; clip_grad_norm 1.0 and AdamW with nanoGPT's decay groups
(every 2-D parameter decays), float32. bench_train.py loads our model's initial weights into it
(`state=`), so both start from the same numbers. Attention is PyTorch's own
F.scaled_dot_product_attention(is_causal=True), what a PyTorch user runs (nanoGPT does);
`attention="explicit"` writes the T x T softmax out as nanoGPT's fallback does.
"""
from __future__ import annotations

import importlib
import math

ATTENTION_PATHS = ("sdpa", "explicit")


def torch_module():
    """torch, or None where it is not installed."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        return None


def torch_gpt(torch, C: int, H: int, L: int, V: int, T: int, attention: str = "sdpa"):
    """The GPT above as a torch.nn.Module (built on the default device; move it with .to()):
    model(idx, targets) -> the mean cross-entropy. Its state_dict's names are ours
    (transformer.h.0.attn.c_attn.weight, ...). bench_train.py and bench_gpu.py both use it."""
    if attention not in ATTENTION_PATHS:
        raise ValueError(f"attention must be one of {ATTENTION_PATHS}, got {attention!r}")
    nnt, F = torch.nn, torch.nn.functional

    class Attention(nnt.Module):
        def __init__(self):
            super().__init__()
            self.c_attn, self.c_proj = nnt.Linear(C, 3 * C), nnt.Linear(C, C)

        def attend(self, q, k, v):                                   # (B, H, T, hs) each
            if attention == "sdpa":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            Tx = q.shape[-2]
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
            mask = torch.ones(Tx, Tx, dtype=torch.bool, device=q.device).tril()
            return F.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v

        def forward(self, x):
            Bx, Tx, _ = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q, k, v = (t.view(Bx, Tx, H, C // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hs)
            return self.c_proj(self.attend(q, k, v).transpose(1, 2).contiguous().view(Bx, Tx, C))

    class MLP(nnt.Module):
        def __init__(self):
            super().__init__()
            self.c_fc, self.c_proj = nnt.Linear(C, 4 * C), nnt.Linear(4 * C, C)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nnt.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nnt.LayerNorm(C), Attention()
            self.ln_2, self.mlp = nnt.LayerNorm(C), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nnt.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nnt.ModuleDict(dict(
                wte=nnt.Embedding(V, C), wpe=nnt.Embedding(T, C),
                h=nnt.ModuleList([Block() for _ in range(L)]), ln_f=nnt.LayerNorm(C)))

        def forward(self, idx, targets):
            t = self.transformer
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = t.wte(idx) + t.wpe(pos)
            for block in t.h:
                x = block(x)
            logits = t.ln_f(x) @ t.wte.weight.t()                    # tied head, (B, T, V)
            return F.cross_entropy(logits.view(-1, V).float(), targets.view(-1))

    return GPT()


def build_torch_step(c: dict, threads: int | None = None, attention: str = "sdpa", mark=None,
                     state: dict | None = None):
    """(step(x, y) -> loss float, n_params) for config dict `c` (bench_train.CONFIGS); x, y are
    int64 NumPy arrays (B, T). threads: PyTorch's intra-op threads (None: its own default).
    state: {name: float32 NumPy array} in PyTorch's layout to start from (bench_train.peer_state:
    our model's initial weights); every parameter must be named, none unknown. `mark(phase)`,
    when given, is called at the start and at the end of each phase (bench_train.PHASES)."""
    torch = importlib.import_module("torch")
    if threads is not None:
        torch.set_num_threads(threads)
    C, H, L, V, T = c["n_embd"], c["n_head"], c["n_layer"], c["vocab_size"], c["block_size"]
    torch.manual_seed(0)
    model = torch_gpt(torch, C, H, L, V, T, attention)
    if state is not None:
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
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
