"""Training a ViT into a run folder, the GPT's way: the same folder, lock, checkpoint file,
metrics lines, progress line, Ctrl-C handling and exact resume (gpt.training).

The run folder (gpt.training.run_folder) holds config.json ({"kind": "vit", "model", "train",
"data", "tokens_per_step"}), metrics.jsonl (train records from gpt.training.step_log, eval records
{"kind": "eval", "step", "val_loss", "val_accuracy"}), latest.safetensors (gpt.training.checkpoint's
file, its metadata naming kind "vit") and summary.json. The image sets have no validation split
apart from the test split: it is evaluated for the curves but never chooses a checkpoint, so the
only checkpoint is the run's last step.

Exact resume: the checkpoint holds the weights, the AdamW moments, the step, the batch drawer's
(epoch, position) and the dropout generator; the learning rate is a function of the step. A
resumed run takes its settings from the checkpoint, overridden by the flags given, except those
that change the model or its data (FROZEN), which must match. As for a GPT (gpt.training.resume),
a larger --steps keeps the cosine's old end unless --lr-decay-steps moves it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
import numpy as np

import autograd
import nn
from gpt.training.checkpoint import LATEST, CheckpointError, find_checkpoint, load_checkpoint
from gpt.training.config import flag
from gpt.training.flops import measure_peak_flops
from gpt.training.progress import ProgressLine, StopFlag, deferred_interrupts
from gpt.training.resume import load_for_resume
from gpt.training.rng import get_rng_state, set_rng_state
from gpt.training.run_folder import RunFolder
from gpt.training.step_log import StepLog
from gpt.training.trainer import TrainingDiverged
from gpt.vision.data import ImageBatches, ImageSet, load_images
from gpt.vision.model import ViT, ViTConfig, report

KIND = "vit"


def _whole(value, least: int) -> bool:
    """Whether `value` is a whole number >= least: never NaN or 2.5; 8.0 too (older runs saved floats)."""
    return value >= least and (isinstance(value, int) or float(value).is_integer())  # a huge int has no float


@dataclass
class VitSettings:
    """How a ViT trains: AdamW, linear warmup then cosine to min_lr, clipped gradients."""

    data: str = "digits"
    seed: int = 0
    steps: int = 3000
    batch_size: int = 64
    lr: float = 2e-3
    min_lr: float = 2e-5
    warmup: int = 100
    lr_decay_steps: int | None = None  # where the cosine ends (None: at steps)
    weight_decay: float = 0.05
    label_smoothing: float = 0.1
    shift: bool = True                 # move training images by -1..1 pixels
    grad_clip: float = 1.0
    eval_interval: int = 400
    log_interval: int = 50
    max_minutes: float | None = None   # stop (evaluate, save) after this much training time

    def validate(self) -> None:
        """Every setting checked before the run starts, the first bad one named by its flag."""
        for name in ("steps", "batch_size", "eval_interval", "log_interval", "lr_decay_steps"):
            value = getattr(self, name)
            if value is not None and not _whole(value, 1):
                raise ValueError(f"{flag(name)} must be a whole number >= 1, got {value}")
        for name in ("seed", "warmup"):
            if not _whole(getattr(self, name), 0):
                raise ValueError(f"{flag(name)} must be a whole number >= 0, got {getattr(self, name)}")
        for name in ("lr", "grad_clip", "max_minutes"):
            value = getattr(self, name)
            if value is not None and not 0 < value < math.inf:
                raise ValueError(f"{flag(name)} must be > 0 and finite, got {value}")
        for name in ("min_lr", "weight_decay"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{flag(name)} must be >= 0 and finite, got {getattr(self, name)}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"--label-smoothing must lie in [0, 1), got {self.label_smoothing}")


# Settings a resumed run may not change: they change the data or the order it is drawn in.
FROZEN = ("data", "seed", "batch_size")


def data_fingerprint(images: ImageSet) -> str:
    """A short hash of the training images and labels (a changed package's data is caught)."""
    h = hashlib.sha256(np.ascontiguousarray(images.train_x).tobytes())
    h.update(np.ascontiguousarray(images.train_y).tobytes())
    return h.hexdigest()[:16]


def lr_at(step: int, s: VitSettings) -> float:
    total = max(s.lr_decay_steps or s.steps, s.warmup)
    return float(nn.optim.warmup_cosine(step, s.warmup, total, s.lr, s.min_lr))


def flops_per_image(cfg: ViTConfig) -> int:
    """Training FLOPs of one image (forward + backward), as gpt.model.report.flops_per_token counts:
    6 x matmul parameters per token it touches + 12 x layers x D x T x T for attention."""
    T, D, F, L = 1 + cfg.num_patches, cfg.d_model, cfg.dim_feedforward, cfg.num_layers
    patch = cfg.in_channels * cfg.patch_size ** 2 * D
    return 6 * (L * (4 * D * D + 2 * D * F) * T + patch * cfg.num_patches + D * cfg.n_classes) + 12 * L * D * T * T


def evaluate(model: ViT, x: np.ndarray, y: np.ndarray, batch_size: int = 512) -> dict:
    """{"loss": mean cross-entropy, "accuracy", "predictions" (N,) int64} of x (N, C, H, W), y (N,),
    in eval mode without a graph."""
    if not len(y):
        raise ValueError("evaluate: no images to evaluate (an empty split)")
    was = model.training
    model.eval()
    losses, preds = [], []
    try:
        with autograd.no_grad():
            for i in range(0, len(y), batch_size):
                logits, loss = model(x[i:i + batch_size], y[i:i + batch_size])
                losses.append(float(loss.item()) * len(logits.data))
                preds.append(logits.numpy().argmax(-1))
    finally:
        model.train(was)
    pred = np.concatenate(preds).astype(np.int64)
    return {"loss": sum(losses) / len(y), "accuracy": float((pred == y).mean()), "predictions": pred}


def confusion_matrix(y: np.ndarray, pred: np.ndarray, n_classes: int) -> np.ndarray:
    """(K, K) int64 counts: row = true label, column = predicted."""
    m = np.zeros((n_classes, n_classes), np.int64)
    np.add.at(m, (y, pred), 1)
    return m


def is_vit_checkpoint(path_or_run: str | Path) -> bool:
    """Whether a run folder or checkpoint file holds a ViT (read from the header, no weights)."""
    from nn.checkpoint import parse_json, read_safetensors_header

    try:
        _, metadata, _ = read_safetensors_header(find_checkpoint(path_or_run))
        return parse_json((metadata or {}).get("kind", "null")) == KIND
    except (CheckpointError, ValueError, OSError):
        return False


def load_vit(path_or_run: str | Path) -> tuple[ViT, dict]:
    """(model in eval mode, checkpoint meta) of a ViT run folder or checkpoint file."""
    ckpt = load_checkpoint(find_checkpoint(path_or_run))
    where = f"checkpoint {ckpt.meta['path']!r}"
    if ckpt.meta.get("kind") != KIND:
        raise CheckpointError(f"{where} is not a ViT run (train one with `gpt vit train`)")
    try:
        model = ViT(ViTConfig.from_dict(ckpt.meta["config"]))
        model.load_state_dict(ckpt.model_state)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{where} does not hold a ViT of its config: {exc}") from None
    return model.eval(), ckpt.meta


def _resumed(saved: dict, given: VitSettings, explicit: set, model_saved: dict, model_given: dict) -> VitSettings:
    """The checkpoint's settings overridden by the explicit ones; FROZEN and model ones must match."""
    conflicts = [f"--{k.replace('_', '-')} {getattr(given, k)!r} (the run has {saved[k]!r})"
                 for k in FROZEN if k in explicit and saved.get(k) != getattr(given, k)]
    conflicts += [f"--{k.replace('_', '-')} {v!r} (the run's model has {model_saved.get(k)!r})"
                  for k, v in model_given.items() if model_saved.get(k) != v]
    if conflicts:
        raise ValueError("cannot change on resume: " + "; ".join(conflicts))
    known = {f.name for f in dataclasses.fields(VitSettings)}
    values = {**{k: v for k, v in saved.items() if k in known}, **{k: getattr(given, k) for k in explicit}}
    if "steps" in explicit and "lr_decay_steps" not in explicit and not saved.get("lr_decay_steps"):
        values["lr_decay_steps"] = saved["steps"]  # the schedule of the steps already taken stays
    return VitSettings(**values)


class VitRun:
    """One training run of a ViT: `VitRun(...).run()` -> the summary dict."""

    def __init__(self, out: str | Path, model_cfg: ViTConfig | None, settings: VitSettings,
                 resume: str | Path | None = None, explicit: set | None = None,
                 model_explicit: dict | None = None, progress: ProgressLine | None = None):
        self.out = progress or ProgressLine()
        self.say = self.out.print
        self.ckpt = None
        self.saved_step = None  # the step of the checkpoint in the folder, once there is one
        if resume is None:
            if (Path(out) / LATEST).exists():
                raise FileExistsError(f"run folder {str(out)!r} already holds a checkpoint: continue it "
                                      f"with --resume {out}, or choose another --out")
            self.folder = RunFolder(out).open()
        else:
            path = find_checkpoint(resume, prefer=(LATEST,))
            self.folder = RunFolder(path.parent).open()  # a run still training refuses here
        try:
            if resume is not None:
                model_cfg, settings = self._read_resumed(path, settings, set(explicit or ()), model_explicit or {})
            self._setup(model_cfg, settings)
        except BaseException:  # a run that could not start leaves no lock and no empty folder
            self.folder.discard()
            raise

    def _read_resumed(self, path: Path, given: VitSettings, explicit: set, model_given: dict):
        """(model config, settings) of the run resumed from the checkpoint at `path`."""
        self.ckpt = load_for_resume(path)
        if self.ckpt.meta.get("kind") != KIND:
            raise CheckpointError(f"{path} is not a ViT run; resume it with the command that wrote it")
        settings = _resumed(self.ckpt.meta["train_args"], given, explicit, self.ckpt.meta["config"], model_given)
        return ViTConfig.from_dict(self.ckpt.meta["config"]), settings

    def _setup(self, model_cfg: ViTConfig, s: VitSettings) -> None:
        s.validate()
        self.s = s
        self.images = load_images(s.data, s.seed)
        C, H, W = self.images.image_shape
        if H != W:
            raise ValueError(f"the ViT takes square images; {s.data} has {H}x{W}")
        self.model_cfg = dataclasses.replace(model_cfg, image_size=H, in_channels=C, n_classes=self.images.n_classes)
        self.fingerprint = data_fingerprint(self.images)
        autograd.manual_seed(s.seed)
        self.model = ViT(self.model_cfg)
        self.optimizer = nn.optim.AdamW(nn.optim.weight_decay_groups(self.model, s.weight_decay), lr=s.lr)
        self.batches = ImageBatches(self.images.train_x, self.images.train_y, s.batch_size, s.seed, s.shift)
        self.step = 0
        if self.ckpt is not None:
            self._restore()

    def _restore(self) -> None:
        meta, where = self.ckpt.meta, f"checkpoint {self.ckpt.meta['path']!r}"
        if meta.get("data", {}).get("fingerprint") != self.fingerprint:
            raise CheckpointError(f"{where} was trained on other {self.s.data} images than this machine's "
                                  f"(fingerprint {meta.get('data', {}).get('fingerprint')} vs {self.fingerprint})")
        try:
            self.model.load_state_dict(self.ckpt.model_state)
            self.optimizer.load_state_dict(self.ckpt.optimizer_state)
            self.batches.load_state_dict(meta["loader"])
            set_rng_state(meta.get("rng"))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{where}: cannot resume from it: {exc}") from None
        self.step = self.saved_step = self.ckpt.step

    # ---- files ------------------------------------------------------------------------------
    def _data_info(self) -> dict:
        return {"name": self.s.data, "seed": self.s.seed, "fingerprint": self.fingerprint,
                "train": len(self.images.train_y), "test": len(self.images.test_y)}

    def save(self) -> Path:
        meta = {"kind": KIND, "step": self.step, "config": self.model_cfg.to_dict(), "train_args": asdict(self.s),
                "loader": self.batches.state_dict(), "rng": get_rng_state(), "data": self._data_info()}
        path = self.folder.save_checkpoint(LATEST, dict(self.model.state_dict()), self.optimizer.state_dict(), meta)
        self.saved_step = self.step
        return path

    def _kept(self) -> str:
        """What a run stopped by divergence leaves to go back to."""
        if self.saved_step is None:
            return "no checkpoint was saved yet"
        return f"the checkpoint of step {self.saved_step} is kept ({self.folder.path / LATEST})"

    def _write_config(self) -> None:
        self.folder.write_config({"kind": KIND, "model": self.model_cfg.to_dict(), "train": asdict(self.s),
                                  "data": self._data_info(), "tokens_per_step": self._tokens_per_step()})

    def _tokens_per_step(self) -> int:
        """Tokens through the encoder per step: the class token and the patches of each image."""
        return self.s.batch_size * (1 + self.model_cfg.num_patches)

    # ---- the loop ---------------------------------------------------------------------------
    def _evaluate(self, metrics) -> dict:
        res = evaluate(self.model, self.images.test_x, self.images.test_y)
        metrics.write({"kind": "eval", "step": self.step, "val_loss": res["loss"],
                       "val_accuracy": res["accuracy"], "time": time.time()})
        self.say(f"step {self.step:>6}  eval: test loss {res['loss']:.4f}  test accuracy {res['accuracy']:.2%}")
        return res

    def _train_step(self) -> tuple[float, float, float]:
        """One optimizer step on the next batch -> (loss, gradient norm before clipping, lr)."""
        lr = lr_at(self.step, self.s)
        self.optimizer.set_lr(lr)
        x, y = self.batches.next_batch()
        _, loss = self.model(x, y, label_smoothing=self.s.label_smoothing)
        loss.backward()
        value = float(loss.item())
        with deferred_interrupts():  # the update, the step count and the drawer's state change together
            norm = float(nn.optim.clip_grad_norm(self.model.parameters(), self.s.grad_clip))
            if not (math.isfinite(value) and math.isfinite(norm)):
                raise TrainingDiverged(f"loss {value}, gradient norm {norm} at step {self.step}; {self._kept()}: "
                                       "try a lower --lr")
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.step += 1
        return value, norm, lr

    def run(self) -> dict:
        s, t0, cpu0 = self.s, time.perf_counter(), time.process_time()
        metrics = None
        try:
            self._write_config()  # first: a folder holding a run's files but no config.json is refused
            metrics = self.folder.metrics(self.step if self.ckpt else None)
            self.say(f"run folder: {self.folder.path}\n{self.images.describe()}\n{report(self.model)}"
                     + (f"\nresuming at step {self.step}" if self.ckpt else ""))
            log = StepLog(self.out, metrics, max_steps=s.steps, log_interval=s.log_interval,
                          tokens_per_step=self._tokens_per_step(),
                          flops_per_step=flops_per_image(self.model_cfg) * s.batch_size,
                          peak=measure_peak_flops("cpu", n=512))
            reason = self._loop(log, metrics, t0)
            self.out.close()
            res = self._evaluate(metrics)
            path = self.save()
            summary = {"run_dir": str(self.folder.path), "steps": self.step, "stop_reason": reason,
                       "train_seconds": round(time.perf_counter() - t0, 1),
                       "cpu_seconds": round(time.process_time() - cpu0, 1),  # wall time on a shared machine is not its own
                       "parameters": self.model.num_params(),
                       "test_loss": res["loss"], "test_accuracy": res["accuracy"], "checkpoint": str(path),
                       "data": self._data_info()}
            self.folder.write_summary(summary)  # under the lock, as every other file
        finally:
            if metrics is not None:
                metrics.close()
            self.folder.close()
        return summary

    def _loop(self, log: StepLog, metrics, t0: float) -> str:
        self.model.train()
        with StopFlag(self.say) as stop:
            while self.step < self.s.steps:
                if self.step % self.s.eval_interval == 0 and self.step:
                    self._evaluate(metrics)
                    self.save()
                if stop.requested:
                    return "interrupted"
                if self.s.max_minutes is not None and time.perf_counter() - t0 > 60 * self.s.max_minutes:
                    return "time_budget"
                t = time.perf_counter()
                loss, norm, lr = self._train_step()
                log.step(self.step, loss, norm, lr, time.perf_counter() - t)
        return "max_steps"


def train_vit(out: str | Path, model_cfg: ViTConfig | None = None, settings: VitSettings | None = None,
              **kw) -> dict:
    """Train a ViT into the run folder `out` (or resume=RUN, with the flags given in explicit=...)
    -> the summary dict; progress=ProgressLine(enabled=False) trains silently."""
    return VitRun(out, model_cfg or ViTConfig(), settings or VitSettings(), **kw).run()
