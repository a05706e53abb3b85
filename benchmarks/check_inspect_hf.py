"""Our hook points against transformers' own: attention patterns (output_attentions=True) and
per-layer hidden states (output_hidden_states=True) of small random GPT-2 and LLaMA (GQA) models
that transformers writes, loaded by GPT.from_pretrained. Needs torch and transformers (imported
here only); prints one table row per model and quantity, and exits 1 when a difference exceeds
the tolerance (1e-5, float32).

    python benchmarks/check_inspect_hf.py [--tol 1e-5] [--tokens 16]

hidden_states[0] is the embedding output (our blocks.0.hook_resid_pre), hidden_states[i] for
0 < i < L the stream leaving block i - 1 (blocks.{i-1}.hook_resid_post), and the last one the
final stream after the final norm (GPT-2's ln_f, LLaMA's norm), which is analysis.final_norm of
our last resid_post; the script says which form the installed version returns.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def hf_models():
    """(name, transformers model) pairs: small, random, with weights off their init so that the
    patterns are far from uniform."""
    import torch
    import transformers

    gpt2 = transformers.GPT2Config(vocab_size=61, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                   attn_implementation="eager")
    llama = transformers.LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                     rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                                     attn_implementation="eager")
    out = []
    torch.manual_seed(0)
    for name, cfg, cls in (("gpt2", gpt2, transformers.GPT2LMHeadModel),
                           ("llama-gqa", llama, transformers.LlamaForCausalLM)):
        model = cls(cfg).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.2 * torch.randn_like(p))
        out.append((name, model))
    return out


def compare(name: str, hf_model, folder: Path, ids: np.ndarray) -> list[tuple]:
    import torch

    from gpt import GPT
    from gpt.inspect.analysis import final_norm

    hf_model.save_pretrained(folder, safe_serialization=True)
    ours = GPT.from_pretrained(folder)
    logits, cache = ours.run_with_cache(ids)
    with torch.no_grad():
        out = hf_model(torch.tensor(ids), output_attentions=True, output_hidden_states=True)
    L = ours.config.n_layer
    rows = [(name, "logits", np.abs(logits - out.logits.numpy()).max())]
    for i in range(L):
        rows.append((name, f"attentions[{i}] vs blocks.{i}.attn.hook_pattern",
                     np.abs(cache[f"blocks.{i}.attn.hook_pattern"] - out.attentions[i].numpy()).max()))
    for i in range(L):
        rows.append((name, f"hidden_states[{i}] vs blocks.{i}.hook_resid_pre",
                     np.abs(cache[f"blocks.{i}.hook_resid_pre"] - out.hidden_states[i].numpy()).max()))
    last = cache[f"blocks.{L - 1}.hook_resid_post"]
    normed = final_norm(ours, last.astype(np.float64))
    hf_last = out.hidden_states[L].numpy()
    d_normed, d_raw = np.abs(normed - hf_last).max(), np.abs(last - hf_last).max()
    what = "ln_f(resid_post)" if d_normed <= d_raw else "resid_post (before the final norm)"
    rows.append((name, f"hidden_states[{L}] vs {what} of block {L - 1}", min(d_normed, d_raw)))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--tokens", type=int, default=16)
    args = p.parse_args(argv)
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as exc:
        print(f"check_inspect_hf: needs torch and transformers ({exc.name} is not installed); nothing checked")
        return 0
    ids = np.random.default_rng(0).integers(0, 61, (2, args.tokens))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in hf_models():
            rows += compare(name, model, Path(tmp) / name, ids)
    width = max(len(r[1]) for r in rows)
    print(f"transformers {transformers.__version__}, float32, B=2 T={args.tokens}, tolerance {args.tol:g}")
    print(f"{'model':<10} {'quantity':<{width}} {'max |diff|':>11}  ok")
    bad = 0
    for model, what, diff in rows:
        ok = diff <= args.tol or what == "logits" and diff <= 10 * args.tol
        bad += not ok
        print(f"{model:<10} {what:<{width}} {diff:>11.2e}  {'yes' if ok else 'NO'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
