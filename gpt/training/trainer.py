"""The training loop: data in, a trained GPT and a run folder out, resumable exactly.

A run folder holds
    config.json       the settings, the model config and the data folder used
    tokenizer.json    the tokenizer of the data
    metrics.jsonl     one JSON object per log step and per evaluation
    latest.safetensors, best.safetensors   checkpoints (gpt.training.checkpoint)
    summary.json      written at the end

Exact resume: a checkpoint taken between two optimizer steps holds the weights, the AdamW
moments and step count, the step, the data generator's state and the dropout generator's
state; the learning rate is a function of the step. So N steps, save, resume, N more steps
gives the weights of 2N steps straight, bit for bit on the CPU (tests/gpt/test_train.py).

Data-parallel (`mpiexec -n N gpt train`, gpt.training.dist): B is the batch per rank and a step sees a
global batch of N x B windows, drawn by one generator that every rank runs alike, so N ranks of
batch B train like one process of batch N x B (tests/gpt/test_dist.py). Gradients are averaged
over ranks after the last micro-batch, before clipping; evaluation batches are split the same
way and their losses averaged. Dropout masks come from the same seed on every rank (each rank
draws the same masks, applied to different windows), which keeps the generator state that a
checkpoint saves identical on all ranks. Only rank 0 writes files and prints; a checkpoint
records the number of ranks, and resuming it with another number is an error.
"""
from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpt.training.checkpoint import CheckpointError, find_checkpoint, load_checkpoint, save_checkpoint
from gpt.files import atomic_write_text
from gpt.data import load_tokenizer, open_tokens, read_meta, eot_id
from gpt.training.dist import check_resume_world_size, weights_checksum
from gpt.training.evaluate import evaluate, loss_value, sample_ids
from gpt.training.flops import flops_per_token, measure_peak_flops
from gpt.data.loader import BatchLoader, fixed_batches
from gpt.training.progress import MetricsLog, ProgressLine, StopFlag, format_count
from gpt.training.rng import get_rng_state, set_rng_state
from gpt.training.config import FROZEN_ON_RESUME, TrainConfig

RUNS_ROOT = "runs"


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm became NaN or infinite."""


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


# ---- pieces ----------------------------------------------------------------------------------
def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup to cfg.lr, then cosine down to cfg.min_lr at lr_decay_steps (then flat)."""
    from nn.optim import warmup_cosine

    total = max(cfg.lr_decay_steps or cfg.max_steps, cfg.warmup_steps)
    return float(warmup_cosine(step, cfg.warmup_steps, total, cfg.lr, cfg.min_lr))


