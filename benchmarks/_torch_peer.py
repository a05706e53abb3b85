"""The peer of benchmarks/bench_gpu.py: the same GPT-2 training step in PyTorch eager.

PyTorch is never a dependency of the project: it is imported here with importlib, only when
bench_gpu.py runs on a machine where it is installed, only to compare. Same shapes as ours
(tied head, pre-norm blocks, GELU-tanh MLP, no dropout), SDPA causal attention, fused AdamW with
nanoGPT's decay groups, and for fp16 torch.autocast + GradScaler; from our weights when given
them (`state`).
"""
from __future__ import annotations

import gc
import importlib

from _torch_train import torch_gpt


def bench_torch(args, B: int, precision: str, time_steps, deadline: float, state: dict | None = None) -> dict:
    """Median-timed training steps of the same GPT-2 shape in PyTorch eager; see bench_gpu.py.
    state: {name: NumPy array} to start from (bench_train.peer_state of our model: the same
    weights), else PyTorch's default initialisation."""
    torch = importlib.import_module("torch")
    torch.backends.cuda.matmul.allow_tf32 = precision != "fp32"
    torch.backends.cudnn.allow_tf32 = precision != "fp32"
    C, H, L, V, T = args.n_embd, args.n_head, args.n_layer, args.vocab, args.block_size
    dev = "cuda"

    torch.manual_seed(0)
    model = torch_gpt(torch, C, H, L, V, T)  # the model bench_train.py times
    if state is not None:
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
    model = model.to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), fused=True)
    half = precision == "fp16"
    scaler = torch.amp.GradScaler("cuda", enabled=half)
    x = torch.randint(0, V, (B, T), device=dev)
    y = torch.randint(0, V, (B, T), device=dev)
    last = {}

    def step():
        with torch.autocast("cuda", dtype=torch.float16, enabled=half):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        last["loss"] = loss

    torch.cuda.reset_peak_memory_stats()
    try:
        times = time_steps(step, torch.cuda.synchronize, args.warmup, args.steps, deadline)
        loss = float(last["loss"].item())
        mem = int(torch.cuda.max_memory_reserved())
        last.clear()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.float16, enabled=half):
            held = model(x, y)
        torch.cuda.synchronize()
        act = torch.cuda.memory_allocated() - before
        del held
    finally:
        del model, opt, x, y, last
        gc.collect()
        torch.cuda.empty_cache()
    return {"times": times, "loss": loss, "mem": mem, "act": act}
