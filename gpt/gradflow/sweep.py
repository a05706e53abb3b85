"""Sweeps of the gradient study: depths x variants x seeds, at initialisation or after training.

Every (variant, depth, seed) builds a fresh GPT from `autograd.manual_seed(seed)`, so two
variants at the same seed and depth start from the same random draws wherever their
parameters have the same shapes. Every model is measured on the same batch of text, so the
spread over seeds is the spread over random initialisations (and training windows). With `steps`
> 0 the model first trains that many AdamW steps on random windows of the corpus (the same
windows for every variant at a seed), then is measured on the fixed batch.

The corpus is read as bytes (vocabulary 256, no tokenizer to train): `corpus` files, or by
default the Python standard library's own sources, which every machine running this has.

`family` "seq2seq" or "encoder" measures the encoder-decoder or the encoder-only model instead
(gpt/gradflow/families.py: their data is generated), one run per stack (encoder, decoder),
each run and summary row labelled with its "stack".
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from gpt.gradflow import families
from gpt.gradflow.measure import measure, summarize_run
from gpt.gradflow.variants import Variant

SUMMARY_KEYS = ("loss", "grad_in", "grad_out", "ratio", "factor", "id_share", "stream_out")
GEOMETRIC_KEYS = ("ratio", "factor")  # averaged in log space
MEASURE_BATCH_SEED = 12345


@dataclass
class SweepSpec:
    """What to measure. Model fields not listed are GPTConfig's defaults (learned positions, gelu).
    family: "gpt", or "seq2seq" / "encoder" (families.py; pos, mlp, block_size and corpus unused)."""

    depths: list[int] = field(default_factory=lambda: [2, 4, 8, 16, 32, 48])
    variants: list[Variant] = field(default_factory=lambda: [Variant(), Variant(prenorm=False)])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    steps: int = 0
    n_embd: int = 64
    n_head: int = 4
    block_size: int = 32
    batch_size: int = 8
    lr: float = 1e-3
    pos: str = "learned"
    mlp: str = "gelu"
    device: str = "cpu"
    corpus: list[str] = field(default_factory=list)
    max_corpus_bytes: int = 2_000_000
    family: str = "gpt"

    def check(self) -> None:
        if self.family not in families.FAMILIES:
            raise ValueError(f"family must be one of {', '.join(families.FAMILIES)}, got {self.family!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be divisible by n_head={self.n_head}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if not self.depths or any(d < 1 for d in self.depths):
            raise ValueError(f"depths must be positive block counts, got {self.depths}")
        if not self.variants or not self.seeds:
            raise ValueError("a sweep needs at least one variant and one seed")
        for v in self.variants:
            families.check_variant(self.family, v)
            if v.n_kv_head is not None and self.n_head % v.n_kv_head:
                raise ValueError(f"variant {v.name!r}: n_head={self.n_head} must be divisible by "
                                 f"its {v.n_kv_head} key/value heads")
        for name in ("n_embd", "n_head", "block_size", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


def load_corpus(paths: list[str], max_bytes: int = 2_000_000) -> np.ndarray:
    """The bytes of the given files (or the default corpus) as a uint8 token array."""
    if paths:
        from bpe.files.corpus import expand_inputs

        files = expand_inputs(paths)
    else:
        from bpe import default_corpus_files

        files = default_corpus_files()
    chunks, total = [], 0
    for f in sorted(Path(p) for p in files):
        try:
            data = Path(f).read_bytes()
        except OSError as exc:
            raise OSError(f"cannot read corpus file {f}: {exc.strerror}") from exc
        chunks.append(data[: max_bytes - total])
        total += len(chunks[-1])
        if total >= max_bytes:
            break
    tokens = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    if tokens.size < 2:
        raise ValueError(f"the corpus ({len(files)} files) holds fewer than 2 bytes")
    return tokens


def batch_at(tokens: np.ndarray, rng: np.random.Generator, batch: int, T: int):
    """(idx, targets) int64 (B, T): random windows of the token array and their next tokens."""
    if tokens.size < T + 1:
        raise ValueError(f"the corpus has {tokens.size} tokens, fewer than block_size + 1 = {T + 1}")
    starts = rng.integers(0, tokens.size - T, size=batch)
    win = np.stack([tokens[s:s + T + 1] for s in starts]).astype(np.int64)  # (B, T+1)
    return win[:, :-1], win[:, 1:]


def build_model(spec: SweepSpec, variant: Variant, depth: int, seed: int):
    import autograd
    from gpt.model.config import GPTConfig
    from gpt.model.gpt import GPT

    cfg = GPTConfig(vocab_size=256, block_size=spec.block_size, n_layer=depth, n_head=spec.n_head,
                    n_embd=spec.n_embd, dropout=0.0, pos=spec.pos, mlp=spec.mlp,
                    **variant.config_overrides())
    autograd.manual_seed(seed)
    model = GPT(cfg)
    return model.to(spec.device) if spec.device != "cpu" else model


def train_steps(model, tokens: np.ndarray | None, spec: SweepSpec, seed: int) -> list[float]:
    """`spec.steps` AdamW steps on random batches (seeded): windows of `tokens` for a GPT, the
    family's own batches otherwise; the losses (stops early on a NaN)."""
    from nn.optim import AdamW, clip_grad_norm

    if spec.family == "gpt":
        def loss_of(model, rng):
            return model(*batch_at(tokens, rng, spec.batch_size, spec.block_size))[1]
    else:
        loss_of = families.training_loss(spec.family, spec.batch_size)
    opt = AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0)
    rng = np.random.default_rng(1_000_003 * (seed + 1))
    losses = []
    for _ in range(spec.steps):
        opt.zero_grad()
        loss = loss_of(model, rng)
        value = float(loss.item())
        losses.append(value)
        if not math.isfinite(value):
            break
        loss.backward()
        clip_grad_norm(model.parameters(), 1.0)
        opt.step()
    return losses


