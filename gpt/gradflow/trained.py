"""The gradient study of one trained (or imported) GPT from a run folder, on a text the user gives.

`measure_text(model, tokenizer, text, batch_size, block_size)` encodes the text with the run's
own tokenizer (`allowed_special="all"`, as `gpt sample` does), cuts the ids into the first
`batch_size` consecutive windows of T + 1 tokens (T = block_size, capped by the model's block
size and by the text: fewer rows when the text is short), and measures one forward/backward of
the next-token loss with measure.measure. The result has run_sweep's layout with a single run,
so report.py's tables, JSON and plots take it as they are.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from gpt.gradflow.measure import measure, summarize_run
from gpt.gradflow.sweep import summarize


def text_batch(ids, batch_size: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(idx, targets) int64 (B, T): consecutive windows of ids[i*T : i*T + T + 1], B <= batch_size
    as the ids allow, T = min(block_size, len(ids) - 1)."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size < 2:
        raise ValueError(f"the text encodes to {ids.size} token(s); measuring needs at least 2")
    T = min(block_size, ids.size - 1)
    B = max(1, min(batch_size, (ids.size - 1) // T))
    win = np.stack([ids[i * T:i * T + T + 1] for i in range(B)])  # (B, T + 1)
    return win[:, :-1], win[:, 1:]


def read_text(path: str) -> str:
    """The text of a UTF-8 file, with a clear error naming it."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--text {path}: no such file")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"--text {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def measure_text(model, tokenizer, text: str, batch_size: int = 8, block_size: int = 32,
                 name: str = "run") -> dict:
    """{"spec", "runs": [one run], "summary": [one row]} of `model` on `text` (see the module docstring)."""
    if tokenizer is None:
        raise ValueError("the run holds no tokenizer, so the text cannot be turned into its token ids")
    ids = tokenizer.encode(text, allowed_special="all")
    cfg = model.config
    if ids and max(ids) >= cfg.vocab_size:
        raise ValueError(f"the tokenizer gives id {max(ids)} but the model's vocabulary has {cfg.vocab_size}")
    idx, targets = text_batch(ids, batch_size, min(block_size, cfg.block_size))
    run = {"variant": name, "depth": cfg.n_layer, "seed": 0, "steps": None,
           "tokens": int(idx.size), "batch": list(idx.shape)}
    run.update(measure(model, idx, targets))
    run["summary"] = summarize_run(run)
    spec = {"run": name, "config": cfg.to_dict(), "batch_size": int(idx.shape[0]), "block_size": int(idx.shape[1]),
            "text_tokens": len(ids)}
    return {"spec": spec, "runs": [run], "summary": summarize([run])}
