"""Run checkpoints: model weights, optimizer state and everything a resume needs, in one file.

The file is our safetensors layout (nn.checkpoint): tensors
    model/<parameter name>          the model's state_dict (GPT-2 names)
    optim.state.<index>.<name>      the optimizer's moment arrays (nn.checkpoint's layout)
and string metadata, each value a JSON document:
    format        "fromscratch-gpt/checkpoint/v1"
    step          optimizer steps taken
    config        the GPTConfig as a dict
    optimizer     the optimizer's numbers and parameter groups
    train_args    the training settings, rng (the dropout generator), loader (the data
                  generator), best_val_loss, tokenizer (the tokenizer file's text) ...
so a checkpoint alone is enough to sample from or to resume, and nothing is unpickled.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "fromscratch-gpt/checkpoint/v1"
LATEST, BEST = "latest.safetensors", "best.safetensors"
CHECKPOINT_NAMES = (BEST, LATEST)  # the order `gpt sample` and `gpt eval` prefer


class CheckpointError(ValueError):
    """A checkpoint file that is missing, corrupt, or not one of ours."""


@dataclass
class Checkpoint:
    model_state: dict[str, np.ndarray]
    optimizer_state: Any
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def step(self) -> int:
        return int(self.meta.get("step", 0))


# ---- save / load ------------------------------------------------------------------------------
def save_checkpoint(path: str | os.PathLike, model_state: dict[str, Any], optimizer_state: Any,
                    meta: dict[str, Any]) -> None:
    """Write one checkpoint atomically. `meta` values must be JSON-able (step, config, ...)."""
    from nn.checkpoint import flatten_optimizer_state, save_safetensors

    tensors: dict[str, Any] = {f"model/{name}": arr for name, arr in model_state.items()}
    metadata = {"format": FORMAT}
    if optimizer_state is not None:
        optim_tensors, metadata["optimizer"] = flatten_optimizer_state(optimizer_state, prefix="optim")
        tensors.update(optim_tensors)
    for k, v in meta.items():
        metadata[k] = json.dumps(v)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_safetensors(str(path), tensors, metadata)


def find_checkpoint(path_or_run_dir: str | os.PathLike, prefer: tuple[str, ...] = CHECKPOINT_NAMES) -> Path:
    """A checkpoint file itself, or in a run folder the first of `prefer` that exists."""
    p = Path(path_or_run_dir)
    if p.is_dir():
        for name in prefer:
            if (p / name).is_file():
                return p / name
        raise CheckpointError(f"run folder {str(p)!r} holds no checkpoint ({', '.join(prefer)})")
    if not p.exists():
        raise CheckpointError(f"checkpoint {str(p)!r} does not exist")
    return p


def load_checkpoint(path: str | os.PathLike, device: str = "cpu") -> Checkpoint:
    """Read a checkpoint written by `save_checkpoint`; arrays land on `device`.

    Raises CheckpointError naming the file for a truncated, corrupt or foreign file."""
    from nn.checkpoint import load_safetensors, parse_json

    path = find_checkpoint(path)
    try:
        tensors, metadata = load_safetensors(str(path), device=device)
    except CheckpointError:
        raise
    except (ValueError, OSError, KeyError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        raise CheckpointError(f"cannot read checkpoint {str(path)!r}: {exc}") from None
    metadata = metadata or {}
    if metadata.get("format") != FORMAT:
        raise CheckpointError(
            f"{str(path)!r} is a safetensors file but not a gpt run checkpoint "
            f"(metadata format {metadata.get('format')!r}, expected {FORMAT!r})")
    from nn.checkpoint import unflatten_optimizer_state

    meta: dict[str, Any] = {}
    try:
        for k, v in metadata.items():
            if k not in ("format", "optimizer"):
                meta[k] = parse_json(v)
                _check_entry(k, meta[k])
        optimizer_state = None
        if "optimizer" in metadata:
            optimizer_state = unflatten_optimizer_state(tensors, metadata["optimizer"], prefix="optim")
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} has corrupt metadata: {exc}") from None
    model_state = {k[6:]: v for k, v in tensors.items() if k.startswith("model/")}
    if not model_state:
        raise CheckpointError(f"checkpoint {str(path)!r} holds no model weights")
    for name, arr in tensors.items():
        _check_tensor(path, name, arr)
    meta["path"] = str(path)
    return Checkpoint(model_state, optimizer_state, meta)


def _check_tensor(path: Path, name: str, arr: Any) -> None:
    """Weights and moments must be finite floats: integers are float bits under a lying header
    (Module.load_state_dict casts them silently), and NaN or inf weights cannot train or score."""
    if not name.startswith(("model/", "optim.")):
        return
    where = f"checkpoint {str(path)!r}: tensor {name!r}"
    if arr.dtype.kind != "f":
        raise CheckpointError(f"{where} has dtype {arr.dtype}, expected a float (the file's header "
                              f"declares a wrong dtype, or the file is not a run's)")
    from autograd.backend import xp_of

    finite = xp_of(arr).isfinite(arr)
    if not finite.all():
        raise CheckpointError(f"{where} holds {int(finite.size - finite.sum()):,} NaN or infinite value(s) "
                              f"of {arr.size:,}: the run had diverged or the file is damaged")


# The JSON type each metadata entry must have (None allowed where a run may have none).
_ENTRY_TYPES: dict[str, tuple] = {
    "step": (int,), "config": (dict,), "train_args": (dict,), "loader": (dict,), "rng": (dict, type(None)),
    "data_dir": (str, type(None)), "best_val_loss": (int, float, type(None)), "tokenizer": (str, type(None)),
    "vocab_size": (int,), "world_size": (int,), "loss_scale": (dict, type(None)),
}


def _check_entry(key: str, value: Any) -> None:
    types = _ENTRY_TYPES.get(key)
    if types is None:
        return
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = " or ".join("null" if t is type(None) else {dict: "an object"}.get(t, t.__name__) for t in types)
        raise ValueError(f"entry {key!r} should be {names}, got {type(value).__name__}")
    if key in ("step", "vocab_size", "world_size") and value < (0 if key == "step" else 1):
        raise ValueError(f"entry {key!r} is out of range: {value}")


def tokenizer_from_meta(meta: dict[str, Any]):
    """The tokenizer stored in a checkpoint's metadata (or None when the run had none)."""
    text = meta.get("tokenizer")
    if not text:
        return None
    import tempfile

    from gpt.data import load_tokenizer

    # Tokenizer classes load from files; a private temp file keeps one loading path.
    fd, tmp = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return load_tokenizer(tmp)
    except (ValueError, KeyError, TypeError) as exc:  # named for the checkpoint, not the temp file
        raise CheckpointError(f"checkpoint {meta.get('path')!r} holds an invalid tokenizer: "
                              f"{str(exc).replace(tmp, 'the tokenizer')}") from None
    finally:
        os.unlink(tmp)


