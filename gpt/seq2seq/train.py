"""Training the translator and the encoder-only model on the generated number data; run folders.

Both loops: AdamW, warmup then cosine decay of the learning rate (nn.optim.warmup_cosine), the
gradient norm clipped at 1, fresh random batches every step (the data is unlimited), held-out
evaluation at the end. A run folder holds config.json (the model config, the task, the settings),
model.safetensors (the weights), metrics.jsonl (one JSON line per logged step) and summary.json.

A run holds its folder's lock (gpt.training.run_folder.RunFolder) from start to end and writes its
files only once it has trained and evaluated, config.json last; a run that diverges, is
interrupted or fails removes what it wrote, so the folder never holds a partial run.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

import autograd
import nn
from autograd.memory import check_fits
from bpe.files.atomic import atomic_write_text
from bpe.files.lock import LOCK_FILE
from gpt.files import json_safe
from gpt.seq2seq import data as D
from gpt.seq2seq.decode import translate_ids
from gpt.seq2seq.model import EncoderOnly, Seq2Seq, Seq2SeqConfig, report
from gpt.training.run_folder import CONFIG, METRICS, SUMMARY, RunFolder
from gpt.training.trainer import TrainingDiverged

TASKS = {"translate": Seq2Seq, "encoder": EncoderOnly}
WEIGHTS = "model.safetensors"
# config.json last: a folder holds it only once the run's other files are complete
WRITTEN = (METRICS, WEIGHTS, SUMMARY, CONFIG)


@dataclass
class TrainSettings:
    steps: int = 3000
    batch_size: int = 64
    lr: float = 2e-3
    warmup: int = 200
    weight_decay: float = 0.01
    seed: int = 0
    log_every: int = 250
    eval_examples: int = 500
    max_minutes: float | None = None   # stop early (and evaluate) after this much training time

    def __post_init__(self) -> None:
        bad = [f"{name}={getattr(self, name)!r}" for name, ok in (
            ("steps", self.steps >= 1), ("batch_size", self.batch_size >= 1), ("warmup", self.warmup >= 0),
            ("log_every", self.log_every >= 1), ("lr", 0 < self.lr < math.inf),
            ("weight_decay", 0 <= self.weight_decay < math.inf),
            ("eval_examples", 1 <= self.eval_examples <= D.split_size("held_out")),
            ("max_minutes", self.max_minutes is None or 0 < self.max_minutes < math.inf)) if not ok]
        if bad:
            raise ValueError(f"invalid training settings: {', '.join(bad)} (steps, batch_size, log_every >= 1; "
                             f"warmup >= 0; lr > 0 and weight_decay >= 0, finite; eval_examples 1.."
                             f"{D.split_size('held_out'):,}, the held-out numbers)")


def _optimizer(model: nn.Module, s: TrainSettings) -> nn.optim.AdamW:
    return nn.optim.AdamW(nn.optim.weight_decay_groups(model, s.weight_decay), lr=s.lr, betas=(0.9, 0.98))


def _loop(model: nn.Module, s: TrainSettings, loss_fn: Callable, log: Callable) -> tuple[dict, list[dict]]:
    """The shared optimisation loop: loss_fn(rng) -> (loss Tensor, dict of floats to log)
    -> (summary, the metrics records of the logged steps)."""
    autograd.manual_seed(s.seed)
    rng = np.random.default_rng(s.seed)
    opt = _optimizer(model, s)
    model.train()
    start, step, lines = time.perf_counter(), 0, []
    for step in range(1, s.steps + 1):
        lr = nn.optim.warmup_cosine(step - 1, s.warmup, s.steps, s.lr, s.lr * 0.05)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, parts = loss_fn(rng)
        loss.backward()
        norm = float(nn.optim.clip_grad_norm(model.parameters(), 1.0))
        _check_finite(step, {**parts, "gradient norm": norm}, s.lr)
        opt.step()
        opt.zero_grad()
        elapsed = time.perf_counter() - start
        over = s.max_minutes is not None and elapsed > 60 * s.max_minutes
        if step % s.log_every == 0 or step == s.steps or over:
            lines.append({"step": step, "lr": lr, "time_s": round(elapsed, 2), **parts})
            log(f"step {step:5d}  " + "  ".join(f"{k} {v:.4f}" for k, v in parts.items()) + f"  ({elapsed:.0f}s)")
        if over:
            log(f"stopping after {s.max_minutes:g} minutes ({step} of {s.steps} steps)")
            break
    model.eval()
    return {"steps": step, "train_seconds": round(time.perf_counter() - start, 1)}, lines


def _check_finite(step: int, values: dict, lr: float) -> None:
    """Stop at the first non-finite loss or gradient norm: every later step would train on NaN."""
    bad = [f"{name} {v}" for name, v in values.items() if not math.isfinite(v)]
    if bad:
        raise TrainingDiverged(f"training diverged: {', '.join(bad)} at step {step}; nothing was saved. "
                               f"Try a lower --lr (this run's was {lr:g})")


def step_bytes(model: nn.Module, s: TrainSettings) -> int:
    """A lower bound of the bytes a training step holds at once (float32): weights, gradients and
    AdamW's two moments; per example at least 2 tokens through every layer (the shortest source,
    "<to_words> 0", and target, "<bos> zero"), each with its ids, its logits and, in each layer,
    its input and feed-forward activations."""
    cfg = model.config
    layers = cfg.num_encoder_layers + (cfg.num_decoder_layers if isinstance(model, Seq2Seq) else 0)
    per_token = 3 * 8 + 4 * cfg.vocab_size + 4 * layers * (cfg.d_model + cfg.dim_feedforward)
    return 16 * model.num_params() + s.batch_size * 2 * per_token


def translation_loss(model: Seq2Seq, batch_size: int):
    def loss_fn(rng):
        b = D.translation_batch(rng, batch_size)
        _, loss = model(b.src, b.tgt_in, b.targets)
        return loss, {"loss": float(loss.data)}
    return loss_fn


def encoder_loss(model: EncoderOnly, batch_size: int):
    def loss_fn(rng):
        mlm, cls = model.losses(*D.mlm_batch(rng, batch_size), *D.pair_batch(rng, batch_size))
        return mlm + cls, {"mlm_loss": float(mlm.data), "cls_loss": float(cls.data)}
    return loss_fn


def evaluate_translation(model: Seq2Seq, n: int = 500, seed: int = 1, num_beams: int = 1,
                         batch_size: int = 250) -> dict:
    """Exact-match accuracy on n held-out numbers in each direction -> {direction: accuracy, ...}."""
    numbers = D.sample_numbers(np.random.default_rng(seed), n, "held_out", unique=True)
    result, examples = {}, []
    for direction in D.DIRECTIONS:
        pairs = [D.translation_pair(int(x), direction) for x in numbers]
        got = []
        for i in range(0, n, batch_size):
            got += translate_ids(model, [p[0] for p in pairs[i:i + batch_size]], 16, num_beams=num_beams)
        hits = [g == t for g, (_, t) in zip(got, pairs)]
        result[direction] = float(np.mean(hits))
        examples += [(D.decode(p[0]), D.decode(g), h) for p, g, h in list(zip(pairs, got, hits))[:4]]
    result["both"] = float(np.mean([result[d] for d in D.DIRECTIONS]))
    result["examples"] = examples
    return result


def evaluate_encoder(model: EncoderOnly, n: int = 500, seed: int = 1) -> dict:
    """Held-out masked-token accuracy (over masked positions) and true/false-pair accuracy, on n
    distinct held-out numbers each (as the translator's evaluation)."""
    rng = np.random.default_rng(seed)
    with autograd.no_grad():
        ids, targets = D.mlm_batch(rng, n, "held_out", unique=True)
        token_logits, _ = model(ids)
        masked = targets != D.IGNORE
        mlm = float((token_logits.numpy().argmax(-1) == targets)[masked].mean())
        pairs, labels = D.pair_batch(rng, n, "held_out", unique=True)
        _, class_logits = model(pairs)
        cls = float((class_logits.numpy().argmax(-1) == labels).mean())
    return {"masked_token_accuracy": mlm, "pair_accuracy": cls}


def _check_new_run(out: Path) -> None:
    """A run starts in a new or empty folder: it would replace another run's files (there is no
    resume here), or a model folder's. Called under the folder's lock, whose file it ignores."""
    held = sorted(p.name for p in out.iterdir() if p.name != LOCK_FILE)
    if held:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        raise FileExistsError(f"--out {str(out)!r} already holds {shown}; choose a new folder with --out, "
                              "or remove it")


def _dumps(value, indent: int | None = None) -> str:
    return json.dumps(json_safe(value), indent=indent, allow_nan=False)


def save_run(out: Path, task: str, model: nn.Module, settings: TrainSettings, summary: dict,
             metrics: list[dict] = ()) -> None:
    """Write the run's files (WRITTEN, in that order) into the folder `out`, which exists."""
    atomic_write_text(out / METRICS, "".join(_dumps(rec) + "\n" for rec in metrics))
    nn.checkpoint.save_safetensors(out / WEIGHTS, dict(model.state_dict()), {"task": task})
    atomic_write_text(out / SUMMARY, _dumps(summary, indent=2) + "\n")
    cfg = {"task": task, "model": model.config.to_dict(), "settings": asdict(settings)}
    atomic_write_text(out / CONFIG, _dumps(cfg, indent=2) + "\n")


def _open_run(out: Path) -> RunFolder:
    """The run folder `out`, locked (refused while another process writes it) and checked empty."""
    folder = RunFolder(out).open()
    try:
        _check_new_run(out)
    except BaseException:  # the files are another run's: leave them
        folder.close()
        raise
    return folder


def _discard(folder: RunFolder) -> None:
    """Remove what this run wrote (the folder itself if the run made it), then let go of its lock;
    _check_new_run saw none of WRITTEN at the start, so nothing of another run is lost."""
    if not folder.created:
        for name in WRITTEN:
            (folder / name).unlink(missing_ok=True)
    folder.discard()


def load_run(folder: str | Path, task: str | None = None) -> nn.Module:
    """The model of a run folder written by save_run, in eval mode; `task` checks what it holds."""
    folder = Path(folder)
    cfg_path = folder / CONFIG
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{folder}: no config.json (train one with `gpt translate train --out {folder}`)")
    try:
        cfg = nn.checkpoint.parse_json(cfg_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{cfg_path}: not a run's config.json ({exc})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{cfg_path}: not a run's config.json (a JSON {type(cfg).__name__})")
    if cfg.get("task") not in TASKS:
        raise ValueError(f"{folder} is not a run of `gpt translate` ({_other_run(cfg)}); give a folder written "
                         "by `gpt translate train` or `gpt translate encoder`")
    if task is not None and cfg["task"] != task:
        raise ValueError(f"{folder} holds a {cfg['task']!r} model, expected {task!r}")
    model = TASKS[cfg["task"]](Seq2SeqConfig.from_dict(cfg["model"]))
    tensors, _ = nn.checkpoint.load_safetensors(folder / WEIGHTS)
    model.load_state_dict(tensors)
    return model.eval()


def _other_run(cfg: dict) -> str:
    """What wrote a config.json that has no translate task, in words."""
    from gpt.vision.train import KIND as VIT

    if cfg.get("kind") == VIT:
        return "a ViT run, of `gpt vit train`"
    if "train" in cfg and "model" in cfg:
        return "a GPT run, of `gpt train`"
    return f"its config.json has no \"task\" of {' or '.join(map(repr, TASKS))}"


def train_task(task: str, model_cfg: Seq2SeqConfig, settings: TrainSettings, out: Path | None = None,
               log: Callable = print) -> tuple[nn.Module, dict]:
    """Train `task` ("translate" or "encoder"), evaluate on held-out numbers, save to `out` if given."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {sorted(TASKS)}, got {task!r}")
    autograd.manual_seed(settings.seed)
    model = TASKS[task](model_cfg)
    check_fits(step_bytes(model, settings), f"a training step of --batch-size {settings.batch_size:,} on this "
               "model", "lower --batch-size")
    folder = _open_run(Path(out)) if out is not None else None
    try:
        summary, metrics = _train_and_evaluate(task, model, settings, log)
        if folder is not None:
            save_run(folder.path, task, model, settings, summary, metrics)
    except BaseException:  # diverged, Ctrl-C, a failed evaluation or write: no partial run is left
        if folder is not None:
            _discard(folder)
        raise
    if folder is not None:
        folder.close()
    return model, summary


def _train_and_evaluate(task: str, model: nn.Module, settings: TrainSettings, log: Callable) -> tuple[dict, list]:
    """(summary with the held-out results, metrics records) of training `model` on `task`."""
    log(report(model))
    make_loss = translation_loss if task == "translate" else encoder_loss
    summary, metrics = _loop(model, settings, make_loss(model, settings.batch_size), log)
    if task == "translate":
        summary.update(evaluate_translation(model, settings.eval_examples))
    else:
        summary.update(evaluate_encoder(model, settings.eval_examples))
    summary["parameters"] = model.num_params()
    return summary, metrics
