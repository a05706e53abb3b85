"""nn speed: checkpoint I/O against the safetensors package, optimizer steps, layer forward+backward,
and cached against uncached attention decoding.

    python benchmarks/bench_nn.py            # all tables (about a minute on a laptop CPU)
    python benchmarks/bench_nn.py --quick    # fewer repeats
    python benchmarks/bench_nn.py --device cuda

Parameters: the tensors of a 6-layer, n_embd 384, vocab 4096 GPT (12.3 M float32 numbers,
47 MB), named as GPT-2's. Every cell is the median of --repeats runs.
- checkpoint: save_safetensors / load_safetensors against safetensors.numpy.save_file /
  load_file on the same dict (peer column empty when the package is not installed).
- optimizer: one AdamW step over all parameters: ours (in place, one scratch array per
  parameter) against the same update written as plain NumPy expressions (new arrays each op).
- layers: forward + backward of one layer on x (8, 128, 384), float32.
- decoding: ms per new token for one MultiHeadAttention at context 256, with a KVCache
  against recomputing the whole prefix.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import autograd
import nn
from autograd import Tensor, no_grad
from nn.checkpoint import load_safetensors, save_safetensors
from nn.optim import AdamW


def sync(device: str) -> None:
    if device != "cpu":
        import cupy

        cupy.cuda.Device().synchronize()


def median_time(fn, repeats: int, device: str = "cpu") -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gpt_tensors(n_layer=6, C=384, V=4096, T=256) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    out = {"transformer.wte.weight": w(V, C), "transformer.wpe.weight": w(T, C)}
    for i in range(n_layer):
        p = f"transformer.h.{i}."
        out.update({p + "ln_1.weight": w(C), p + "ln_1.bias": w(C), p + "attn.c_attn.weight": w(C, 3 * C),
                    p + "attn.c_attn.bias": w(3 * C), p + "attn.c_proj.weight": w(C, C), p + "attn.c_proj.bias": w(C),
                    p + "ln_2.weight": w(C), p + "ln_2.bias": w(C), p + "mlp.c_fc.weight": w(C, 4 * C),
                    p + "mlp.c_fc.bias": w(4 * C), p + "mlp.c_proj.weight": w(4 * C, C), p + "mlp.c_proj.bias": w(C)})
    out.update({"transformer.ln_f.weight": w(C), "transformer.ln_f.bias": w(C)})
    return out


def bench_checkpoint(repeats: int) -> None:
    tensors = gpt_tensors()
    mb = sum(a.nbytes for a in tensors.values()) / 2 ** 20
    try:
        import safetensors.numpy as st
    except ImportError:
        st = None
    print(f"\ncheckpoint I/O, {len(tensors)} tensors, {mb:.1f} MB (median of {repeats})")
    print(f"{'operation':<10} {'ours ms':>9} {'ours MB/s':>10} {'safetensors ms':>15} {'safetensors MB/s':>17}")
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = os.path.join(tmp, "ours.safetensors"), os.path.join(tmp, "theirs.safetensors")
        rows = [("save", lambda: save_safetensors(ours, tensors), st and (lambda: st.save_file(tensors, theirs))),
                ("load", lambda: load_safetensors(ours), st and (lambda: st.load_file(theirs)))]
        for name, mine, peer in rows:
            t = median_time(mine, repeats)
            line = f"{name:<10} {t * 1e3:9.1f} {mb / t:10.0f}"
            if peer:
                tp = median_time(peer, repeats)
                line += f" {tp * 1e3:15.1f} {mb / tp:17.0f}"
            print(line)


def naive_adamw_step(params, grads, ms, vs, t, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, wd=0.1):
    for i, (p, g) in enumerate(zip(params, grads)):
        p = p * (1 - lr * wd)
        ms[i] = b1 * ms[i] + (1 - b1) * g
        vs[i] = b2 * vs[i] + (1 - b2) * g * g
        params[i] = p - lr * (ms[i] / (1 - b1 ** t)) / (np.sqrt(vs[i] / (1 - b2 ** t)) + eps)


def bench_optimizer(repeats: int, device: str) -> None:
    arrays = gpt_tensors()
    params = [nn.Parameter(Tensor(a, device=device)) for a in arrays.values()]
    for p in params:
        p.grad = p.data * 0.5
    opt = AdamW(params, lr=1e-3, weight_decay=0.1)
    n = sum(p.size for p in params)
    t_ours = median_time(opt.step, repeats, device)
    print(f"\noptimizer step over {n / 1e6:.1f} M parameters ({device}, median of {repeats})")
    print(f"{'optimizer':<32} {'ms/step':>8}")
    print(f"{'AdamW (ours, in place)':<32} {t_ours * 1e3:8.1f}")
    if device == "cpu":
        raw = [a.copy() for a in arrays.values()]
        grads = [a * 0.5 for a in raw]
        ms, vs = [np.zeros_like(a) for a in raw], [np.zeros_like(a) for a in raw]
        step = [0]

        def naive():
            step[0] += 1
            naive_adamw_step(raw, grads, ms, vs, step[0])

        print(f"{'AdamW as NumPy expressions':<32} {median_time(naive, repeats) * 1e3:8.1f}")


def bench_layers(repeats: int, device: str) -> None:
    autograd.manual_seed(0)
    B, T, C = 8, 128, 384
    layers = {
        "Linear 384->1536": nn.Linear(C, 4 * C),
        "LayerNorm": nn.LayerNorm(C),
        "RMSNorm": nn.RMSNorm(C),
        "MLP (gelu, 4x)": nn.MLP(C),
        "SwiGLU (hidden 1024)": nn.SwiGLU(C, 1024),
        "MoE (4 experts, top-2, 4x)": nn.MoE(C, 4 * C, n_experts=4, top_k=2),
        "MultiHeadAttention (6 heads)": nn.MultiHeadAttention(C, 6),
        "MultiHeadAttention + RoPE": nn.MultiHeadAttention(C, 6, rope=nn.RotaryEmbedding(C // 6, T)),
    }
    x = Tensor(np.random.default_rng(0).standard_normal((B, T, C)).astype(np.float32), device=device)
    g = x.xp.ones((B, T, C), dtype=np.float32)
    print(f"\nlayers, forward + backward on x ({B}, {T}, {C}) float32 ({device}, median of {repeats})")
    print(f"{'layer':<30} {'forward ms':>11} {'fwd+bwd ms':>11}")
    for name, layer in layers.items():
        layer.to(device)
        out_g = g if name != "Linear 384->1536" else x.xp.ones((B, T, 4 * C), dtype=np.float32)

        def fwd():
            with no_grad():
                layer(x)

        def fwd_bwd():
            layer.zero_grad()
            layer(x).backward(out_g)

        print(f"{name:<30} {median_time(fwd, repeats, device) * 1e3:11.2f} {median_time(fwd_bwd, repeats, device) * 1e3:11.2f}")


def bench_decoding(repeats: int, device: str, context: int = 256, new: int = 32) -> None:
    autograd.manual_seed(0)
    C, H = 384, 6
    mha = nn.MultiHeadAttention(C, H, rope=nn.RotaryEmbedding(C // H, context + new)).to(device).eval()
    x = Tensor(np.random.default_rng(0).standard_normal((1, context + new, C)).astype(np.float32), device=device)

    def per_token(use_cache: bool) -> float:
        """Median over repeats of the decode loop's seconds per token (the prefill is not timed)."""
        times = []
        for _ in range(repeats + 1):  # the first run warms up
            cache = nn.KVCache(1, H, context + new, C // H, device=device) if use_cache else None
            with no_grad():
                if use_cache:
                    mha(x[:, :context], kv_cache=cache)
                sync(device)
                t0 = time.perf_counter()
                for t in range(context, context + new):
                    mha(x[:, t:t + 1], kv_cache=cache) if use_cache else mha(x[:, :t + 1])
                sync(device)
            times.append((time.perf_counter() - t0) / new)
        return statistics.median(times[1:])

    tc, tu = per_token(True), per_token(False)
    print(f"\ndecoding one MultiHeadAttention (C={C}, {H} heads, RoPE), {new} tokens after a {context}-token "
          f"prompt ({device}, median of {repeats})")
    print(f"{'path':<20} {'ms/token':>9}")
    print(f"{'KV cache':<20} {tc * 1e3:9.3f}")
    print(f"{'recompute prefix':<20} {tu * 1e3:9.3f}")
    print(f"speed-up: {tu / tc:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 repeats instead of 7")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = ap.parse_args()
    repeats = args.repeats or (3 if args.quick else 7)
    print(f"numpy {np.__version__}; cores visible: {os.cpu_count()}")
    bench_checkpoint(repeats)
    bench_optimizer(repeats, args.device)
    bench_layers(repeats, args.device)
    bench_decoding(repeats, args.device)


if __name__ == "__main__":
    main()
