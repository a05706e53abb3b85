"""Every setting of a training run: one dataclass, its command-line flags and config files.

Each field is a flag (`max_steps` -> `--max-steps`); a config file (TOML on Python 3.11+,
or JSON) holds any of them under the same names, flat or inside tables (`[model]`,
`[optim]`, ... are only for the reader); unknown keys are an error that names them. The
order of precedence is defaults < resumed run's settings < config file < flags given.
Nothing is executed: config files are data.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpt.data.corpus import DEFAULT_MAX_CHARS
from gpt.inference.sample import from_options, options as sampling_settings
from gpt.model.config import GPTConfig, did_you_mean, settings as model_settings
from nn.amp import PRECISIONS

# The model's settings are GPTConfig's own fields (names, types, help, choices and checks, read
# from gpt.model.config); training only picks defaults small enough for a laptop CPU (chosen with
# the optimisation defaults by a sweep at a fixed budget: docs/benchmarks.md). The closing
# samples' settings are SamplingConfig's fields, with the defaults `gpt sample` has.
# LLaMA's block (rotary positions, RMSNorm, SwiGLU, no biases): at the same steps it ends 5%
# lower in bits per byte than GPT-2's and exports as LlamaForCausalLM.
MODEL_DEFAULTS = {"vocab_size": 6144, "block_size": 128, "n_layer": 4, "n_head": 4, "n_embd": 128,
                  "pos": "rope", "norm": "rmsnorm", "mlp": "swiglu", "bias": False}
MODEL_HELP = {"vocab_size": "vocabulary size of a trained tokenizer (a --data folder sets its own)"}
MODEL_KEYS = tuple(s.name for s in model_settings())
# Settings a resumed run may not change: they would change the model or the data it reads.
FROZEN_ON_RESUME = MODEL_KEYS + ("batch_size", "seed", "char")
GROUP_TITLES = {"data": "data", "model": "model", "optim": "optimisation", "run": "run",
                "sampling": "sampling of the closing samples"}


def _f(default, help: str, type=None, group: str = "training", choices=None, nargs=None):
    meta = {"help": help, "type": type, "group": group, "choices": choices, "nargs": nargs}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class _RunSettings:
    """The settings about data, optimisation and the run; TrainConfig adds the model's."""

    # data
    input: list = _f([], "text files, folders or globs to train on (default: the Python "
                     "standard library's own sources)", str, "data", nargs="+")
    data: str | None = _f(None, "a nanoGPT data folder (train.bin, val.bin, meta.json) to train on", str, "data")
    tokenizer: str | None = _f(None, "tokenizer file for --input (default: train one)", str, "data")
    char: bool = _f(False, "character-level ids instead of BPE (nanoGPT's shakespeare_char)", bool, "data")
    max_chars: int | None = _f(None, "read at most this many characters of input (default: all of "
                               f"--input; {DEFAULT_MAX_CHARS:,} of the default corpus)", int, "data")
    val_fraction: float = _f(0.1, "fraction of documents held out for validation", float, "data")
    workers: int | None = _f(None, "tokenizer worker processes (default: all cores, at most 8)", int, "data")

    # optimisation
    batch_size: int = _f(16, "sequences per micro-batch B", int, "optim")
    grad_accum: int = _f(1, "micro-batches per optimizer step", int, "optim")
    max_steps: int = _f(800, "optimizer steps to train for", int, "optim")
    lr: float = _f(4e-3, "peak learning rate", float, "optim")
    min_lr: float | None = _f(None, "final learning rate of the cosine decay (default: --lr / 4)", float, "optim")
    warmup_steps: int = _f(50, "linear warmup steps", int, "optim")
    lr_decay_steps: int | None = _f(None, "step where the cosine reaches min_lr (default: max_steps)", int, "optim")
    weight_decay: float = _f(0.1, "AdamW weight decay of 2-D weights (biases, norms: none)", float, "optim")
    beta1: float = _f(0.9, "AdamW beta1", float, "optim")
    beta2: float = _f(0.99, "AdamW beta2", float, "optim")
    eps: float = _f(1e-8, "AdamW epsilon", float, "optim")
    grad_clip: float = _f(1.0, "clip the global gradient norm to this (0: off)", float, "optim")
    # the run
    out: str | None = _f(None, "run folder (default: runs/<date-time>)", str, "run")
    resume: str | None = _f(None, "continue a run: its folder or a checkpoint file", str, "run")
    init_from: str | None = _f(None, "fine-tune: start from the weights of a run folder, checkpoint or Hugging "
                               "Face model folder (fresh optimizer, step 0; the model's shape is its own, "
                               "--dropout and a shorter --block-size apply)", str, "run")
    device: str = _f("cpu", "cpu, cuda or cuda:N", str, "run")
    precision: str = _f("fp32", "fp32; tf32 (TF32 matmuls) or fp16 (float16 compute, float32 master weights, "
                        "dynamic loss scaling) need --device cuda", str, "run", PRECISIONS)
    seed: int = _f(1337, "seed of the initial weights, dropout and batches", int, "run")
    eval_interval: int = _f(200, "evaluate train and val loss every N steps", int, "run")
    eval_batches: int = _f(8, "fixed batches per evaluation", int, "run")
    checkpoint_interval: int | None = _f(None, "save latest.safetensors every N steps (default: eval_interval)", int, "run")
    log_interval: int = _f(10, "write a metrics line every N steps", int, "run")
    time_budget: float | None = _f(None, "stop (and save) after this many seconds of training", float, "run")
    peak_flops: float | None = _f(None, "peak FLOP/s for MFU (default: measured by a matmul at start)", float, "run")
    samples: int = _f(2, "samples printed at the end", int, "run")
    sample_tokens: int = _f(200, "tokens per sample", int, "run")
    prompt: str | None = _f(None, "prompt of the samples (default: a new document)", str, "run")


