"""One KV-cached decode step: GPT.step beside its peers, interleaved in one process.

    python3 benchmarks/bench_decode.py                   # batch 1 and 8, 256 steps, 15 rounds
    OPENBLAS_NUM_THREADS=1 GPT_THREADS=1 python3 benchmarks/bench_decode.py --batch 1

Peers, on the same weights, batches and threads:
- "rowmajor": GPT.step in the model's own weight layouts (what nn.step_layouts saves);
- "forward": the cached forward through the graph's ops, `model(tokens, kv_caches=...,
  last_only=True)` under no_grad (the path a model without array steps, MoE, decodes by);
- "torch": the same step in PyTorch eager (benchmarks/_torch_decode.py), when installed.
Model: config (b), 6 layers, 6 heads, n_embd 384, vocab 4096, bias off, block_size 512,
random weights. "ours" steps in the weight layouts the generation loop uses (nn.step_layouts:
column-major copies of the tall weights, made with the caches, untimed like them). A round decodes `--steps` positions after a 16-token prefill (each peer with
its own caches); rounds alternate the order of the decoders so that the machine's noise falls
on all alike. The table gives the median and the fastest round per step, each peer's median
against ours (ours / it: below 1, ours is faster) and the median of the rounds' own ratios
(paired: steadier, as a round's two runs share the machine's state); the logits of the first
steps are checked to agree before timing.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import autograd  # noqa: E402
import nn  # noqa: E402
from gpt.model.config import GPTConfig  # noqa: E402
from gpt.model.gpt import GPT  # noqa: E402

PREFILL = 16


def make_model() -> GPT:
    autograd.manual_seed(0)
    cfg = GPTConfig(vocab_size=4096, block_size=512, n_layer=6, n_head=6, n_embd=384, dropout=0.0,
                    bias=False)
    return GPT(cfg).eval()


def forward_step(model: GPT):
    """step(tokens (B,), caches, pos) -> (B, V) logits through the model's forward (no graph kept)."""
    def step(tokens, caches, pos):
        with autograd.no_grad():
            logits, _ = model(np.asarray(tokens)[:, None], kv_caches=caches, pos_offset=pos, last_only=True)
        return logits.data[:, -1, :]
    return step


def decoders(model: GPT, batch: int) -> dict:
    """name -> fresh(): a new step(tokens (B,), pos) -> logits with empty caches of its own."""
    cfg = model.config

    def caches():
        return [nn.KVCache(batch, cfg.n_head, cfg.block_size, cfg.head_dim) for _ in range(cfg.n_layer)]

    def with_caches(step):
        def fresh():
            c = caches()
            return lambda tokens, pos: step(tokens, c, pos)
        return fresh

    def ours():
        # as the generation loop runs its steps (gpt/inference/generate.py, Decoder.step): in a
        # session's weight layouts (nn.step_layouts), made once per window like its caches
        c, layouts = caches(), nn.step_layouts(model)

        def step(tokens, pos):
            with nn.laid_out(layouts):
                return model.step(tokens, c, pos)
        return step

    out = {"ours": ours, "rowmajor": with_caches(model.step), "forward": with_caches(forward_step(model))}
    try:
        import torch
    except ImportError:
        return out
    from _torch_decode import torch_decoder

    torch.set_num_threads(int(os.environ.get("GPT_THREADS", "0")) or torch.get_num_threads())
    out["torch"] = lambda: torch_decoder(torch, model, batch)
    return out


def run(fresh, tokens) -> tuple[float, np.ndarray]:
    """(seconds for the steps after the untimed prefill, logits of the first timed step)."""
    step = fresh()
    for p in range(PREFILL):
        step(tokens[p], p)
    t0 = time.perf_counter()
    first = np.asarray(step(tokens[PREFILL], PREFILL))
    for p in range(PREFILL + 1, len(tokens)):
        step(tokens[p], p)
    return time.perf_counter() - t0, first


def bench(model: GPT, batch: int, steps: int, rounds: int) -> dict:
    tokens = np.random.default_rng(batch).integers(0, model.config.vocab_size, (PREFILL + steps, batch))
    runs = decoders(model, batch)
    ref = run(runs["ours"], tokens[:PREFILL + 2])[1]
    for name, fresh in runs.items():
        got = run(fresh, tokens[:PREFILL + 2])[1]
        if not np.allclose(got, ref, rtol=1e-4, atol=1e-4):
            raise SystemExit(f"{name}: logits differ from GPT.step's by {np.abs(got - ref).max():.2e}")
    times = {name: [] for name in runs}
    names = list(runs)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            times[name].append(run(runs[name], tokens)[0] / steps)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    model = make_model()
    print(f"load average {os.getloadavg()[0]:.2f}; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '-')}, "
          f"GPT_THREADS={os.environ.get('GPT_THREADS', '-')}; {args.steps} steps after a {PREFILL}-token prefill, "
          f"{args.rounds} rounds")
    print(f"{'batch':>5} {'decoder':>8} {'median ms':>10} {'best ms':>8} {'ours / it':>10} {'paired':>8}")
    for batch in (int(b) for b in args.batch.split(",")):
        times = bench(model, batch, args.steps, args.rounds)
        base = statistics.median(times["ours"])
        for name, ts in times.items():
            med = statistics.median(ts)
            paired = statistics.median(o / t for o, t in zip(times["ours"], ts))
            print(f"{batch:>5} {name:>8} {1e3 * med:>10.3f} {1e3 * min(ts):>8.3f} {base / med:>9.3f}x {paired:>7.3f}x",
                  flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