def _load_best_available(path_or_run_dir: str | os.PathLike) -> Checkpoint:
    """A run folder's best checkpoint, or its latest when best is damaged (with a warning);
    a checkpoint file as given."""
    p = Path(path_or_run_dir)
    if not p.is_dir():
        return load_checkpoint(p)
    names = [n for n in CHECKPOINT_NAMES if (p / n).is_file()]
    for i, name in enumerate(names):
        try:
            return load_checkpoint(p / name)
        except CheckpointError as exc:
            if i + 1 == len(names):
                raise
            print(f"warning: {exc}; using {p / names[i + 1]} instead", file=sys.stderr)
    return load_checkpoint(p)  # holds none: the error names the folder


def load_model(path_or_run_dir: str | os.PathLike, device: str = "cpu"):
    """(model in eval mode, tokenizer or None, meta) from a checkpoint file or a run folder
    (its best.safetensors, else latest.safetensors)."""
    from gpt.model.config import GPTConfig
    from gpt.model.gpt import GPT

    ckpt = _load_best_available(path_or_run_dir)
    where = f"checkpoint {ckpt.meta['path']!r}"
    if "config" not in ckpt.meta:
        raise CheckpointError(f"{where} has no model config")
    try:
        cfg = GPTConfig.from_dict(ckpt.meta["config"])
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    held = sum(int(np.prod(v.shape)) for v in ckpt.model_state.values())
    if held != cfg.count_params():  # before allocating a model the file cannot fill
        raise CheckpointError(f"{where} holds {held:,} weights but its config describes a model of "
                              f"{cfg.count_params():,}: the file is corrupt or not this model's")
    model = GPT(cfg)
    try:
        model.load_state_dict(ckpt.model_state)
    except (KeyError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {ckpt.meta['path']!r} does not fit its config: {exc}") from None
    if device != "cpu":
        model.to(device)
    model.eval()
    return model, tokenizer_from_meta(ckpt.meta), ckpt.meta
