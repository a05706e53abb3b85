"""The training loop: data in, a trained GPT and a run folder out, resumable exactly.

The run folder's files are described in gpt.training.run_folder. Exact resume: a checkpoint taken
between two optimizer steps holds the weights, the AdamW moments and step count, the step, the
data generator's state and the dropout generator's state; the learning rate is a function of the
step. So N steps, save, resume, N more steps gives the weights of 2N steps straight, bit for bit
on the CPU (tests/gpt/test_train.py). The update that ends a step (the optimizer step, the step
count and the state recorded at the new step boundary) runs with Ctrl-C held back, so an
interrupt lands before or after it, never inside: a checkpoint is always one consistent step.

Data-parallel training (`mpiexec -n N gpt train`) is described in gpt.training.dist: only
rank 0 writes files and prints, and every rank stops at the same step.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from gpt.data.folder import bits_per_byte, load_tokenizer, open_tokens, split_bytes, tokenizer_text
from gpt.training.checkpoint import BEST, LATEST, find_checkpoint
from gpt.training.config import TrainConfig
from gpt.training.dist import check_resume_world_size, weights_checksum
from gpt.training.evaluate import evaluate, loss_value
from gpt.model.report import flops_per_token
from gpt.training.flops import measure_peak_flops
from gpt.training.progress import ProgressLine, StopFlag, deferred_interrupts
from gpt.training.step_log import StepLog
from gpt.training.build import build_batches, build_model, data_dir_record, data_folder, saved_data_dir
from gpt.training.end_of_run import RunResult, print_samples, sample_prompt, say_summary
from gpt.training.resume import load_for_resume, restore, resumed_settings
from gpt.training.rng import get_rng_state
from gpt.training.run_folder import RunFolder, new_run_path

RUNS_ROOT = "runs"
# A loss this many times the loss of a uniform guess (ln V) means the run has diverged, even
# while it is finite: a model that bad has unlearned everything.
DIVERGED_LOSS_FACTOR = 3.0


class TrainingDiverged(RuntimeError):
    """The loss or the gradient norm became NaN, infinite or far worse than a uniform guess."""


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup to cfg.lr, then cosine down to cfg.final_lr() at lr_decay_steps (then flat)."""
    from nn.optim import warmup_cosine

    total = max(cfg.lr_decay_steps or cfg.max_steps, cfg.warmup_steps)
    return float(warmup_cosine(step, cfg.warmup_steps, total, cfg.lr, cfg.final_lr()))


