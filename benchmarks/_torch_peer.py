"""The peer of benchmarks/bench_gpu.py: the same GPT-2 training step in PyTorch eager.

PyTorch is never a dependency of the project: it is imported here with importlib, only when
bench_gpu.py runs on a machine where it is installed, only to compare. Same shapes as ours
(tied head, pre-norm blocks, GELU-tanh MLP, no dropout), SDPA causal attention, fused AdamW with
nanoGPT's decay groups, and for fp16 torch.autocast + GradScaler.
"""
from __future__ import annotations

import gc
import importlib


def bench_torch(args, B: int, precision: str, time_steps, deadline: float) -> dict:
    """Median-timed training steps of the same GPT-2 shape in PyTorch eager; see bench_gpu.py."""
    torch = importlib.import_module("torch")
    nnt, F = torch.nn, torch.nn.functional
    torch.backends.cuda.matmul.allow_tf32 = precision != "fp32"
    torch.backends.cudnn.allow_tf32 = precision != "fp32"
    C, H, L, V, T = args.n_embd, args.n_head, args.n_layer, args.vocab, args.block_size
    dev = "cuda"

    class Block(nnt.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nnt.LayerNorm(C), nnt.LayerNorm(C)
            self.c_attn, self.c_proj = nnt.Linear(C, 3 * C), nnt.Linear(C, C)
            self.c_fc, self.c_fc_proj = nnt.Linear(C, 4 * C), nnt.Linear(4 * C, C)

        def forward(self, x):
            Bx, Tx, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(Bx, Tx, H, C // H).transpose(1, 2)            # (B, H, T, hs)
            k = k.view(Bx, Tx, H, C // H).transpose(1, 2)
            v = v.view(Bx, Tx, H, C // H).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(Bx, Tx, C)
            x = x + self.c_proj(y)
            return x + self.c_fc_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nnt.Module):
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

    torch.manual_seed(0)
    model = GPT2().to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), fused=True)
    half = precision == "fp16"
    scaler = torch.amp.GradScaler("cuda", enabled=half)
    x = torch.randint(0, V, (B, T), device=dev)
    y = torch.randint(0, V, (B, T), device=dev)
    state = {}

    def step():
        with torch.autocast("cuda", dtype=torch.float16, enabled=half):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        state["loss"] = loss

    torch.cuda.reset_peak_memory_stats()
    try:
        times = time_steps(step, torch.cuda.synchronize, args.warmup, args.steps, deadline)
        loss = float(state["loss"].item())
        mem = int(torch.cuda.max_memory_reserved())
        state.clear()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.float16, enabled=half):
            held = model(x, y)
        torch.cuda.synchronize()
        act = torch.cuda.memory_allocated() - before
        del held
    finally:
        del model, opt, x, y, state
        gc.collect()
        torch.cuda.empty_cache()
    return {"times": times, "loss": loss, "mem": mem, "act": act}
