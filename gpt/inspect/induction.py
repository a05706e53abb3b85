"""The induction-head study: a 2-layer attention-only GPT trained on repeated random tokens.

Each training row is a random sequence of a random period between length / 2 and length, repeated
to fill 2 x length tokens: with one fixed period a head could attend to "the position `length`
back" by position alone, which is not an induction circuit. The first pass cannot be predicted
(loss ln V); the repeats can, by a circuit of two heads (Olsson et al.,
2022): a layer-1 previous-token head writes "the token before me" into each position, and a
layer-2 induction head whose query (the current token) matches that key attends to the position
after the token's first occurrence and copies it. The study trains the model, and at checkpoints
reports both halves' losses and the best previous-token (layer 1) and induction (layer 2) scores
of analysis.induction_scores on fresh held-out rows.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from gpt.inspect.analysis import induction_scores


def _field(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class InductionSpec:
    """The model and the training of the study (defaults: a few minutes on a 2-core CPU)."""

    vocab_size: int = _field(256, "token ids drawn uniformly from 0..V-1")
    length: int = _field(24, "random tokens per half: rows of 2 x LENGTH "
                                 "(the training periods vary in [LENGTH/2, LENGTH])")
    n_embd: int = _field(64, "width C")
    n_head: int = _field(2, "heads per layer")
    batch_size: int = _field(32, "rows per step")
    steps: int = _field(1000, "AdamW steps")
    lr: float = _field(3e-3, "learning rate")
    eval_every: int = _field(100, "steps between the table's rows")
    seed: int = _field(0, "seed of the weights and the data")
    pos: str = _field("rope", "positions (rope: a previous-token head is one relative offset)")

    def config(self):
        from gpt.model.config import GPTConfig

        return GPTConfig(vocab_size=self.vocab_size, block_size=2 * self.length, n_layer=2, n_head=self.n_head,
                         n_embd=self.n_embd, mlp="none", bias=False, tie_weights=False, pos=self.pos)


def training_rows(spec: InductionSpec, rng: np.random.Generator) -> np.ndarray:
    """(batch_size, 2 x length) int64: per row a random sequence of a random period in
    [length / 2, length], tiled."""
    T = 2 * spec.length
    rows = np.empty((spec.batch_size, T), np.int64)
    for b in range(spec.batch_size):
        period = int(rng.integers(spec.length // 2, spec.length + 1))
        rows[b] = np.resize(rng.integers(0, spec.vocab_size, period), T)
    return rows


def row_of(step: int, scores: dict, seconds: float, loss: float) -> dict:
    """One line of the study's table from induction_scores' result."""
    return {"step": step, "seconds": round(seconds, 1), "train_loss": loss,
            "loss_first": scores["loss_first"], "loss_second": scores["loss_second"],
            "previous_token": float(scores["previous_token"][0].max()),
            "previous_head": int(scores["previous_token"][0].argmax()),
            "induction": float(scores["induction"][1].max()), "induction_head": int(scores["induction"][1].argmax())}


def run_study(spec: InductionSpec, progress=None) -> tuple:
    """(model, rows): trains per `spec` with AdamW, a row (row_of) at step 0, every eval_every
    steps and at the end; `progress(row)` is called with each."""
    from autograd import manual_seed
    from gpt.model.gpt import GPT
    from nn.optim import AdamW, clip_grad_norm

    manual_seed(spec.seed)
    model = GPT(spec.config())
    opt = AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0)
    rows, start, loss = [], time.perf_counter(), float("nan")
    probe_seed = 10_000 + spec.seed  # held-out rows, the same at every checkpoint

    def checkpoint(step: int) -> None:
        model.eval()
        scores = induction_scores(model, spec.length, batch=16, seed=probe_seed)
        model.train()
        rows.append(row_of(step, scores, time.perf_counter() - start, loss))
        if progress:
            progress(rows[-1])

    checkpoint(0)
    rng = np.random.default_rng(spec.seed)
    for step in range(1, spec.steps + 1):
        ids = training_rows(spec, rng)
        opt.zero_grad()
        _, out = model(ids[:, :-1], ids[:, 1:])
        loss = float(out.item())
        out.backward()
        clip_grad_norm(model.parameters(), 1.0)
        opt.step()
        if step % spec.eval_every == 0 or step == spec.steps:
            checkpoint(step)
    model.eval()
    return model, rows


def ablations(model, spec: InductionSpec, batch: int = 16) -> dict[str, float]:
    """{"none" | "L{i}H{h}": the repeated half's loss with that head's output zeroed} on held-out
    repeated rows: the heads the induction circuit needs are those whose ablation costs most."""
    from gpt.inspect.analysis import repeated_tokens
    from gpt.inspect.hooks import run_with_hooks

    ids = repeated_tokens(spec.vocab_size, spec.length, batch, seed=20_000 + spec.seed)
    S = spec.length

    def second_half_loss(logits) -> float:
        z = logits - logits.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        return float(-np.take_along_axis(logp[:, S:-1], ids[:, S + 1:, None], -1).mean())

    out = {"none": second_half_loss(run_with_hooks(model, ids))}
    for i in range(2):
        for h in range(spec.n_head):
            def zero(z, name, h=h):
                z[:, h] = 0.0
            out[f"L{i}H{h}"] = second_half_loss(run_with_hooks(model, ids, [(f"blocks.{i}.attn.hook_z", zero)]))
    return out


COLUMNS = ("step", "seconds", "train_loss", "loss_first", "loss_second", "previous_token", "induction")


def table(rows: list[dict]) -> str:
    """The rows as a text table (losses in nats, scores in [0, 1]), the best heads named below."""
    w = [max(len(c), 7) for c in COLUMNS]
    lines = ["  ".join(f"{c:>{n}}" for c, n in zip(COLUMNS, w))]
    for r in rows:
        lines.append("  ".join(f"{r[c]:>{n}}" if isinstance(r[c], int) else f"{r[c]:>{n}.3f}" if r[c] == r[c]
                               else f"{'-':>{n}}" for c, n in zip(COLUMNS, w)))  # no train loss before step 1
    last = rows[-1]
    lines.append(f"best heads at the end: previous-token L0H{last['previous_head']}, "
                 f"induction L1H{last['induction_head']}")
    return "\n".join(lines)
