"""What a resumed run takes from its checkpoint, and what it may change.

The settings are the checkpoint's, overridden by what was given now, except those that would
change the model or the data (FROZEN_ON_RESUME), which must match, and --data / --out, which
a resumed run cannot honour (its data folder and run folder are the checkpoint's).

The learning-rate schedule: without --lr-decay-steps, the cosine of a run ends at its
max_steps. Resuming with a larger --max-steps keeps the old run's end (the rate then stays at
min_lr) instead of stretching the cosine, which would send the rate back up mid-run; asking for
--lr-decay-steps stretches it on purpose. Either way the run says which.

The data: a checkpoint keeps its data folder's fingerprint (gpt.data.fingerprint); resuming on
a folder whose tokenizer or token files changed since is refused, naming what changed (a
checkpoint older than fingerprints resumes with a warning).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from gpt.data.fingerprint import changes
from gpt.training.checkpoint import BEST, LATEST, CheckpointError, load_checkpoint
from gpt.training.config import FROZEN_ON_RESUME, MODEL_KEYS, TrainConfig, check_keys, flag
from gpt.training.rng import set_rng_state

# What a malformed metadata entry raises from the code that reads it (NumPy's range checks: OverflowError).
_MALFORMED = (KeyError, TypeError, ValueError, OverflowError, AttributeError)


def resumed_settings(saved: dict, cfg: TrainConfig, explicit: set, say: Callable[[str], None],
                     meta: dict | None = None) -> TrainConfig:
    """The settings of the resumed run: `saved` (the checkpoint's) < what `explicit` names in `cfg`.
    meta: the checkpoint's metadata, which names its file and holds the model's own config."""
    where = f"checkpoint {meta['path']!r}" if meta and "path" in meta else "the checkpoint"
    if meta is not None:
        _require(meta, "train_args", where, "the run's settings")
    try:  # the types a config file must have: a tampered entry is named, not a TypeError later
        saved = check_keys({k: v for k, v in saved.items() if k in TrainConfig.__dataclass_fields__},
                           f"{where}: entry 'train_args'")
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    conflicts = _frozen_conflicts(saved, cfg, explicit, (meta or {}).get("config"))
    conflicts += [f"{flag(k)} {getattr(cfg, k)!r} (a resumed run keeps its own {k} folder)"
                  for k in ("data", "out") if k in explicit and getattr(cfg, k)]
    if conflicts:
        raise ValueError("cannot change on resume: " + "; ".join(conflicts))
    values = {**saved, **{k: getattr(cfg, k) for k in explicit}}
    values["resume"], values["out"] = cfg.resume, None
    # keep the old run's cosine end; a run of 0 steps had none, so its schedule is a fresh run's
    if "max_steps" in explicit and "lr_decay_steps" not in explicit and not saved.get("lr_decay_steps") \
            and (saved.get("max_steps") or 0) >= 1 and values["max_steps"] != saved["max_steps"]:
        values["lr_decay_steps"] = saved["max_steps"]
        say(f"schedule: the cosine still ends at step {saved['max_steps']} (the run's old --max-steps) and "
            f"the rate stays at --min-lr after it; to stretch it to the new end instead, give "
            f"--lr-decay-steps {values['max_steps']}")
    out = TrainConfig(**{k: v for k, v in values.items() if k in TrainConfig.__dataclass_fields__})
    out.validate()
    return out


def _frozen_conflicts(saved: dict, cfg: TrainConfig, explicit: set, model: dict | None) -> list[str]:
    """The FROZEN_ON_RESUME settings `cfg` changes, each with the run's value. For a model setting
    that is the model's own (a --data run's vocab_size is its folder's, not the unused setting);
    giving either the model's value or the saved setting changes nothing."""
    model = model if isinstance(model, dict) else {}
    out = []
    for k in FROZEN_ON_RESUME:
        mine = getattr(cfg, k)
        if k not in explicit or k not in saved or mine == saved[k]:
            continue
        if k in MODEL_KEYS and k in model:
            if mine != model[k]:
                out.append(f"{flag(k)} {mine!r} (the run has {model[k]!r})")
        else:
            out.append(f"{flag(k)} {mine!r} (the run has {saved[k]!r})")
    return out


def load_for_resume(path: Path):
    """The checkpoint at `path`; a damaged one names the other checkpoint of the run, if intact."""
    try:
        return load_checkpoint(path, device="cpu")
    except CheckpointError as exc:
        other = path.parent / (BEST if path.name == LATEST else LATEST)
        if path.name in (LATEST, BEST) and other.is_file():
            try:
                step = load_checkpoint(other, device="cpu").step
            except CheckpointError:
                raise exc from None
            raise CheckpointError(f"{exc}; {other} (step {step}) is intact: resume from it with "
                                  f"--resume {other}") from None
        raise


def check_data(ckpt, data: dict, say: Callable[[str], None]) -> None:
    """Refuse to resume `ckpt` on data whose fingerprint `data` differs from the one it kept."""
    from gpt.training.build import saved_data_dir

    where, data_dir = f"checkpoint {ckpt.meta['path']!r}", saved_data_dir(ckpt.meta)
    saved = ckpt.meta.get("data_fingerprint")
    if not isinstance(saved, dict):
        say(f"warning: {where} predates data fingerprints: nothing checks that {data_dir} still holds "
            "the data it was trained on")
        return
    found = changes(saved, data)
    if found:
        raise CheckpointError(f"data folder {data_dir!r} changed since {where} was written: "
                              f"{'; '.join(found)}. Resuming would go on with other data; to train "
                              f"the model on the new data, start a new run with --init-from {ckpt.meta['path']}")


def restore(ckpt, model, amp, optimizer, loader, data: dict | None = None,
            say: Callable[[str], None] = print) -> None:
    """Put a run's state back from its checkpoint: weights (and fp16 masters with their loss
    scale), optimizer moments, the data generator and the dropout generator, after checking
    that the data is the one it trained on (`data`: the folder's fingerprint now)."""
    if data is not None:
        check_data(ckpt, data, say)
    where = f"checkpoint {ckpt.meta['path']!r}"
    try:
        model.load_state_dict(ckpt.model_state)
        if amp is not None:
            amp.load_state_dict(ckpt.model_state)
    except (KeyError, ValueError) as exc:
        raise CheckpointError(f"{where} does not fit the model: {exc}") from None
    if ckpt.optimizer_state is None:
        raise CheckpointError(f"{where} holds no optimizer state to resume from")
    loader_state = _require(ckpt.meta, "loader", where, "the position in the training data")
    _restore_part(where, "its optimizer state", optimizer.load_state_dict, ckpt.optimizer_state)
    _restore_part(where, "its 'loader' entry", loader.load_state_dict, loader_state)
    _restore_part(where, "its 'rng' entry", set_rng_state, ckpt.meta.get("rng"))
    if amp is not None and ckpt.meta.get("loss_scale") is not None:
        _restore_part(where, "its 'loss_scale' entry", amp.scaler.load_state_dict, ckpt.meta["loss_scale"])


def _require(meta: dict, key: str, where: str, what: str):
    """meta[key], which a resumed run cannot do without (`what` it holds)."""
    if key not in meta:
        raise CheckpointError(f"{where}: cannot resume from it: its metadata has no {key!r} entry ({what})")
    return meta[key]


def _restore_part(where: str, part: str, load: Callable, state) -> None:
    """load(state) (arrays go onto each parameter's device); a malformed `part` is a CheckpointError naming it."""
    try:
        load(state)
    except _MALFORMED as exc:
        raise CheckpointError(f"{where}: cannot resume from {part}: {exc}") from None
