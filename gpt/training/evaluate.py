"""Evaluation on fixed batches, and the samples printed at the end of a run."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from gpt.inference.sample import SamplingConfig


def loss_value(loss) -> float:
    return float(loss.item())


def cross_entropy(model, x, y):
    """The mean cross-entropy of model(x, y): its loss less any training-only term (a GPT's MoE
    load balancing), which a model that adds one keeps apart as `ce_loss`."""
    loss = model(x, y)[1]
    ce = getattr(model, "ce_loss", None)
    return loss if ce is None else ce


def evaluate(model, batches: list) -> float:
    """Mean cross-entropy over fixed batches, in eval mode and without a graph."""
    from autograd import no_grad

    was_training = model.training
    model.eval()
    try:
        with no_grad():
            losses = [loss_value(cross_entropy(model, x, y)) for x, y in batches]
    finally:
        model.train(was_training)
    return float(np.mean(losses))


def evaluate_split(model, tokens: np.ndarray, block_size: int, batch_size: int = 32) -> float:
    """Mean cross-entropy over every token of a split, each predicted once: consecutive windows of
    `block_size` (the last one shorter), so the number has no sampling noise, unlike a few
    random batches. tokens: 1-D integer ids (N,), N >= 2. Runs in eval mode without a graph."""
    from autograd import backend, no_grad

    if len(tokens) < 2:
        raise ValueError(f"evaluate_split needs at least 2 tokens, got {len(tokens)}")
    device = getattr(model, "device", "cpu")
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    try:
        with no_grad():
            for rows in _consecutive_windows(tokens, block_size, batch_size):
                x, y = (backend.to_device(a, device) for a in (rows[:, :-1], rows[:, 1:]))
                total += loss_value(cross_entropy(model, x, y)) * y.size
                count += y.size
    finally:
        model.train(was_training)
    return total / count


def _consecutive_windows(tokens: np.ndarray, T: int, batch_size: int):
    """int64 (rows, T + 1) arrays: windows starting at 0, T, 2T, ..., batch_size to an array;
    the targets left over (fewer than T) come last, in a window of their own."""
    n_full, rest = divmod(len(tokens) - 1, T)
    offsets = np.arange(T + 1) if n_full else None  # a huge block_size over a small split needs none
    for lo in range(0, n_full, batch_size):
        starts = np.arange(lo, min(lo + batch_size, n_full)) * T
        yield np.asarray(tokens[starts[:, None] + offsets], dtype=np.int64)
    if rest:
        yield np.asarray(tokens[n_full * T:], dtype=np.int64)[None, :]


def sample_ids(model, prompt: list[int], n: int, max_new_tokens: int, sampling: "SamplingConfig | None" = None,
               seed: int = 0, tokenizer=None) -> list[list[int]]:
    """`n` continuations of `prompt` (new ids only), through gpt.inference's sampler (`sampling`:
    a SamplingConfig, default TEXT_SAMPLING): with the KV cache when the model has one (a GPT),
    else the uncached forward with nanoGPT's window (the last block_size tokens at every step),
    for models that only have a forward."""
    from gpt.inference.generate import generate
    from gpt.inference.sample import TEXT_SAMPLING

    cached = hasattr(model, "new_kv_caches")
    out = generate(model, np.asarray([prompt] * n, dtype=np.int64), max_new_tokens,
                   sampling=sampling or TEXT_SAMPLING, seed=seed,
                   use_cache=cached, window_keep=None if cached else model.config.block_size,
                   tokenizer=tokenizer)  # ids it cannot decode are not sampled
    return [list(map(int, row[len(prompt):])) for row in out]
