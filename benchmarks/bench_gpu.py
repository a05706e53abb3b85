"""GPU training and sampling throughput of the GPT-2 124M shape, with PyTorch eager alongside.

    python benchmarks/bench_gpu.py                       # batch: the largest of --batches that fits
    python benchmarks/bench_gpu.py --batch 16 --precisions fp16 --attention flash
    python benchmarks/bench_gpu.py --device cpu --n-layer 1 --n-embd 64 --n-head 2 \
        --block-size 32 --vocab 256 --batch 2 --precisions fp32 --no-torch   # smoke run on a CPU

Training: GPT-2 small (12 layers, d=768, 12 heads, T=1024, vocab 50257, tied head, no dropout),
random token batches already on the device, AdamW (the fused kernel), no gradient clipping (a
clip needs a host sync in both stacks), per precision:
    fp32  float32 everywhere, TF32 off;   tf32  float32 storage, TF32 matmuls;
    fp16  float16 compute, float32 master weights, dynamic loss scaling (nn.amp);
          PyTorch: torch.autocast(float16) + GradScaler (its usual mixed precision).
Each cell: median ms of --steps timed steps after --warmup steps (the device is synchronised
after each step in both stacks). tokens/s = B*T / step time. MFU = model FLOPs (gpt.training.flops:
6 x matmul params + 12 L C T per token) / the best FLOP/s of an 8192^3 matmul measured here in
the same precision (not a datasheet number). Peak memory: CuPy's pool high-water mark (total
bytes reserved, the pool is emptied between rows) / torch.cuda.max_memory_reserved().
Sampling: KV-cached greedy decoding (gpt.inference.generate), 16-token prompt, tokens/s over the batch.

PyTorch is optional and only a peer here: it is imported with importlib when installed (the
package itself never imports it). Every part is time-boxed by --budget (seconds for the whole
script); a part that would start past it is reported as skipped.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import statistics
import sys
import time
from typing import Callable

import numpy as np

import autograd
from autograd import backend
from gpt.model.config import GPTConfig
from gpt.model.report import flops_per_token
from gpt.model.gpt import GPT

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _torch_peer import bench_torch  # noqa: E402  (PyTorch itself is imported only when called)

T0 = time.perf_counter()


def left(args) -> float:
    return args.budget - (time.perf_counter() - T0)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: largest of --batches that fits)")
    p.add_argument("--batches", default="64,32,16,8,4", help="candidates for the automatic batch size")
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("--block-size", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--precisions", default="fp32,tf32,fp16")
    p.add_argument("--attention", default="matmul,flash", help="our fused attention paths to time")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget", type=float, default=330.0, help="seconds for the whole script")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--sample-tokens", type=int, default=128)
    p.add_argument("--sample-batches", default="1,8")
    return p.parse_args(argv)


def sync(device: str) -> None:
    if device != "cpu":
        backend.cupy_module().cuda.Device().synchronize()


def free_gpu(device: str) -> None:
    gc.collect()
    if device != "cpu":
        cp = backend.cupy_module()
        cp.get_default_memory_pool().free_all_blocks()
        cp.get_default_pinned_memory_pool().free_all_blocks()


def pool_bytes(device: str) -> int | None:
    if device == "cpu":
        return None
    return int(backend.cupy_module().get_default_memory_pool().total_bytes())


def is_oom(exc: BaseException) -> bool:
    return "OutOfMemory" in type(exc).__name__ or "out of memory" in str(exc).lower()


# ---- this project ------------------------------------------------------------------------------
def model_config(args) -> GPTConfig:
    return GPTConfig(vocab_size=args.vocab, block_size=args.block_size, n_layer=args.n_layer,
                     n_head=args.n_head, n_embd=args.n_embd, dropout=0.0, bias=True, tie_weights=True)


class OurRun:
    """GPT + AdamW (+ MixedPrecision for fp16) on the device, with a random batch there."""

    def __init__(self, args, B: int, precision: str, attention: str):
        from autograd import cuda as acuda
        from nn.optim import weight_decay_groups
        from nn.amp import configure
        from nn.optim import AdamW

        self.device = args.device
        if self.device != "cpu":
            acuda.set_attention(attention)
        autograd.manual_seed(0)
        self.cfg = model_config(args)
        self.model = GPT(self.cfg)
        if self.device != "cpu":
            self.model.to(self.device)
        self.amp = configure(self.model, precision, self.device)
        groups = weight_decay_groups(self.model, 0.1, decay_embeddings=True)
        self.opt = AdamW(self.amp.master_groups(groups) if self.amp else groups, lr=3e-4, betas=(0.9, 0.95),
                         weight_decay=0.1)
        xp = backend.module_for_device(self.device)
        rng = np.random.default_rng(0)
        ids = rng.integers(0, self.cfg.vocab_size, (B, args.block_size + 1))
        self.x = autograd.Tensor(xp.asarray(ids[:, :-1]))
        self.y = autograd.Tensor(xp.asarray(ids[:, 1:]))

    def step(self) -> None:
        _, loss = self.model(self.x, self.y)
        if self.amp is not None:
            self.amp.backward(loss)
            self.amp.step(self.opt, 0.0)
        else:
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()
        self.last_loss = loss

    def close(self) -> None:
        self.model = self.opt = self.amp = self.x = self.y = self.last_loss = None


def time_steps(step: Callable[[], None], sync_fn: Callable[[], None], warmup: int, steps: int,
               deadline: float) -> list[float]:
    for _ in range(warmup):
        step()
    sync_fn()
    times = []
    for _ in range(steps):
        if time.perf_counter() > deadline and times:
            break
        t = time.perf_counter()
        step()
        sync_fn()
        times.append(time.perf_counter() - t)
    return times


def pick_batch(args) -> int:
    if args.batch:
        return args.batch
    for B in [int(b) for b in args.batches.split(",")]:
        free_gpu(args.device)
        run = None
        try:
            run = OurRun(args, B, "fp32", "matmul")
            run.step()
            run.step()
            sync(args.device)
            print(f"batch size: {B} fits (fp32, matmul attention, the most memory-hungry setting)")
            return B
        except Exception as exc:  # noqa: BLE001 - only out-of-memory moves on
            if not is_oom(exc):
                raise
            print(f"batch size: {B} does not fit ({type(exc).__name__})")
        finally:
            if run is not None:
                run.close()
            del run
            free_gpu(args.device)
    raise SystemExit("no batch size of --batches fits")


def measure_peaks(args) -> dict:
    """Best FLOP/s of an n^3 matmul per precision on this device (n = 8192 on a GPU)."""
    from gpt.training.flops import measure_peak_flops

    if args.device == "cpu":
        return {p: measure_peak_flops("cpu") for p in ("fp32", "tf32", "fp16")}
    from autograd.cuda import set_tf32

    cp = backend.cupy_module()
    peaks = {}
    for prec, dtype, tf32 in (("fp32", cp.float32, False), ("tf32", cp.float32, True), ("fp16", cp.float16, True)):
        set_tf32(tf32)
        n = 8192
        a = cp.random.standard_normal((n, n), dtype=cp.float32).astype(dtype)
        b = cp.random.standard_normal((n, n), dtype=cp.float32).astype(dtype)
        out = cp.matmul(a, b)
        best = float("inf")
        for _ in range(5):
            sync(args.device)
            t = time.perf_counter()
            cp.matmul(a, b, out=out)
            sync(args.device)
            best = min(best, time.perf_counter() - t)
        peaks[prec] = 2.0 * n ** 3 / best
        del a, b, out
    set_tf32(False)
    free_gpu(args.device)
    return peaks


def bench_ours(args, B: int, precision: str, attention: str) -> dict:
    free_gpu(args.device)
    run = OurRun(args, B, precision, attention)
    try:
        times = time_steps(run.step, lambda: sync(args.device), args.warmup, args.steps,
                           time.perf_counter() + max(10.0, left(args) - 30))
        loss = float(run.last_loss.item())
        run.last_loss = None
        mem = pool_bytes(args.device)
        act = None
        if args.device != "cpu":  # memory held by one forward's graph (what backward needs)
            pool = backend.cupy_module().get_default_memory_pool()
            sync(args.device)
            before = pool.used_bytes()
            _, held = run.model(run.x, run.y)
            sync(args.device)
            act = pool.used_bytes() - before
            del held
    finally:
        run.close()
        del run
        free_gpu(args.device)
    return {"times": times, "loss": loss, "mem": mem, "act": act}


# ---- sampling ---------------------------------------------------------------------------------
def bench_sampling(args, B: int) -> dict:
    from gpt.inference.generate import generate

    free_gpu(args.device)
    if args.device != "cpu":
        from autograd.cuda import set_tf32

        set_tf32(False)
    autograd.manual_seed(0)
    model = GPT(model_config(args))
    if args.device != "cpu":
        model.to(args.device)
    model.eval()
    prompt = np.random.default_rng(0).integers(0, args.vocab, (B, 16))
    n = min(args.sample_tokens, args.block_size - 16)
    generate(model, prompt, max_new_tokens=4, temperature=0.0, use_cache=True)   # warm-up and compile
    times = []
    for _ in range(3):
        if left(args) < 5 and times:
            break
        sync(args.device)
        t = time.perf_counter()
        generate(model, prompt, max_new_tokens=n, temperature=0.0, use_cache=True)
        sync(args.device)
        times.append(time.perf_counter() - t)
    del model
    free_gpu(args.device)
    med = statistics.median(times)
    return {"tokens_s": B * n / med, "ms_token": med / n * 1e3, "n": n}


# ---- main -------------------------------------------------------------------------------------
def fmt_mem(b):
    return "-" if b is None else f"{b / 2**30:.1f}"


def torch_peer(args) -> bool:
    """Whether PyTorch with CUDA can run beside ours (printed)."""
    if args.no_torch or args.device == "cpu":
        return False
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        print("peer: PyTorch not installed, its rows are left out")
        return False
    print(f"peer: PyTorch {torch.__version__} (eager, SDPA attention, fused AdamW)")
    return bool(torch.cuda.is_available())


def _our_initial_weights(args) -> dict:
    """The weights our rows start from (seed 0), named and laid out as the PyTorch peer's."""
    from bench_train import peer_state

    autograd.manual_seed(0)
    return peer_state(GPT(model_config(args)))


