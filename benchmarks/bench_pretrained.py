"""Pretrained models: loading a Hugging Face folder, then prefill and cached decoding, beside
the safetensors package's own load and transformers' generate when they are installed.

    python benchmarks/bench_pretrained.py                 # GPT-2 124M shape, then a LLaMA-shaped GQA bf16 folder
    python benchmarks/bench_pretrained.py --quick         # fewer tokens and repeats

Folders are written once into --dir (random weights in Hugging Face's names and layout, with the
safetensors package: GPT-2 124M as float32; a LLaMA shape with grouped-query attention as BF16).
load: GPT.from_pretrained against safetensors.numpy.load_file of the same file (the median of
--repeats, page cache warm). prefill: ms per prompt token of a --prompt-token forward that
fills the KV cache; decode: ms per generated token (one step of the whole batch) with the cache,
greedy. transformers (lazily imported, torch on the CPU with the same thread count) runs its
generate on the same folder; "max |dlogits|" compares the prompt's logits of both models, and
"same greedy" the tokens both decode.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from autograd import manual_seed, no_grad
from gpt.model.config import GPTConfig
from gpt.model.gpt import GPT
from gpt.pretrained import hf_weights
from gpt.pretrained.families import export_family
from gpt.pretrained.hf_config import config_to_hf

SHAPES = {
    "gpt2-124M f32": (GPTConfig.preset("gpt2"), False),
    "llama-gqa bf16": (GPTConfig(vocab_size=32000, block_size=1024, n_layer=12, n_head=12, n_kv_head=4, n_embd=768,
                                 pos="rope", norm="rmsnorm", mlp="swiglu", mlp_hidden=2048, bias=False,
                                 tie_weights=False), True),
}


def write_folder(folder: Path, cfg: GPTConfig, bf16: bool) -> Path:
    """Random weights under Hugging Face's names, written by the safetensors package (BF16 via torch
    when installed, else by our writer)."""
    if (folder / "model.safetensors").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    manual_seed(0)
    state = GPT(cfg).state_dict()
    tensors = hf_weights.to_hf(state, cfg, export_family(cfg))
    (folder / "config.json").write_text(json.dumps(config_to_hf(cfg)))
    if bf16:
        from nn.checkpoint import save_safetensors

        save_safetensors(folder / "model.safetensors", tensors, metadata={"format": "pt"}, bf16=True)
    else:
        from safetensors.numpy import save_file

        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def ours_decode(model: GPT, prompt: np.ndarray, new: int) -> tuple[float, float, np.ndarray, np.ndarray]:
    """(prefill s, decode s per step, prompt logits of row 0 (T, V), generated ids (B, new))."""
    B, T = prompt.shape
    caches = model.new_kv_caches(B, T + new)
    with no_grad():
        t = time.perf_counter()
        logits, _ = model(prompt, kv_caches=caches)
        prefill = time.perf_counter() - t
        tok = logits.numpy()[:, -1].argmax(-1)
        out = [tok]
        t = time.perf_counter()
        for pos in range(T, T + new - 1):
            tok = np.asarray(model.step(tok, caches, pos)).argmax(-1)
            out.append(tok)
        decode = (time.perf_counter() - t) / max(new - 1, 1)
    return prefill, decode, logits.numpy()[0], np.stack(out, 1)


def torch_row(folder: Path, prompt: np.ndarray, new: int):
    """transformers on the same folder, or None when it is not installed."""
    try:
        import torch
        import transformers
    except ImportError:
        return None
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(int(os.environ.get("GPT_THREADS", 0)) or torch.get_num_threads())
    t = time.perf_counter()
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    load = time.perf_counter() - t
    ids = torch.tensor(prompt)
    with torch.no_grad():
        t = time.perf_counter()
        logits = hf(ids).logits
        prefill = time.perf_counter() - t
        t = time.perf_counter()
        out = hf.generate(ids, max_new_tokens=new, do_sample=False, min_new_tokens=new, use_cache=True,
                          attention_mask=torch.ones_like(ids))
        total = time.perf_counter() - t
    decode = max(total - prefill, 0.0) / max(new - 1, 1)  # generate's own prefill, then new - 1 steps
    return load, prefill, decode, logits[0].numpy(), out[:, prompt.shape[1]:].numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "bench_pretrained"))
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="16 new tokens, one repeat")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="which of: " + ", ".join(SHAPES))
    args = ap.parse_args()
    if args.quick:
        args.new_tokens, args.repeats = 16, 1
    rng = np.random.default_rng(0)
    print(f"{'model':16} {'what':34} {'ours':>10} {'peer':>10} {'ours/peer':>9}")
    for name in args.shapes.split(","):
        cfg, bf16 = SHAPES[name]
        folder = write_folder(Path(args.dir) / name.replace(" ", "-"), cfg, bf16)
        GPT.from_pretrained(folder)  # warm the page cache
        load = median_time(lambda: GPT.from_pretrained(folder), args.repeats)
        row = lambda what, a, b=None, unit="s": print(  # noqa: E731
            f"{name:16} {what:34} {a:>9.3f}{unit[0]} " + (f"{b:>9.3f}{unit[0]} {a / b:>9.2f}" if b else f"{'-':>10}"))
        peer = None
        if not bf16:
            from safetensors.numpy import load_file

            peer = median_time(lambda: load_file(str(folder / "model.safetensors")), args.repeats)
        row("load (peer: safetensors load_file)", load, peer)
        model = GPT.from_pretrained(folder)
        for B in (1, 8):
            prompt = rng.integers(0, cfg.vocab_size, (B, args.prompt_tokens))
            prefill, decode, logits, ours_ids = ours_decode(model, prompt, args.new_tokens)
            peer_row = torch_row(folder, prompt, args.new_tokens)
            ms = 1e3 / args.prompt_tokens
            if peer_row is None:
                row(f"prefill ms/token B={B}", prefill * ms, unit="ms")
                row(f"decode ms/token B={B}", decode * 1e3, unit="ms")
                continue
            t_load, t_prefill, t_decode, t_logits, t_ids = peer_row
            if B == 1:
                row("load (peer: transformers)", load, t_load)
            row(f"prefill ms/token B={B} (transformers)", prefill * ms, t_prefill * ms, unit="ms")
            row(f"decode ms/token B={B} (transformers)", decode * 1e3, t_decode * 1e3, unit="ms")
            print(f"{name:16} {'max |dlogits| B=' + str(B):34} {float(np.abs(logits - t_logits).max()):>10.2e}   "
                  f"same greedy: {bool(np.array_equal(ours_ids, t_ids))}")


if __name__ == "__main__":
    main()