def _model_field(s) -> tuple[str, type, Any]:
    default = MODEL_DEFAULTS.get(s.name, s.default)
    return s.name, Any, _f(default, MODEL_HELP.get(s.name, s.help), s.type, "model", s.choices)


def _sampling_field(s) -> tuple[str, type, Any]:
    return s.name, Any, _f(s.default, s.help, s.type, "sampling")


class _Methods:
    # ---- derived and checked ------------------------------------------------------------
    def model_dict(self, vocab_size: int) -> dict:
        d = {k: getattr(self, k) for k in MODEL_KEYS}
        d["vocab_size"] = int(vocab_size)
        return d

    def final_lr(self) -> float:
        """Where the cosine ends: --min-lr, or a quarter of --lr."""
        return self.lr / 4 if self.min_lr is None else self.min_lr

    def validate(self) -> None:
        """Every setting checked before anything is read or written; one error lists them all."""
        errors = []
        for name in ("batch_size", "grad_accum", "eval_interval", "eval_batches", "log_interval",
                     "checkpoint_interval", "lr_decay_steps", "workers"):
            value = getattr(self, name, None)
            if value is not None and value < 1:
                errors.append(f"{flag(name)} must be >= 1, got {value}")
        for name in ("max_steps", "warmup_steps", "samples", "sample_tokens", "grad_clip", "weight_decay",
                     "min_lr", "max_chars"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < math.inf:
                errors.append(f"{flag(name)} must be >= 0 and finite, got {value}")
        for name in ("lr", "time_budget", "peak_flops", "eps"):
            value = getattr(self, name)
            if value is not None and not 0 < value < math.inf:
                errors.append(f"{flag(name)} must be > 0 and finite, got {value}")
        if self.min_lr is not None and self.min_lr > self.lr:
            errors.append(f"--min-lr {self.min_lr} exceeds --lr {self.lr}: the cosine decays from --lr to it")
        if not 0.0 < self.val_fraction < 1.0:
            errors.append(f"--val-fraction must be in (0, 1), got {self.val_fraction}")
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                errors.append(f"{flag(name)} must be in [0, 1), got {getattr(self, name)}")
        if self.init_from and self.resume:
            errors.append("give either --init-from (a fresh fine-tune) or --resume (continue a run), not both")
        if self.data and self.input:
            errors.append("give either --data (a prepared folder) or --input (text), not both")
        if self.char and self.tokenizer:
            errors.append("give either --char (character ids) or --tokenizer (a file's BPE), not both")
        elif self.data and (self.char or self.tokenizer):
            errors.append(f"{'--char' if self.char else '--tokenizer'} is how --input text is prepared; a --data "
                          "folder has its tokenizer already")
        if self.precision != "fp32" and self.device == "cpu":
            errors.append(f"--precision {self.precision} needs --device cuda (the CPU path computes in float32)")
        for name, f in _fields().items():
            choices = f.metadata["choices"]
            if choices and f.metadata["group"] != "model" and getattr(self, name) not in choices:
                errors.append(f"{flag(name)} must be one of {', '.join(choices)}, got {getattr(self, name)!r}")
        try:  # the model's own checks, with the model's own messages
            GPTConfig(**self.model_dict(self.vocab_size))
        except ValueError as exc:
            errors.append(str(exc).removeprefix("invalid GPTConfig: "))
        try:  # and the sampler's
            self.sampling()
        except ValueError as exc:
            errors.append(str(exc))
        if errors:
            raise ValueError("; ".join(errors))

    def sampling(self):
        """The SamplingConfig of the closing samples."""
        return from_options({s.name: getattr(self, s.name) for s in sampling_settings()})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


TrainConfig = dataclasses.make_dataclass(
    "TrainConfig", [_model_field(s) for s in model_settings()] + [_sampling_field(s) for s in sampling_settings()],
    bases=(_Methods, _RunSettings))
TrainConfig.__doc__ = ("Every setting of a training run: the data, the model (GPTConfig's fields), the optimiser, "
                       "the run, its closing samples (SamplingConfig's fields).")
TrainConfig.__module__ = __name__


def flag(name: str) -> str:
    """The command-line flag of a settings field: top_k -> --top-k."""
    return "--" + name.replace("_", "-")


def _fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(TrainConfig)}