def training_rows(args, B: int, precisions: list, attentions: list, torch_ok: bool) -> tuple[list, dict]:
    """(rows (impl, precision, attention, result or None, note), PyTorch tokens/s by precision)."""
    T = args.block_size
    rows, torch_tps = [], {}
    initial = _our_initial_weights(args) if torch_ok else None  # the peer's start, for every precision
    for prec in precisions:
        if torch_ok:
            if left(args) < 20:
                rows.append(("pytorch", prec, "sdpa", None, "skipped: time budget"))
            else:
                try:
                    r = bench_torch(args, B, prec, time_steps, time.perf_counter() + max(10.0, left(args) - 30),
                                    state=initial)
                    torch_tps[prec] = B * T / statistics.median(r["times"])
                    rows.append(("pytorch", prec, "sdpa", r, None))
                except Exception as exc:  # noqa: BLE001 - the peer must not stop our rows
                    rows.append(("pytorch", prec, "sdpa", None, f"failed: {type(exc).__name__}: {exc}"[:120]))
        for att in attentions:
            if left(args) < 20:
                rows.append(("ours", prec, att, None, "skipped: time budget"))
                continue
            try:
                rows.append(("ours", prec, att, bench_ours(args, B, prec, att), None))
            except Exception as exc:  # noqa: BLE001 - report and go on to the next row
                rows.append(("ours", prec, att, None, f"failed: {type(exc).__name__}: {exc}"[:120]))
                free_gpu(args.device)
        sys.stdout.flush()
    return rows, torch_tps