def run_stacks(spec: SweepSpec, variant: Variant, depth: int, seed: int) -> list[dict]:
    """Build, optionally train, and measure one model of a stack family: one run per stack."""
    from gpt.gradflow.stacks import measure_stacks

    model = families.build(spec.family, spec, variant, depth, seed)
    losses = train_steps(model, None, spec, seed) if spec.steps else []
    base = {"variant": variant.name, "depth": depth, "seed": seed, "steps": spec.steps,
            "train_losses": losses[:: max(1, len(losses) // 50)] if losses else []}
    if losses and not math.isfinite(losses[-1]):
        return [{**base, "stack": "encoder", "diverged": True, "loss": float("nan"), "layers": [], "params": {}}]
    m = measure_stacks(model, families.measure_forward(spec.family, spec.batch_size, MEASURE_BATCH_SEED))
    runs = []
    for stack, numbers in m["stacks"].items():
        run = {**base, "stack": stack, "loss": m["loss"], **numbers,
               "params": {k: v for k, v in m["params"].items() if stack in k.split(".")}}
        run["summary"] = summarize_run(run)
        runs.append(run)
    return runs


def run_one(spec: SweepSpec, variant: Variant, depth: int, seed: int, tokens: np.ndarray) -> dict:
    """Build, optionally train, and measure one GPT; a JSON-ready dict."""
    model = build_model(spec, variant, depth, seed)
    losses = train_steps(model, tokens, spec, seed) if spec.steps else []
    # One measurement batch for every seed and variant, so the spread over seeds is the model's.
    idx, targets = batch_at(tokens, np.random.default_rng(MEASURE_BATCH_SEED), spec.batch_size, spec.block_size)
    run = {"variant": variant.name, "depth": depth, "seed": seed, "steps": spec.steps,
           "train_losses": losses[:: max(1, len(losses) // 50)] if losses else []}
    if losses and not math.isfinite(losses[-1]):
        run.update({"diverged": True, "loss": float("nan"), "layers": [], "params": {}})
        return run
    run.update(measure(model, idx, targets))
    run["summary"] = summarize_run(run)
    return run


def _mean_std(values: list) -> tuple[float | None, float | None]:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return None, None
    return float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0


def summarize(runs: list[dict]) -> list[dict]:
    """One row per (variant, depth), in sweep order: mean and sample std over seeds of each key.

    ratio and factor span orders of magnitude, so they are averaged in log space: `_mean` is the
    geometric mean and `_std` the multiplicative spread exp(std(ln v)) (the table prints it as
    "x/" that factor), so one large seed does not dominate.
    """
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["variant"], run.get("stack"), run["depth"]), []).append(run)
    rows = []
    for (variant, stack, depth), group in groups.items():
        row = {"variant": variant, "depth": depth, "n_seeds": len(group),
               "diverged": sum(1 for r in group if r.get("diverged"))}
        if stack is not None:
            row["stack"] = stack
        for key in SUMMARY_KEYS:
            vals = [r["summary"][key] for r in group if "summary" in r]
            if key in GEOMETRIC_KEYS and vals:
                logs = [math.log(v) for v in vals if v is not None and v > 0]
                mean, std = _mean_std(logs)
                row[f"{key}_mean"] = None if mean is None else math.exp(mean)
                row[f"{key}_std"] = None if std is None else math.exp(std)
            else:
                row[f"{key}_mean"], row[f"{key}_std"] = _mean_std(vals)
        rows.append(row)
    return rows


def run_sweep(spec: SweepSpec, progress: Callable[[str], None] | None = None) -> dict:
    """Run every (variant, depth, seed); {"spec", "runs", "summary"} ready for report.py."""
    spec.check()
    tokens = load_corpus(spec.corpus, spec.max_corpus_bytes) if spec.family == "gpt" else None
    runs = []
    for variant in spec.variants:
        for depth in spec.depths:
            for seed in spec.seeds:
                t0 = time.perf_counter()
                done = [run_one(spec, variant, depth, seed, tokens)] if spec.family == "gpt" else \
                    run_stacks(spec, variant, depth, seed)
                for run in done:
                    run["seconds"] = round(time.perf_counter() - t0, 3)
                    runs.append(run)
                    if progress:
                        s = run.get("summary")
                        what = "diverged" if s is None else f"|dL/dx_0|={s['grad_in']:.3g} loss={s['loss']:.3f}"
                        where = f" {run['stack']}" if "stack" in run else ""
                        progress(f"{variant.name:>22}{where} depth {depth:>3} seed {seed}: {what} "
                                 f"({run['seconds']:.1f}s)")
    spec_dict = {k: v for k, v in spec.__dict__.items() if k != "variants"}
    spec_dict["variants"] = [v.name for v in spec.variants]
    spec_dict["corpus"] = (spec.corpus or ["<python stdlib sources>"]) if spec.family == "gpt" else \
        [f"<generated {spec.family} batches>"]
    return {"spec": spec_dict, "runs": runs, "summary": summarize(runs)}


def check_jacobian(spec: SweepSpec, width: int, tokens: int) -> None:
    """Refuse a Jacobian study its models or examples cannot hold, before any sweep is run."""
    if width % 2:
        raise ValueError(f"--jacobian-width must be even (the study's models have 2 heads), got {width}")
    if spec.family == "gpt":
        if tokens > spec.block_size:
            raise ValueError(f"--jacobian-tokens {tokens} exceeds --block-size {spec.block_size}")
    else:  # the family's own example, cut to `tokens`, refuses what it cannot give
        families.jacobian_forward(spec.family, tokens, MEASURE_BATCH_SEED)


def gpt_jacobian_study(spec: SweepSpec, depth: int = 8, width: int = 16, tokens: int = 4,
                       seeds: list[int] | None = None) -> list[dict]:
    """Block Jacobian spectra of a small-width GPT (n_embd=`width`, 2 heads) for every variant.

    The model first trains `spec.steps` steps like the sweep's models (on spec.block_size
    windows); each block's Jacobian is then (tokens*width)^2, computed by reverse mode on the
    first `tokens` bytes of the measurement batch. Rows have the layout of
    `jacobian.jacobian_study` with kind "gpt".
    """
    from dataclasses import replace

    from gpt.gradflow.jacobian import gpt_block_spectra

    check_jacobian(spec, width, tokens)
    data = load_corpus(spec.corpus, spec.max_corpus_bytes)
    small = replace(spec, n_embd=width, n_head=2)
    rows = []
    for variant in spec.variants:
        for seed in seeds if seeds is not None else spec.seeds[:1]:
            model = build_model(small, variant, depth, seed)
            if small.steps:
                train_steps(model, data, small, seed)
            idx, _ = batch_at(data, np.random.default_rng(MEASURE_BATCH_SEED), 1, tokens)
            rows.append({"kind": "gpt", "variant": variant.name, "seed": seed, "depth": depth,
                         "width": width, "tokens": tokens, "steps": small.steps,
                         **gpt_block_spectra(model, idx)})
    return rows


def stack_jacobian_study(spec: SweepSpec, depth: int = 8, width: int = 16, tokens: int = 4,
                         seeds: list[int] | None = None) -> list[dict]:
    """Layer Jacobian spectra of a small-width model of a stack family (spec.family; n_embd =
    `width`, 2 heads) for every variant: one row per stack, kind "encoder" or "decoder", each
    layer's Jacobian with respect to its stream ((tokens*width)^2, memory and masks fixed) on
    one example cut to `tokens` positions, after `spec.steps` training steps when asked."""
    from dataclasses import replace

    from gpt.gradflow.stacks import stack_block_spectra

    check_jacobian(spec, width, tokens)
    small = replace(spec, n_embd=width, n_head=2)
    forward = families.jacobian_forward(spec.family, tokens, MEASURE_BATCH_SEED)
    rows = []
    for variant in spec.variants:
        for seed in seeds if seeds is not None else spec.seeds[:1]:
            model = families.build(spec.family, small, variant, depth, seed)
            if small.steps:
                train_steps(model, None, small, seed)
            for stack, spectra in stack_block_spectra(model, forward).items():
                rows.append({"kind": stack, "variant": variant.name, "seed": seed, "depth": depth,
                             "width": width, "tokens": tokens, "steps": small.steps, **spectra})
    return rows