def _coerce(name: str, value: Any, source: str) -> Any:
    f = _fields()[name]
    typ = f.metadata["type"]
    if value is None:
        return None
    try:
        if f.metadata["nargs"]:
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list):
                raise TypeError
            return [typ(v) for v in value]
        if typ is bool:
            if not isinstance(value, bool):
                raise TypeError
            return value
        if typ is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        if typ in (int, float) and isinstance(value, bool):
            raise TypeError
        if typ is int and not isinstance(value, int):
            raise TypeError
        if typ is float and not isinstance(value, (int, float)):
            raise TypeError
        if typ is str and not isinstance(value, str):
            raise TypeError
        return typ(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source}: {name} = {value!r} should be "
                         f"{'a list of ' if f.metadata['nargs'] else ''}{typ.__name__}") from None


def check_keys(d: dict, source: str) -> dict:
    """`d` with '-' in keys turned to '_'; unknown keys raise an error naming each one."""
    known = _fields()
    out, unknown = {}, []
    for k, v in d.items():
        key = str(k).replace("-", "_")
        if key in known:
            out[key] = _coerce(key, v, source)
        else:
            unknown.append(f"{k!r}{did_you_mean(key, known)}")
    if unknown:
        raise ValueError(f"{source}: unknown setting{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(unknown)}")
    return out


def load_config_file(path: str) -> dict:
    """Settings from a TOML (Python 3.11+) or JSON file; tables are flattened one level."""
    from gpt.files import read_text_file

    p = Path(path)
    text = read_text_file(p, "config file")
    if p.suffix.lower() == ".json":
        try:
            d = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"config file {path}: invalid JSON: {exc}") from None
    else:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # the same parser, as a package (a dependency on 3.10 only)
            import tomli as tomllib

        try:
            d = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"config file {path}: invalid TOML: {exc}") from None
    if not isinstance(d, dict):
        raise ValueError(f"config file {path}: expected a table of settings")
    flat: dict = {}
    for k, v in d.items():
        if isinstance(v, dict):  # [model], [optim], ... group settings for the reader only
            for k2, v2 in v.items():
                flat[k2] = v2
        else:
            flat[k] = v
    return check_keys(flat, f"config file {path}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; defaults are left out of the namespace (argparse.SUPPRESS) so that
    only the flags actually given override the config file and a resumed run."""
    parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                        help="TOML (Python 3.11+) or JSON file of settings (same names as the flags)")
    groups = {g: parser.add_argument_group(title) for g, title in GROUP_TITLES.items()}
    for name, f in _fields().items():
        g = f.metadata["group"]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if f.metadata["type"] is bool and default is not None:
            default = "on" if default else "off"
        help_ = f.metadata["help"] + (f" (default: {default})" if default not in (None, [], False) else "")
        kw: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": help_}
        if f.metadata["type"] is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = f.metadata["type"]
            kw["metavar"] = name.upper() if not f.metadata["choices"] else None
            if f.metadata["choices"]:
                kw["choices"] = f.metadata["choices"]
            if f.metadata["nargs"]:
                kw["nargs"] = f.metadata["nargs"]
        groups[g].add_argument(flag(name), **{k: v for k, v in kw.items() if v is not None})


def resolve(namespace: argparse.Namespace | dict, base: dict | None = None) -> tuple[TrainConfig, set]:
    """(TrainConfig, names set explicitly) from defaults < `base` < config file < flags."""
    given = dict(vars(namespace)) if isinstance(namespace, argparse.Namespace) else dict(namespace)
    config_file = given.pop("config", None)
    given = {k: v for k, v in given.items() if k in _fields()}
    values: dict = {}
    if base:
        values.update(check_keys(base, "resumed run settings"))
    explicit: set = set()
    if config_file:
        from_file = load_config_file(config_file)
        values.update(from_file)
        explicit |= set(from_file)
    values.update(given)
    explicit |= set(given)
    cfg = TrainConfig(**values)
    cfg.validate()
    return cfg, explicit