def print_training(args, rows: list, torch_tps: dict, B: int, fpt: float, peaks: dict) -> None:
    print()
    print(f"| stack | precision | attention | ms/step (median of {args.steps}) | tokens/s | MFU | peak mem GiB "
          f"| activations GiB | loss after | x PyTorch |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for impl, prec, att, r, note in rows:
        if r is None:
            print(f"| {impl} | {prec} | {att} | {note} | | | | | | |")
            continue
        med = statistics.median(r["times"])
        tps = B * args.block_size / med
        mfu = fpt * tps / peaks[prec]
        ratio = f"{tps / torch_tps[prec]:.2f}" if prec in torch_tps and impl == "ours" else "-"
        print(f"| {impl} | {prec} | {att} | {med * 1e3:.0f} | {tps:,.0f} | {mfu:.1%} | {fmt_mem(r['mem'])} "
              f"| {fmt_mem(r['act'])} | {r['loss']:.3f} | {ratio} |")


def print_sampling(args) -> None:
    print()
    print("sampling (KV cache, greedy, 16-token prompt, float32, TF32 off):")
    print("| batch | new tokens | tokens/s | ms/token step |")
    print("|---:|---:|---:|---:|")
    for sb in [int(b) for b in args.sample_batches.split(",") if b]:
        if left(args) < 15:
            print(f"| {sb} | - | skipped: time budget | |")
            continue
        try:
            s = bench_sampling(args, sb)
            print(f"| {sb} | {s['n']} | {s['tokens_s']:,.0f} | {s['ms_token']:.1f} |")
        except Exception as exc:  # noqa: BLE001
            print(f"| {sb} | - | failed: {type(exc).__name__}: {str(exc)[:80]} | |")


def main(argv=None) -> int:
    args = parse(argv)
    if args.device != "cpu" and not autograd.cuda_available():
        print("bench_gpu: needs CuPy and an NVIDIA GPU (or --device cpu for a smoke run)")
        return 0
    precisions = [p for p in args.precisions.split(",") if p]
    attentions = [a for a in args.attention.split(",") if a] if args.device != "cpu" else ["matmul"]
    torch_ok = torch_peer(args)
    if args.device != "cpu":
        cp = backend.cupy_module()
        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        print(f"device: {name}, CuPy {cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}")
    cfg = model_config(args)
    B = pick_batch(args)
    T = args.block_size
    fpt = flops_per_token(cfg, T)
    print(f"model: {args.n_layer} layers, d={args.n_embd}, {args.n_head} heads, T={T}, vocab {args.vocab}; "
          f"batch {B} ({B * T:,} tokens/step); {fpt / 1e9:.4g} GFLOP/token (training)")
    peaks = measure_peaks(args)
    print("matmul peak measured here (8192^3): " + ", ".join(f"{k} {v / 1e12:.1f} TFLOP/s" for k, v in peaks.items()))
    rows, torch_tps = training_rows(args, B, precisions, attentions, torch_ok)
    print_training(args, rows, torch_tps, B, fpt, peaks)
    print_sampling(args)
    print(f"\nbench_gpu: {time.perf_counter() - T0:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
