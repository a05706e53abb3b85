"""Decoding speed: KV-cached against uncached generation, and time per token as the context grows.

    python benchmarks/bench_sample.py                 # the full table (uncached rows take minutes)
    python benchmarks/bench_sample.py --quick         # 64 and 256 new tokens, fewer repeats

Model: config (b) of the training issue (6 layers, 6 heads, n_embd 384, vocab 4096), random
weights, block_size = prompt + the most new tokens asked for (so no window re-prefill happens),
greedy decoding (temperature 0) from a 16-token prompt, or with --top-k K sampling at
temperature 1 from the K most likely tokens (seed 0), which adds the sampler's own time.
tokens/s counts every generated token of the batch; ms/step is the wall time of one decoding
step of the whole batch. Each cell is
the median of --repeats runs ("best ms" the fastest run: on a shared machine the median
can be dominated by other processes, since 2-thread OpenBLAS stalls badly under contention;
OPENBLAS_NUM_THREADS=1 in the environment makes small decode matmuls immune to that). The
uncached path runs the whole context through the model at
every step (what nanoGPT's sampler does). The decode step beside PyTorch eager's and beside the
cached forward, interleaved in one run, is benchmarks/bench_decode.py.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import autograd
from gpt.model.config import GPTConfig
from gpt.inference.generate import Decoder, generate
from gpt.model.gpt import GPT

def make_model(block_size: int, device: str) -> GPT:
    autograd.manual_seed(0)
    cfg = GPTConfig(vocab_size=4096, block_size=block_size, n_layer=6, n_head=6, n_embd=384)
    model = GPT(cfg)
    if device != "cpu":
        model.to(device)
    model.eval()
    return model


def sync(device: str) -> None:
    if device != "cpu":
        import cupy

        cupy.cuda.Device().synchronize()


def time_generate(model, batch: int, prompt_len: int, new: int, use_cache: bool, repeats: int,
                  device: str, top_k: int | None = None) -> tuple[float, float, float]:
    """(median wall, best wall, median CPU) seconds for generating `new` tokens for `batch` rows.

    CPU time (all threads of this process) does not count time spent waiting for a core that
    another process holds, so on a shared machine it is the closer estimate of quiet wall time
    (with OPENBLAS_NUM_THREADS=1; with more threads it also counts their spinning)."""
    prompt = np.random.default_rng(1).integers(0, model.config.vocab_size, (batch, prompt_len))
    times, cpu = [], []
    for _ in range(repeats):
        sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        if top_k is None:
            generate(model, prompt, new, temperature=0, use_cache=use_cache)
        else:
            generate(model, prompt, new, temperature=1.0, top_k=top_k, seed=0, use_cache=use_cache)
        sync(device)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(times), min(times), statistics.median(cpu)


def cached_steps(model, tokens, n: int, steps: int, device: str, layer_steps: bool) -> list[float]:
    """Seconds per cached decode step after a prefill of n tokens: through GPT.step (each
    layer's array step) or, with layer_steps=False, through forward(..., kv_caches=...)."""
    dec = Decoder(model, 1, n + steps + 1, use_cache=True)
    if not layer_steps:
        dec.stepper = None
    dec.prefill(tokens[:, :n])
    times = []
    for i in range(steps):
        sync(device)
        t0 = time.perf_counter()
        dec.step(tokens[:, n + i])
        sync(device)
        times.append(time.perf_counter() - t0)
    return times


def context_sweep(model, contexts: list[int], steps: int, device: str) -> list[tuple]:
    """(context length, cached ms per step through GPT.step, through forward with the cache,
    uncached ms per step) at batch 1."""
    rows = []
    rng = np.random.default_rng(2)
    V = model.config.vocab_size
    with autograd.no_grad():
        for n in contexts:
            tokens = rng.integers(0, V, (1, n + steps + 1))
            uncached = []
            cached = cached_steps(model, tokens, n, steps, device, True)
            forward = cached_steps(model, tokens, n, steps, device, False)
            for i in range(max(3, steps // 4)):
                sync(device)
                t0 = time.perf_counter()
                model(tokens[:, :n + 1], last_only=True)
                sync(device)
                uncached.append(time.perf_counter() - t0)
            rows.append((n, 1e3 * statistics.median(cached), 1e3 * statistics.median(forward),
                         1e3 * statistics.median(uncached)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new", default="64,256,1024", help="new-token counts (default 64,256,1024)")
    ap.add_argument("--batch", default="1,8", help="batch sizes (default 1,8)")
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens (default 16)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per cell, median reported (default 3)")
    ap.add_argument("--uncached-max", type=int, default=256,
                    help="largest new-token count timed without the cache (default 256; it is slow)")
    ap.add_argument("--contexts", default="64,128,256,512,1024", help="context lengths of the sweep")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--top-k", type=int, default=None, help="sample from the top K at temperature 1 instead of greedy")
    ap.add_argument("--quick", action="store_true", help="--new 64,256 --repeats 2 --contexts 64,256,1024")
    args = ap.parse_args()
    if args.quick:
        args.new, args.repeats, args.contexts = "64,256", 2, "64,256,1024"
    news = [int(x) for x in args.new.split(",")]
    batches = [int(x) for x in args.batch.split(",")]
    contexts = [int(x) for x in args.contexts.split(",")]
    block = max(args.prompt + max(news), max(contexts) + 64)
    model = make_model(block, args.device)
    cfg = model.config
    per_tok = cfg.kv_cache_numbers_per_token()
    print(f"config (b): {cfg.n_layer} layers, {cfg.n_head} heads, n_embd {cfg.n_embd}, vocab {cfg.vocab_size}, "
          f"block_size {block}, {model.num_params():,} parameters, device {args.device}")
    print(f"KV cache: {per_tok:,} numbers per token (2 x {cfg.n_layer} x {cfg.n_embd}) = "
          f"{per_tok * 4 / 1024:.0f} KiB float32; preallocated {per_tok * 4 * block / 2**20:.1f} MiB per row")
    generate(model, np.zeros((1, 4), np.int64), 8, temperature=0)  # warm-up

    print()
    print(f"{'new':>5} {'batch':>5} {'mode':>9} {'tokens/s':>10} {'ms/step':>9} {'best ms':>8} "
          f"{'cpu ms':>8} {'speedup':>8}")
    for new in news:
        for batch in batches:
            t_c, b_c, c_c = time_generate(model, batch, args.prompt, new, True, args.repeats, args.device,
                                          args.top_k)
            print(f"{new:>5} {batch:>5} {'cached':>9} {batch * new / t_c:>10.1f} {1e3 * t_c / new:>9.2f} "
                  f"{1e3 * b_c / new:>8.2f} {1e3 * c_c / new:>8.2f}", flush=True)
            if new <= args.uncached_max:
                reps = max(1, args.repeats if new <= 64 else args.repeats // 2)
                t_u, b_u, c_u = time_generate(model, batch, args.prompt, new, False, reps, args.device, args.top_k)
                print(f"{new:>5} {batch:>5} {'uncached':>9} {batch * new / t_u:>10.1f} {1e3 * t_u / new:>9.2f} "
                      f"{1e3 * b_u / new:>8.2f} {1e3 * c_u / new:>8.2f} {t_u / t_c:>7.1f}x", flush=True)
    print("ms/step: median wall time of one step of the batch; best ms: fastest run; cpu ms: "
          "median CPU time (all threads); speedup: uncached / cached wall time")

    print()
    print("time per step as the context grows (batch 1; cached: one decode step through GPT.step, the "
          "layers' array steps; cached fwd: the same step through forward(..., kv_caches=...); uncached: a "
          "forward over the whole context)")
    print(f"{'context':>8} {'cached ms':>10} {'cached fwd':>11} {'uncached ms':>12}   (medians)")
    for n, c, f, u in context_sweep(model, contexts, 20, args.device):
        print(f"{n:>8} {c:>10.2f} {f:>11.2f} {u:>12.2f}", flush=True)


if __name__ == "__main__":
    main()
