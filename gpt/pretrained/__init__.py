"""Real models in and out: Hugging Face model folders (GPT-2, LLaMA, Qwen2, Mistral, Phi-3) and GGUF.

    from_pretrained(path)            a GPT from a local Hugging Face folder (also GPT.from_pretrained)
    save_pretrained(model, dir)      a folder transformers loads (also model.save_pretrained)
    load_tokenizer(path)             the folder's tokenizer.json (or vocab.json + merges.txt), or None
    save_gguf(model, file)           a GGUF v3 file for llama.cpp (gpt.pretrained.gguf)
    load_init(path)                  (GPTConfig, state_dict) of a run folder, checkpoint or HF folder

Each family is one record in gpt.pretrained.families; the modules here only read those records.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpt.pretrained.folder import load_tokenizer
from gpt.pretrained.families import UnsupportedModel

__all__ = ["from_pretrained", "save_pretrained", "load_tokenizer", "save_gguf", "load_init", "is_hf_folder",
           "UnsupportedModel"]


def is_hf_folder(path: str | os.PathLike) -> bool:
    """Whether `path` is a Hugging Face model folder (it holds config.json and no run checkpoint)."""
    from gpt.training.checkpoint import CHECKPOINT_NAMES

    from gpt.pretrained.output import restore

    p = Path(path)
    if not p.exists():
        restore(p)  # a folder a killed export had renamed aside
    return p.is_dir() and (p / "config.json").is_file() and not any((p / n).is_file() for n in CHECKPOINT_NAMES)


def build(cfg, state: dict, device: str = "cpu", where: str = "the weights"):
    """A GPT of `cfg` holding `state` (every weight), in eval mode, built without random draws;
    UnsupportedModel (naming `where`) when a weight's shape is not the model's."""
    import nn
    from gpt.model.gpt import GPT

    with nn.init.skip_init():
        model = GPT(cfg)
    try:
        model.load_state_dict(state)
    except (KeyError, ValueError) as exc:
        problems = str(exc).replace(":\n  ", ": ").replace("\n  ", "; ")  # one line
        raise UnsupportedModel(f"{where}: the weights do not fit config.json: {problems}") from None
    if device != "cpu":
        model.to(device)
    return model.eval()


def from_pretrained(path: str | os.PathLike, block_size: int | None = None, device: str = "cpu",
                    dropout: float = 0.0):
    """A GPT (eval mode) from a local Hugging Face model folder; see gpt.pretrained.folder.
    block_size: a shorter context than the checkpoint's; dropout: for fine-tuning."""
    from gpt.pretrained.folder import load

    cfg, state = load(path, block_size)
    if dropout:
        cfg = cfg.replace(dropout=dropout)
    return build(cfg, state, device, str(path))


def save_pretrained(model, path: str | os.PathLike, tokenizer: Any = None, bf16: bool = False,
                    family: str | None = None) -> Path:
    """Write `model` (and `tokenizer`) as a Hugging Face folder of the first family that computes
    the same (GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM), or of the one named
    ("mistral", "phi3", ...); one that cannot raises UnsupportedModel."""
    from gpt.pretrained.folder import save

    return save(path, model.config, model.state_dict(), tokenizer=tokenizer, bf16=bf16, family=family)


def save_gguf(model, path: str | os.PathLike, tokenizer: Any = None, dtype: str = "f32",
              family: str | None = None) -> Path:
    """Write `model` (and `tokenizer`) as a GGUF v3 file (gpt.pretrained.gguf); family as for
    save_pretrained."""
    from gpt.pretrained.gguf import save

    return save(path, model.config, model.state_dict(), tokenizer=tokenizer, dtype=dtype, family=family)


def load_init(path: str | os.PathLike, block_size: int | None = None):
    """(GPTConfig, state_dict, tokenizer or None) to start a fine-tune from: a Hugging Face model
    folder, or a run folder / checkpoint file of ours."""
    if is_hf_folder(path):
        from gpt.pretrained.folder import load

        cfg, state = load(path, block_size)
        return cfg, state, load_tokenizer(path, cfg.vocab_size)
    from gpt.training.checkpoint import load_model

    model, tokenizer, _ = load_model(path)
    return model.config, model.state_dict(), tokenizer