def param_groups(model, weight_decay: float) -> list[dict]:
    """nanoGPT's rule: every parameter of 2 or more dimensions (matmul weights, embeddings)
    decays; biases and norm gains (1-D) do not."""
    decay = [p for _, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def _new_run_dir(root: str) -> Path:
    base = Path(root) / time.strftime("%Y%m%d-%H%M%S")
    p, i = base, 1
    while p.exists():
        p, i = Path(f"{base}-{i}"), i + 1
    return p


# ---- the trainer -----------------------------------------------------------------------------
class Trainer:
    """Builds everything a run needs from a TrainConfig and runs the loop (`run()`)."""

    def __init__(self, cfg: TrainConfig, explicit: set | None = None, out: ProgressLine | None = None,
                 runs_root: str = RUNS_ROOT, dist=None):
        self.cfg = cfg
        self.explicit = set(explicit or ())
        self.dist = dist             # a gpt.training.dist.Distributed under MPI, else None
        self.world_size = dist.world_size if dist is not None else 1
        self.is_main = dist is None or dist.is_main  # rank 0 under MPI: the only one that writes
        self.out = out or ProgressLine(enabled=self.is_main)
        self.say = self.out.print
        self.runs_root = runs_root
        self.allreduce_s = 0.0       # seconds spent in gradient all-reduces
        try:
            self._setup()
        except BaseException:
            # A run that could not start leaves no empty or half-filled folder behind.
            if getattr(self, "_created_run_dir", False) and self.is_main:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            raise

    # -- setup --------------------------------------------------------------------------------
    def _setup(self) -> None:
        cfg = self.cfg
        from autograd import backend

        try:  # a missing GPU is the user's to fix: a clear message before any work
            backend.module_for_device(cfg.device)
        except RuntimeError as exc:
            raise ValueError(f"--device {cfg.device}: {exc}") from None
        if self.dist is not None:  # each rank may have its own GPU; everything else must agree
            self.dist.check_same("training settings", {k: v for k, v in cfg.to_dict().items() if k != "device"})
        self.resume_ckpt = None
        if cfg.resume:
            path = find_checkpoint(cfg.resume, prefer=("latest.safetensors", "best.safetensors"))
            self.resume_ckpt = load_checkpoint(path, device="cpu")
            check_resume_world_size(self.resume_ckpt.meta, self.world_size, path)
            self._merge_resumed_settings()
            cfg = self.cfg
            self.run_dir = path.parent
        elif self.dist is not None:  # one folder for all ranks: rank 0 names it (a shared file system)
            self.run_dir = Path(self.dist.run_on_main(lambda: str(self._new_run_folder()), "choice of the run folder"))
        else:
            self.run_dir = self._new_run_folder()
        self._created_run_dir = not self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.dist is not None:  # rank 0 prepares the data (tokenizer training may take minutes)
            self.data_dir = Path(self.dist.run_on_main(lambda: str(self._data_dir()), "data preparation"))
        else:
            self.data_dir = self._data_dir()
        self.meta = read_meta(self.data_dir)
        V = int(self.meta["vocab_size"])
        self.tokenizer = load_tokenizer(self.meta["tokenizer_path"]) if self.meta.get("tokenizer_path") else None
        self.tokenizer_text = (Path(self.meta["tokenizer_path"]).read_text(encoding="utf-8")
                               if self.meta.get("tokenizer_path") else None)
        self.train_tokens = open_tokens(self.data_dir, "train", self.meta)
        self.val_tokens = open_tokens(self.data_dir, "val", self.meta)

        from autograd import keep_freed_memory, manual_seed
        from gpt.model.config import GPTConfig
        from gpt.model.gpt import GPT
        from nn.optim import AdamW

        self.model_cfg = GPTConfig.from_dict(cfg.model_dict(V))
        keep_freed_memory()  # a step frees and re-allocates the same large buffers: no page faults
        manual_seed(cfg.seed)
        self.model = GPT(self.model_cfg)
        if cfg.device != "cpu":
            self.model.to(cfg.device)
        if self.dist is not None:  # the same seed gives the same weights; rank 0's are the rule
            self.dist.broadcast_arrays(p.data for p in self.model.parameters())
        self.model.train()
        from nn.amp import configure

        self.amp = configure(self.model, cfg.precision, cfg.device)  # fp16: float32 master weights
        groups = param_groups(self.model, cfg.weight_decay)
        self.optimizer = AdamW(self.amp.master_groups(groups) if self.amp else groups, lr=cfg.lr,
                               betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, weight_decay=cfg.weight_decay)
        T, B = cfg.block_size, cfg.batch_size
        shard = (self.dist.rank, self.world_size) if self.dist is not None else (0, 1)
        self.loader = BatchLoader(self.train_tokens, B, T, seed=cfg.seed, device=cfg.device, name="train",
                                  shard=shard)
        self.eval_sets = {
            "train": fixed_batches(self.train_tokens, cfg.eval_batches, B, T, seed=cfg.seed + 1,
                                   device=cfg.device, name="train", shard=shard),
            "val": fixed_batches(self.val_tokens, cfg.eval_batches, B, T, seed=cfg.seed + 2,
                                 device=cfg.device, name="val", shard=shard),
        }
        self.step = 0
        self.best_val = math.inf
        self.last_good_step: int | None = None
        if self.resume_ckpt is not None:
            self._restore(self.resume_ckpt)
        self.flops_per_step = flops_per_token(self.model_cfg, T) * T * B * cfg.grad_accum

    def _new_run_folder(self) -> Path:
        run_dir = Path(self.cfg.out) if self.cfg.out else _new_run_dir(self.runs_root)
        if (run_dir / "latest.safetensors").exists():
            raise FileExistsError(
                f"run folder {str(run_dir)!r} already holds a checkpoint: continue it with "
                f"--resume {run_dir}, or choose another --out")
        return run_dir

    def _merge_resumed_settings(self) -> None:
        """The resumed run's settings, overridden by what was given now (except those that
        would change the model or the data, which must match)."""
        saved = dict(self.resume_ckpt.meta.get("train_args", {}))
        conflicts = [f"--{k.replace('_', '-')} {getattr(self.cfg, k)!r} (the run has {saved[k]!r})"
                     for k in FROZEN_ON_RESUME
                     if k in self.explicit and k in saved and saved[k] != getattr(self.cfg, k)]
        if conflicts:
            raise ValueError("cannot change on resume: " + "; ".join(conflicts))
        values = {**saved, **{k: getattr(self.cfg, k) for k in self.explicit}}
        values["resume"] = self.cfg.resume
        values["out"] = None
        self.cfg = TrainConfig(**{k: v for k, v in values.items() if k in TrainConfig.__dataclass_fields__})
        self.cfg.validate()

    def _data_dir(self) -> Path:
        cfg = self.cfg
        if self.resume_ckpt is not None:
            d = self.resume_ckpt.meta.get("data_dir")
            if d and Path(d).is_dir():
                return Path(d)
        if cfg.data:
            return Path(cfg.data)
        if cfg.input:
            from gpt.data import prepare

            d = self.run_dir / "data"
            self.say(f"data: tokenizing {len(cfg.input)} input path(s) into {d}")
            prepare(cfg.input, d, tokenizer=cfg.tokenizer, vocab_size=cfg.vocab_size, char=cfg.char,
                    val_fraction=cfg.val_fraction, workers=cfg.workers, max_chars=cfg.max_chars,
                    tokenizer_max_chars=cfg.max_chars, verbose=True)
            return d
        from gpt.data.corpus import default_data_dir

        return default_data_dir(self.runs_root, cfg.vocab_size, char=cfg.char, max_chars=cfg.max_chars,
                                val_fraction=cfg.val_fraction, workers=cfg.workers)

    def _restore(self, ckpt) -> None:
        try:
            self.model.load_state_dict(ckpt.model_state)
            if self.amp is not None:
                self.amp.load_state_dict(ckpt.model_state)
        except (KeyError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {ckpt.meta['path']!r} does not fit the model: {exc}") from None
        if ckpt.optimizer_state is None:
            raise CheckpointError(f"checkpoint {ckpt.meta['path']!r} holds no optimizer state to resume from")
        try:  # arrays go onto each parameter's device
            self.optimizer.load_state_dict(ckpt.optimizer_state)
        except ValueError as exc:
            raise CheckpointError(f"checkpoint {ckpt.meta['path']!r}: {exc}") from None
        self.loader.load_state_dict(ckpt.meta["loader"])
        set_rng_state(ckpt.meta.get("rng"))
        self.step = int(ckpt.meta["step"])
        self.best_val = float(ckpt.meta.get("best_val_loss") or math.inf)
        self.last_good_step = self.step

    # -- checkpoints ---------------------------------------------------------------------------
    def _ckpt_meta(self, loader_state: dict, rng_state: Any) -> dict:
        return {
            "step": self.step, "config": self.model_cfg.to_dict(), "train_args": self.cfg.to_dict(),
            "loader": loader_state, "rng": rng_state, "data_dir": str(Path(self.data_dir).resolve()),
            "best_val_loss": None if math.isinf(self.best_val) else self.best_val,
            "tokenizer": self.tokenizer_text, "vocab_size": int(self.meta["vocab_size"]),
            "world_size": self.world_size,
        }

    def save(self, name: str = "latest.safetensors", loader_state=None, rng_state=None) -> Path:
        path = self.run_dir / name
        if self.dist is not None:  # rank 0 saves for all: make sure all hold the same weights
            self.dist.check_same(f"weights at step {self.step} (a checksum)",
                                 weights_checksum(self.model.parameters()))
        if self.is_main:
            meta = self._ckpt_meta(loader_state or self.loader.state_dict(),
                                   rng_state if rng_state is not None else get_rng_state(self.cfg.device))
            weights = (self.amp or self.model).state_dict()  # fp16 runs store the float32 masters
            save_checkpoint(path, weights, self.optimizer.state_dict(), meta)
        if name == "latest.safetensors":
            self.last_good_step = self.step
        return path

    def _write_run_files(self) -> None:
        if not self.is_main:
            return
        data_meta = {k: v for k, v in self.meta.items() if k != "tokenizer_path"}
        info = {"train": self.cfg.to_dict(), "model": self.model_cfg.to_dict(),
                "data_dir": str(Path(self.data_dir).resolve()), "data_meta": data_meta}
        atomic_write_text(self.run_dir / "config.json", json.dumps(info, indent=2))
        if self.tokenizer_text is not None:
            atomic_write_text(self.run_dir / "tokenizer.json", self.tokenizer_text)

    # -- hooks for data-parallel training (no-ops on one process) ------------------------------
    def reduce_gradients(self) -> None:
        """Average gradients across ranks (gpt.training.dist); one process: nothing to do."""
        if self.dist is not None:
            self.allreduce_s += self.dist.allreduce_gradients(list(self.model.parameters()))

    def _agree(self, *flags: bool) -> list[bool]:
        """Each flag set on any rank (Ctrl-C, time budget), so that all ranks stop at one step."""
        return self.dist.any(flags) if self.dist is not None else list(flags)

    # -- the loop ------------------------------------------------------------------------------
    def _train_step(self, lr: float) -> tuple[float, float]:
        """One optimizer step over grad_accum micro-batches -> (mean loss, gradient norm)."""
        from nn.optim import clip_grad_norm

        cfg = self.cfg
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        total = 0.0
        for micro in range(cfg.grad_accum):
            x, y = self.loader.next_batch()
            _, loss = self.model(x, y)
            value = loss_value(loss)
            if not math.isfinite(value) and self.dist is None:  # ranks decide together, below
                raise TrainingDiverged(f"loss is {value} at step {self.step} (micro-batch {micro})")
            if cfg.grad_accum > 1:
                loss = loss * (1.0 / cfg.grad_accum)
            if self.amp is not None:
                self.amp.backward(loss)  # seeded with the loss scale
            else:
                loss.backward()
            total += value
        self.reduce_gradients()
        if self.dist is not None:  # the loss of the global batch; NaN on one rank stops all
            total = self.dist.allreduce_mean_scalar(total)
            if not math.isfinite(total):
                raise TrainingDiverged(f"loss is {total} at step {self.step} (mean over ranks)")
        if self.amp is not None:  # unscale into the masters; an overflow skips the step (norm inf)
            self._in_update = True
            _, norm = self.amp.step(self.optimizer, cfg.grad_clip)
            self._in_update = False
            return total / cfg.grad_accum, norm
        params = [p for p in self.model.parameters()]
        if cfg.grad_clip > 0:
            norm = float(clip_grad_norm(params, cfg.grad_clip))
        else:
            norm = float(np.sqrt(sum(float((p.grad.astype(np.float64) ** 2).sum())
                                     for p in params if p.grad is not None)))
        if not math.isfinite(norm):
            raise TrainingDiverged(f"gradient norm is {norm} at step {self.step}")
        self._in_update = True
        self.optimizer.step()
        self.optimizer.zero_grad()
        self._in_update = False
        return total / cfg.grad_accum, norm

    def _evaluate(self, metrics: MetricsLog | None) -> dict:
        t0 = time.perf_counter()
        res = {split: evaluate(self.model, batches) for split, batches in self.eval_sets.items()}
        if self.dist is not None:  # each rank evaluated its slice of the same global batches
            res = {split: self.dist.allreduce_mean_scalar(v) for split, v in res.items()}
        improved = res["val"] < self.best_val
        if improved:
            self.best_val = res["val"]
        if metrics:
            metrics.write({"kind": "eval", "step": self.step, "train_loss": res["train"],
                           "val_loss": res["val"], "time": time.time()})
        self.say(f"step {self.step:>6}  eval: train loss {res['train']:.4f}  val loss {res['val']:.4f}"
                 f"{'  (best)' if improved else ''}  [{time.perf_counter() - t0:.1f} s]")
        if improved and self.step > 0:
            self.save("best.safetensors")
        return res

    def run(self) -> RunResult:
        cfg = self.cfg
        peak = cfg.peak_flops or measure_peak_flops(cfg.device)
        n_params = self.model.num_params()
        self._write_run_files()
        self.say(f"run folder: {self.run_dir}")
        self.say(f"model: {n_params:,} parameters ({self.model_cfg.n_layer} layers x {self.model_cfg.n_head} "
                 f"heads, d={self.model_cfg.n_embd}, T={cfg.block_size}, vocab {self.model_cfg.vocab_size}); "
                 f"data: {len(self.train_tokens):,} train + {len(self.val_tokens):,} val tokens")
        tokens_per_step = cfg.batch_size * cfg.block_size * cfg.grad_accum * self.world_size  # all ranks
        self.say(f"training: {cfg.max_steps} steps of {tokens_per_step:,} tokens on {cfg.device}"
                 + (f" x {self.world_size} MPI ranks (batch {cfg.batch_size} each)" if self.dist else "")
                 + f"; peak {peak / 1e9:.0f} GFLOP/s "
                 f"({'given' if cfg.peak_flops else 'the best float32 matmul rate seen here'}) for MFU"
                 + (f"; resuming at step {self.step}" if self.resume_ckpt else ""))
        metrics = MetricsLog(self.run_dir / "metrics.jsonl",
                             resume_step=self.step if self.resume_ckpt else None) if self.is_main else None
        ckpt_every = cfg.checkpoint_interval or cfg.eval_interval
        stop_reason, last_eval, loss = "max_steps", None, None
        t_start, first_step = time.perf_counter(), self.step
        t_log, steps_since_log, ar_log = time.perf_counter(), 0, self.allreduce_s
        self._in_update = False
        evaluated_at = None
        final_state = (None, None)   # None: the loader's and generator's current state
        try:
            with StopFlag(self.say) as stop:
                while self.step < cfg.max_steps:
                    if self.step % cfg.eval_interval == 0 and evaluated_at != self.step:
                        last_eval, evaluated_at = self._evaluate(metrics), self.step
                        if not cfg.peak_flops and self.step > 0:
                            # On a busy machine the start-up matmul may have run slowly: the
                            # peak is the best rate seen, re-measured (0.1 s) at each evaluation.
                            peak = max(peak, measure_peak_flops(cfg.device, repeats=3))
                    interrupted, out_of_time = self._agree(
                        stop.requested,
                        cfg.time_budget is not None and time.perf_counter() - t_start >= cfg.time_budget)
                    if interrupted:
                        stop_reason = "interrupted"
                        break
                    if out_of_time:
                        stop_reason = "time_budget"
                        break
                    # The state at the step boundary: what a checkpoint taken mid-step saves.
                    self._boundary = (self.loader.state_dict(), get_rng_state(cfg.device))
                    lr = lr_at(self.step, cfg)
                    t0, ar0 = time.perf_counter(), self.allreduce_s
                    loss, norm = self._train_step(lr)
                    self.step += 1
                    dt = time.perf_counter() - t0
                    steps_since_log += 1
                    mfu = self.flops_per_step / dt / peak  # per rank: its own share of the work
                    if self.out.tty or self.step % cfg.log_interval == 0:
                        self.out.update(
                            f"step {self.step:>6}/{cfg.max_steps}  loss {loss:.4f}  lr {lr:.2e}  "
                            f"{format_count(tokens_per_step / dt)} tok/s  {dt * 1e3:.0f} ms/step  "
                            f"MFU {mfu:.1%}"
                            + (f"  all-reduce {(self.allreduce_s - ar0) * 1e3:.1f} ms" if self.dist else ""))
                    if metrics and (self.step % cfg.log_interval == 0 or self.step == cfg.max_steps):
                        now = time.perf_counter()
                        avg = (now - t_log) / steps_since_log
                        metrics.write({"kind": "train", "step": self.step, "loss": loss, "lr": lr,
                                       "grad_norm": norm, "ms_per_step": avg * 1e3,
                                       "tokens_per_s": tokens_per_step / avg,
                                       "mfu": self.flops_per_step / avg / peak, "time": time.time(),
                                       **({"allreduce_ms": (self.allreduce_s - ar_log) * 1e3 / steps_since_log}
                                          if self.dist is not None else {})})
                        t_log, steps_since_log, ar_log = now, 0, self.allreduce_s
                    if self.step % ckpt_every == 0:
                        self.save()
        except TrainingDiverged as exc:
            self.out.close()
            kept = (f"the last good checkpoint is kept: {self.run_dir / 'latest.safetensors'} "
                    f"(step {self.last_good_step})" if self.last_good_step is not None
                    else "no checkpoint was written yet")
            if metrics:
                metrics.close()
            stopped = TrainingDiverged(f"{exc}: training stopped; {kept}. Try a lower --lr, a longer "
                                       "--warmup-steps or --grad-clip, then --resume.")
            stopped.every_rank = self.dist is not None  # ranks judge the same global loss and norm
            raise stopped from None
        except KeyboardInterrupt:
            self.out.close()
            if self._in_update or self.dist is not None:  # ranks may be mid-collective: abort them all
                self.say(f"interrupted {'inside an optimizer update' if self._in_update else 'twice'}: "
                         f"not saving; the last checkpoint (step {self.last_good_step}) is kept")
                if metrics:
                    metrics.close()
                raise
            # Mid-step: the weights are those of the step boundary, the generators moved on.
            for p in self.model.parameters():
                p.grad = None
            final_state = getattr(self, "_boundary", None) or final_state
            stop_reason = "interrupted"
        self.out.close()
        if evaluated_at != self.step and stop_reason != "interrupted":
            last_eval, evaluated_at = self._evaluate(metrics), self.step
        path = self.save(loader_state=final_state[0], rng_state=final_state[1])
        launch = f"mpiexec -n {self.world_size} gpt train" if self.dist is not None else "gpt train"
        if stop_reason == "interrupted":
            self.say(f"interrupted: saved {path} at step {self.step}; "
                     f"continue with: {launch} --resume {self.run_dir}")
        elapsed = time.perf_counter() - t_start
        samples = self._samples() if stop_reason != "interrupted" else []
        summary = {
            "run_dir": str(self.run_dir), "steps": self.step, "stop_reason": stop_reason,
            "eval_step": evaluated_at,
            "train_loss": last_eval["train"] if last_eval else None,
            "val_loss": last_eval["val"] if last_eval else None,
            "best_val_loss": None if math.isinf(self.best_val) else self.best_val,
            "seconds": elapsed, "parameters": n_params, "checkpoint": str(path),
            "world_size": self.world_size,
            "allreduce_ms_per_step": (self.allreduce_s * 1e3 / max(self.step - first_step, 1)
                                      if self.dist is not None else None),
        }
        if self.is_main:
            atomic_write_text(self.run_dir / "summary.json", json.dumps(summary, indent=2))
        if metrics:
            metrics.close()
        def fmt(x):
            return "-" if x is None else f"{x:.4f}"

        if self.dist is not None:
            self.say(f"all-reduce of the gradients: {summary['allreduce_ms_per_step']:.1f} ms per step "
                     f"on average over {self.world_size} ranks")
        self.say(f"done: {self.step} steps in {elapsed:.0f} s ({stop_reason}); at step {evaluated_at}: "
                 f"train loss {fmt(summary['train_loss'])}, val loss {fmt(summary['val_loss'])}, "
                 f"best val {fmt(summary['best_val_loss'])}; checkpoints in {self.run_dir}")
        if stop_reason != "interrupted":
            hint = " --prompt 'def '" if not (cfg.data or cfg.input) else ""  # the default corpus is Python
            self.say(f"sample more: gpt sample --run {self.run_dir}{hint}; "
                     f"train on: {launch} --resume {self.run_dir} --max-steps {2 * max(self.step, 1)}")
        return RunResult(self.run_dir, self.step, stop_reason, summary["train_loss"], summary["val_loss"],
                         summary["best_val_loss"], samples, self.model, self.optimizer)

    def _samples(self) -> list[str]:
        cfg = self.cfg
        if cfg.samples <= 0 or cfg.sample_tokens <= 0 or not self.is_main:
            return []
        tok = self.tokenizer
        if cfg.prompt is not None and tok is not None:
            prompt = tok.encode(cfg.prompt, allowed_special="all") if hasattr(tok, "encode") else []
        else:
            e = eot_id(tok) if tok is not None else self.meta.get("eot_id")
            prompt = [e] if e is not None else [int(self.val_tokens[0])]
        prompt = prompt[-cfg.block_size:] or [0]
        rows = sample_ids(self.model, prompt, cfg.samples, cfg.sample_tokens, cfg.temperature,
                          cfg.top_k, seed=cfg.seed)
        texts = []
        for i, ids in enumerate(rows):
            text = tok.decode(ids) if tok is not None else " ".join(map(str, ids))
            texts.append(text)
            self.say(f"---- sample {i + 1} " + "-" * 50)
            self.say((cfg.prompt or "") + text)
        if texts:
            self.say("-" * 62)
        return texts


def train(cfg: TrainConfig, explicit: set | None = None, out: ProgressLine | None = None,
          runs_root: str = RUNS_ROOT, dist=None) -> RunResult:
    """Run training as `cfg` says; returns the run's result (the model is in .model).
    dist: a gpt.training.dist.Distributed to train data-parallel over MPI ranks (None: one process)."""
    return Trainer(cfg, explicit, out, runs_root, dist).run()