class Trainer:
    """Builds everything a run needs from a TrainConfig (the constructor) and trains (`run()`)."""

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
        self.folder: RunFolder | None = None
        try:
            self._setup()
        except BaseException:
            self._abandon()
            raise

    @property
    def run_dir(self) -> Path:
        return self.folder.path

    # -- setup --------------------------------------------------------------------------------
    def _setup(self) -> None:
        from autograd import backend

        try:  # a missing GPU is the user's to fix: a clear message before any work
            backend.module_for_device(self.cfg.device)
        except RuntimeError as exc:
            raise ValueError(f"--device {self.cfg.device}: {exc}") from None
        if self.dist is not None:  # each rank may have its own GPU; everything else must agree
            self.dist.check_same("training settings",
                                 {k: v for k, v in self.cfg.to_dict().items() if k != "device"})
        self.resume_ckpt = None
        if self.cfg.resume:
            self._alike(self._read_resume, "reading of the checkpoint")
        elif self.dist is not None:  # one folder for all ranks: rank 0 names it (a shared file system)
            self._open_folder(self.dist.run_on_main(lambda: str(self._new_run_path()), "choice of the run folder"))
        else:
            self._open_folder(self._new_run_path())
        resumed_data = saved_data_dir(self.resume_ckpt.meta) if self.resume_ckpt is not None else None
        find_data = lambda: str(data_folder(self.cfg, resumed_data, self.run_dir, self.runs_root, self.say))  # noqa: E731
        if self.dist is not None:  # rank 0 prepares the data (tokenizer training may take minutes)
            self.data_dir = Path(self.dist.run_on_main(find_data, "data preparation"))
        else:
            self.data_dir = Path(find_data())
        self._alike(self._open_data, "reading of the data folder")
        self.model_cfg, self.model, self.amp, self.optimizer = build_model(
            self.cfg, int(self.meta["vocab_size"]), self.dist, self.tokenizer, frozenset(self.explicit))
        self._alike(self._start_position, "set-up of the batches")
        self._boundary = (self.loader.state_dict(), get_rng_state(self.cfg.device))
        self.flops_per_step = flops_per_token(self.model_cfg, self.cfg.block_size) * \
            self.cfg.block_size * self.cfg.batch_size * self.cfg.grad_accum

    def _alike(self, fn, what: str) -> Any:
        """fn(); under MPI an error that every rank meets alike is reported once (Distributed.run_on_all)."""
        return fn() if self.dist is None else self.dist.run_on_all(fn, what)

    def _read_resume(self) -> None:
        """The checkpoint to resume and the settings it brings, with its run folder opened."""
        path = find_checkpoint(self.cfg.resume, prefer=(LATEST, BEST))
        self._open_folder(path.parent)  # before reading: a run still training refuses here
        self.resume_ckpt = load_for_resume(path)
        check_resume_world_size(self.resume_ckpt.meta, self.world_size, path)
        self.cfg = resumed_settings(dict(self.resume_ckpt.meta.get("train_args", {})), self.cfg,
                                    self.explicit, self.say, self.resume_ckpt.meta)

    def _start_position(self) -> None:
        """The batches, and the step the run starts at: 0, or the resumed checkpoint's with its state."""
        self.loader, self.eval_sets = build_batches(self.cfg, self.train_tokens, self.val_tokens, self.dist)
        self.step, self.best_val, self.last_good_step = 0, math.inf, None
        self.best_step: int | None = None
        if self.resume_ckpt is not None:
            restore(self.resume_ckpt, self.model, self.amp, self.optimizer, self.loader, self.fingerprint, self.say)
            self.step = self.last_good_step = self.resume_ckpt.step
            self.best_val = float(self.resume_ckpt.meta.get("best_val_loss") or math.inf)

    def _open_folder(self, path) -> None:
        self.folder = RunFolder(path)
        if self.is_main:  # the only rank that writes it makes it (then only rank 0 may remove it)
            self.folder.open()

    def _abandon(self) -> None:
        """A run that could not start leaves no empty or half-filled folder, and no lock."""
        if self.folder is not None:
            self.folder.discard()

    def _new_run_path(self) -> Path:
        run_dir = Path(self.cfg.out) if self.cfg.out else new_run_path(self.runs_root)
        if (run_dir / LATEST).exists():
            raise FileExistsError(f"run folder {str(run_dir)!r} already holds a checkpoint: continue it "
                                  f"with --resume {run_dir}, or choose another --out")
        return run_dir

    def _open_data(self) -> None:
        self.meta, self.fingerprint = self.folder.read_data(self.data_dir)  # `gpt prepare` is refused meanwhile
        tok_path = self.meta.get("tokenizer_path")
        self.tokenizer, self.tokenizer_text = (load_tokenizer(tok_path), tokenizer_text(tok_path)) if tok_path \
            else (None, None)
        self.train_tokens, self.val_tokens = (open_tokens(self.data_dir, s, self.meta) for s in ("train", "val"))
        self.val_bytes = split_bytes(self.meta, "val", self.val_tokens, self.tokenizer)
        if self.cfg.samples > 0 and self.cfg.prompt is not None:
            sample_prompt(self.tokenizer, self.meta, self.val_tokens, self.cfg)  # refused now, not at the end

    # -- checkpoints and run files -------------------------------------------------------------
    def _ckpt_meta(self, loader_state: dict, rng_state: Any) -> dict:
        return {
            "step": self.step, "config": self.model_cfg.to_dict(), "train_args": self.cfg.to_dict(),
            "loader": loader_state, "rng": rng_state, "data_dir": data_dir_record(self.data_dir, self.run_dir),
            "best_val_loss": None if math.isinf(self.best_val) else self.best_val,
            "tokenizer": self.tokenizer_text, "vocab_size": int(self.meta["vocab_size"]),
            "world_size": self.world_size, "data_fingerprint": self.fingerprint,
            "loss_scale": self.amp.scaler.state_dict() if self.amp is not None else None,  # fp16 resumes exactly
        }

    def save(self, name: str = LATEST) -> Path:
        """Checkpoint the state at the current step boundary (weights, moments, generators)."""
        if self.dist is not None:  # rank 0 saves for all: make sure all hold the same weights
            self.dist.check_same(f"weights at step {self.step} (a checksum)",
                                 weights_checksum(self.model.parameters()))
        path = self.folder / name
        if self.is_main:
            weights = (self.amp or self.model).state_dict()  # fp16 runs store the float32 masters
            self.folder.save_checkpoint(name, weights, self.optimizer.state_dict(), self._ckpt_meta(*self._boundary))
        if name == LATEST:
            self.last_good_step = self.step
        return path

    def _write_run_files(self) -> None:
        if not self.is_main:
            return
        data_meta = {k: v for k, v in self.meta.items() if k != "tokenizer_path"}
        self.folder.write_config({"train": self.cfg.to_dict(), "model": self.model_cfg.to_dict(),
                                  "data_dir": data_dir_record(self.data_dir, self.run_dir), "data_meta": data_meta})
        if self.tokenizer_text is not None:
            self.folder.write_tokenizer(self.tokenizer_text)

    # -- hooks for data-parallel training (no-ops on one process) ------------------------------
    def reduce_gradients(self) -> None:
        """Average gradients across ranks (gpt.training.dist); one process: nothing to do."""
        if self.dist is not None:
            self.allreduce_s += self.dist.allreduce_gradients(list(self.model.parameters()))

    def _agree(self, *flags: bool) -> list[bool]:
        """Each flag set on any rank (Ctrl-C, time budget), so that all ranks stop at one step."""
        return self.dist.any(flags) if self.dist is not None else list(flags)

    # -- one step ------------------------------------------------------------------------------
    def _train_step(self, lr: float) -> tuple[float, float]:
        """One optimizer step over grad_accum micro-batches -> (mean loss, gradient norm)."""
        self.optimizer.set_lr(lr)
        loss = self._accumulate_gradients()
        with deferred_interrupts():  # the update, the step count and the boundary change together
            norm = self._update()
            self.step += 1
            self._boundary = (self.loader.state_dict(), get_rng_state(self.cfg.device))
        return loss, norm

    @property
    def _host_reads(self) -> bool:
        """Whether each step reads its loss and gradient norm: on the CPU (where it is free) and
        under MPI (whose ranks must agree on them); on one GPU only the steps that are logged or
        saved do, so the step never waits for the host (see _read)."""
        return self.cfg.device == "cpu" or self.dist is not None

    def _read(self, loss, norm) -> tuple[float, float]:
        """The loss and norm of a step as floats, stopping the run when either is not finite."""
        loss, norm = float(loss), float(norm)
        for what, value in (("loss", loss), ("gradient norm", norm)):
            if not math.isfinite(value):
                raise TrainingDiverged(f"{what} is {value} at step {self.step}")
        return loss, norm

    def _accumulate_gradients(self):
        """Forward and backward over grad_accum micro-batches; the mean loss (over ranks too),
        a float, or a 0-d device array when the step does not read it (_host_reads)."""
        n, total = self.cfg.grad_accum, 0.0
        for micro in range(n):
            x, y = self.loader.next_batch()
            _, loss = self.model(x, y, ids_checked=True)  # read_meta checked every id of the data
            value = loss_value(loss) if self._host_reads else loss.data
            if self._host_reads and not math.isfinite(value) and self.dist is None:  # ranks: below
                raise TrainingDiverged(f"loss is {value} at step {self.step} (micro-batch {micro})")
            if n > 1:
                loss = loss * (1.0 / n)
            self.amp.backward(loss) if self.amp is not None else loss.backward()
            total = total + value
        self.reduce_gradients()
        if self.dist is not None:  # the loss of the global batch; NaN on one rank stops all
            total = self.dist.allreduce_mean_scalar(total)
            if not math.isfinite(total):
                raise TrainingDiverged(f"loss is {total} at step {self.step} (mean over ranks)")
        return total / n

    def _update(self) -> float:
        """Clip, check and apply the gradients -> their norm before clipping."""
        from nn.optim import clip_grad_norm, grad_norm

        clip = self.cfg.grad_clip
        if self.amp is not None:  # unscale into the masters; an overflow skips the step (norm inf)
            return self.amp.step(self.optimizer, clip)[1]
        params, host = list(self.model.parameters()), self._host_reads
        norm = clip_grad_norm(params, clip, to_host=host) if clip > 0 else grad_norm(params, to_host=host)
        if host and not math.isfinite(norm):
            raise TrainingDiverged(f"gradient norm is {norm} at step {self.step}")
        self.optimizer.step()
        self.optimizer.zero_grad()
        return norm

    def _evaluate(self, metrics) -> dict:
        t0 = time.perf_counter()
        res = {split: evaluate(self.model, batches) for split, batches in self.eval_sets.items()}
        if self.dist is not None:  # each rank evaluated its slice of the same global batches
            res = {split: self.dist.allreduce_mean_scalar(v) for split, v in res.items()}
        res["val_bpb"] = bits_per_byte(res["val"], len(self.val_tokens), self.val_bytes)
        self.last_eval, self.evaluated_at = res, self.step
        improved = res["val"] < self.best_val
        if improved:
            self.best_val, self.best_step = res["val"], self.step
        if metrics:
            metrics.write({"kind": "eval", "step": self.step, "train_loss": res["train"],
                           "val_loss": res["val"], "val_bpb": res["val_bpb"], "time": time.time()})
        bpb = f" ({res['val_bpb']:.3f} bits/byte)" if res["val_bpb"] is not None else ""
        self.say(f"step {self.step:>6}  eval: train loss {res['train']:.4f}  val loss {res['val']:.4f}{bpb}"
                 f"{'  (best)' if improved else ''}  [{time.perf_counter() - t0:.1f} s]")
        uniform = math.log(self.model_cfg.vocab_size)
        if not res["val"] <= DIVERGED_LOSS_FACTOR * uniform:
            raise TrainingDiverged(f"val loss is {res['val']:.4g} at step {self.step}, over "
                                   f"{DIVERGED_LOSS_FACTOR:g} x the loss of a uniform guess (ln V = {uniform:.2f})")
        if improved and self.step > 0:
            self.save(BEST)
        return res

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Train to max_steps (or the time budget, or Ctrl-C), evaluate, save, sample."""
        self.metrics, self._t_start = None, time.perf_counter()
        try:
            peak = self._announce()
            if self.is_main:
                self.metrics = self.folder.metrics(self.step if self.resume_ckpt else None)
            stop_reason = self._guarded_loop(peak)
            return self._finish(stop_reason)
        finally:
            if self.metrics:
                self.metrics.close()
            self.folder.close()

    def _announce(self) -> float:
        cfg, m = self.cfg, self.model_cfg
        peak = cfg.peak_flops or measure_peak_flops(cfg.device)
        self._write_run_files()
        self.say(f"run folder: {self.run_dir}")
        self.say(f"model: {self.model.num_params():,} parameters ({m.n_layer} layers x {m.n_head} heads, "
                 f"d={m.n_embd}, T={cfg.block_size}, vocab {m.vocab_size}); "
                 f"data: {len(self.train_tokens):,} train + {len(self.val_tokens):,} val tokens")
        self.tokens_per_step = cfg.batch_size * cfg.block_size * cfg.grad_accum * self.world_size  # all ranks
        self.say(f"training: {cfg.max_steps} steps of {self.tokens_per_step:,} tokens on {cfg.device}"
                 + (f" x {self.world_size} MPI ranks (batch {cfg.batch_size} each)" if self.dist else "")
                 + f"; peak {peak / 1e9:.0f} GFLOP/s "
                 f"({'given' if cfg.peak_flops else 'the best float32 matmul rate seen here'}) for MFU"
                 + (f"; resuming at step {self.step}" if self.resume_ckpt else ""))
        return peak

    def _guarded_loop(self, peak: float) -> str:
        """The loop, and what each way out of it means -> the stop reason."""
        self.last_eval, self.evaluated_at = None, None
        try:
            with StopFlag(self.say) as stop:
                return self._loop(stop, peak)
        except TrainingDiverged as exc:
            self.out.close()
            stopped = TrainingDiverged(f"{exc}: training stopped; "
                                       f"{self.folder.describe_kept(self.last_good_step, self.best_step, self.best_val)}")
            stopped.every_rank = self.dist is not None  # ranks judge the same global loss and norm
            raise stopped from None
        except KeyboardInterrupt:
            self.out.close()
            if self.dist is not None:  # ranks may be mid-collective: abort them all
                self.say(f"interrupted twice: not saving; the last checkpoint (step {self.last_good_step}) is kept")
                raise
            for p in self.model.parameters():  # mid-step: the weights are still the boundary's
                p.grad = None
            return "interrupted"

    def _loop(self, stop: StopFlag, peak: float) -> str:
        cfg = self.cfg
        ckpt_every = cfg.checkpoint_interval or cfg.eval_interval
        t_start = time.perf_counter()
        log = StepLog(self.out, self.metrics, max_steps=cfg.max_steps, log_interval=cfg.log_interval,
                      tokens_per_step=self.tokens_per_step, flops_per_step=self.flops_per_step, peak=peak,
                      ranks=self.world_size)
        while self.step < cfg.max_steps:
            if self.step % cfg.eval_interval == 0 and self.evaluated_at != self.step:
                self._evaluate(self.metrics)
                if not cfg.peak_flops and self.step > 0:
                    # On a busy machine the start-up matmul may have run slowly: the peak is
                    # the best rate seen, re-measured by a short matmul at each evaluation.
                    log.peak = max(log.peak, measure_peak_flops(cfg.device, repeats=3))
            interrupted, out_of_time = self._agree(
                stop.requested,
                cfg.time_budget is not None and time.perf_counter() - t_start >= cfg.time_budget)
            if interrupted or out_of_time:
                return "interrupted" if interrupted else "time_budget"
            lr = lr_at(self.step, cfg)
            t0, ar0 = time.perf_counter(), self.allreduce_s
            loss, norm = self._train_step(lr)
            if not self._host_reads and (self.step % cfg.log_interval == 0 or self.step % ckpt_every == 0
                                         or self.step == cfg.max_steps):
                loss, norm = self._read(loss, norm)  # before anything is logged or saved
            log.step(self.step, loss, norm, lr, time.perf_counter() - t0, self.allreduce_s - ar0)
            if self.step % ckpt_every == 0:
                self.save()
        return "max_steps"

    def _finish(self, stop_reason: str) -> RunResult:
        if self.evaluated_at != self.step and stop_reason != "interrupted":
            self._evaluate(self.metrics)
        path = self.save()
        launch = f"mpiexec -n {self.world_size} gpt train" if self.dist is not None else "gpt train"
        if stop_reason == "interrupted":
            self.say(f"interrupted: saved {path} at step {self.step}; "
                     f"continue with: {launch} --resume {self.run_dir}")
        samples = []
        if stop_reason != "interrupted" and self.is_main:
            samples = print_samples(self.model, self.tokenizer, self.meta, self.val_tokens, self.cfg, self.say)
        summary = self._summary(stop_reason, path)
        if self.is_main:
            self.folder.write_summary(summary)
        say_summary(summary, self.cfg, launch, self.say)
        return RunResult(self.run_dir, self.step, stop_reason, summary["train_loss"], summary["val_loss"],
                         summary["best_val_loss"], samples, self.model, self.optimizer)

    def _summary(self, stop_reason: str, path: Path) -> dict:
        last = self.last_eval
        steps_here = max(self.step - (self.resume_ckpt.step if self.resume_ckpt else 0), 1)
        return {
            "run_dir": str(self.run_dir), "steps": self.step, "stop_reason": stop_reason,
            "eval_step": self.evaluated_at,
            "train_loss": last["train"] if last else None, "val_loss": last["val"] if last else None,
            "val_bpb": last["val_bpb"] if last else None,
            "best_val_loss": None if math.isinf(self.best_val) else self.best_val,
            "seconds": time.perf_counter() - self._t_start, "parameters": self.model.num_params(),
            "checkpoint": str(path), "world_size": self.world_size,
            "allreduce_ms_per_step": self.allreduce_s * 1e3 / steps_here if self.dist is not None else None,
        }


def train(cfg: TrainConfig, explicit: set | None = None, out: ProgressLine | None = None,
          runs_root: str = RUNS_ROOT, dist=None) -> RunResult:
    """Run training as `cfg` says; returns the run's result (the model is in .model).
    dist: a gpt.training.dist.Distributed to train data-parallel over MPI ranks (None: one process)."""
    return Trainer(cfg, explicit, out, runs_root, dist).run()
