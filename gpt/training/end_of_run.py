"""What a run says when it ends: samples from the model, its losses, and what to run next."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from gpt.data import eot_id
from gpt.training.evaluate import sample_ids


@dataclass
class RunResult:
    run_dir: Path
    step: int
    stop_reason: str
    train_loss: float | None
    val_loss: float | None
    best_val_loss: float | None
    samples: list
    model: Any = None
    optimizer: Any = None


def sample_prompt(tok, meta: dict, val_tokens, cfg) -> list[int]:
    """The closing samples' prompt ids: cfg.prompt's (a ValueError naming --prompt when the
    tokenizer cannot encode it, which the trainer asks before training), else a new document."""
    if cfg.prompt is not None and tok is not None:
        try:
            prompt = tok.encode(cfg.prompt, allowed_special="all") if hasattr(tok, "encode") else []
        except ValueError as exc:
            raise ValueError(f"--prompt: {exc}") from None
    else:
        e = eot_id(tok) if tok is not None else meta.get("eot_id")
        prompt = [e] if e is not None else [int(val_tokens[0])]
    return prompt[-cfg.block_size:] or [0]


def print_samples(model, tok, meta: dict, val_tokens, cfg, say: Callable[[str], None]) -> list[str]:
    """cfg.samples samples of cfg.sample_tokens tokens after cfg.prompt (default: a new
    document), printed and returned as text (ids when there is no tokenizer)."""
    if cfg.samples <= 0 or cfg.sample_tokens <= 0:
        return []
    prompt = sample_prompt(tok, meta, val_tokens, cfg)
    rows = sample_ids(model, prompt, cfg.samples, cfg.sample_tokens, cfg.sampling(), seed=cfg.seed, tokenizer=tok)
    texts = []
    for i, ids in enumerate(rows):
        text = tok.decode(ids) if tok is not None else " ".join(map(str, ids))
        texts.append(text)
        say(f"---- sample {i + 1} " + "-" * 50)
        say((cfg.prompt or "") + text)
    if texts:
        say("-" * 62)
    return texts


def say_summary(s: dict, cfg, launch: str, say: Callable[[str], None]) -> None:
    """The closing lines of a run: where it ended, its losses, and what to run next."""
    def fmt(x):
        return "-" if x is None else f"{x:.4f}"

    if s['world_size'] > 1:
        say(f"all-reduce of the gradients: {s['allreduce_ms_per_step']:.1f} ms per step "
            f"on average over {s['world_size']} ranks")
    say(f"done: {s['steps']} steps in {s['seconds']:.0f} s ({s['stop_reason']}); at step {s['eval_step']}: "
        f"train loss {fmt(s['train_loss'])}, val loss {fmt(s['val_loss'])}"
        f"{'' if s.get('val_bpb') is None else ' (%.3f bits per byte)' % s['val_bpb']}, "
        f"best val {fmt(s['best_val_loss'])}; checkpoints in {s['run_dir']}")
    if s["stop_reason"] != "interrupted":
        hint = " --prompt 'def '" if not (cfg.data or cfg.input) else ""  # the default corpus is Python
        say(f"sample more: gpt sample --run {s['run_dir']}{hint}; train on: {launch} --resume "
            f"{s['run_dir']} --max-steps {2 * max(s['steps'], 1)} (the cosine keeps its end; "
            f"--lr-decay-steps N moves it)")
