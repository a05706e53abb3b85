"""A local Hugging Face model folder, read and written without PyTorch or transformers.

    config.json                      the architecture and its shape (gpt.pretrained.hf_config)
    model.safetensors                the weights, or shards listed by
    model.safetensors.index.json     {"weight_map": {tensor name: shard file}}
    tokenizer.json                   byte-level BPE (bpe.files.huggingface), or GPT-2's vocab.json + merges.txt
    tokenizer_config.json            what AutoTokenizer needs besides tokenizer.json

A folder with only `pytorch_model.bin` (a pickle, which we never load) is refused with the
command that converts it. Weights in F16 or BF16 load as float32 (exactly).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from bpe.files.jsonio import read_json
from gpt.model.config import GPTConfig
from gpt.pretrained import hf_config, hf_weights
from gpt.pretrained.families import export_family

SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a folder: the single file, or every shard of the index."""
    if (folder / SINGLE).is_file():
        return [folder / SINGLE]
    if (folder / INDEX).is_file():
        index = read_json(folder / INDEX, "the shard index")
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ValueError(f"{folder / INDEX}: field 'weight_map' must map tensor names to file names")
        shards = []
        for name in dict.fromkeys(weight_map.values()):
            shard = folder / name
            if Path(name).name != name or not shard.is_file():
                raise FileNotFoundError(f"{folder / INDEX} lists shard {name!r}, which is not in {str(folder)!r}")
            shards.append(shard)
        return shards
    pickles = [p for p in PICKLES if (folder / p).is_file()]
    if pickles:
        raise ValueError(
            f"{folder}: holds {pickles[0]} but no {SINGLE}; that file is a Python pickle, which can run "
            "code when loaded, and is never loaded here. Convert it once where PyTorch and transformers "
            "are installed: python -c \"from transformers import AutoModelForCausalLM as M; "
            f"M.from_pretrained('{folder}').save_pretrained('{folder}', safe_serialization=True)\"")
    raise FileNotFoundError(f"{folder}: no {SINGLE} or {INDEX} (a Hugging Face model folder's weights)")


def read_weights(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of the folder's safetensors files, floating ones as float32."""
    from nn.checkpoint import load_safetensors

    tensors: dict[str, np.ndarray] = {}
    for path in weight_files(folder):
        part, _ = load_safetensors(path)
        for name, arr in part.items():
            if name in tensors:
                raise ValueError(f"{path}: tensor {name!r} is also in another shard")
            tensors[name] = arr.astype(np.float32, copy=False) if arr.dtype.kind == "f" else arr
    return tensors


def load(path: str | os.PathLike, block_size: int | None = None) -> tuple[GPTConfig, dict[str, np.ndarray]]:
    """(GPTConfig, our state_dict as float32 host arrays) of a Hugging Face model folder."""
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"{str(folder)!r} is not a folder (a Hugging Face model folder: config.json + "
                                f"{SINGLE})")
    hf = read_json(folder / "config.json", "the model's configuration")
    if not isinstance(hf, dict):
        raise ValueError(f"{folder / 'config.json'}: expected a JSON object")
    where = str(folder / "config.json")
    cfg = hf_config.config_from_hf(hf, where, block_size)
    state = hf_weights.from_hf(read_weights(folder), cfg, hf_config.architecture(hf, where), str(folder))
    return cfg, state


def load_tokenizer(path: str | os.PathLike):
    """The folder's tokenizer (tokenizer.json, else vocab.json + merges.txt), or None."""
    from bpe import Tokenizer

    folder = Path(path)
    if (folder / "tokenizer.json").is_file():
        return Tokenizer.from_huggingface(folder / "tokenizer.json")
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        return Tokenizer.from_gpt2_files(folder / "vocab.json", folder / "merges.txt")
    return None


def save(folder: str | os.PathLike, cfg: GPTConfig, state: dict[str, Any], tokenizer=None,
         bf16: bool = False, family: str | None = None) -> Path:
    """Write config.json, model.safetensors (BF16 when asked) and, for a bpe Tokenizer,
    tokenizer.json + tokenizer_config.json: a folder AutoModelForCausalLM/AutoTokenizer load.
    family: the one to write as (default: the first that computes the same). The token ids in
    config.json are the tokenizer's end-of-text id, or null (never the class's defaults, which
    need not exist in this vocabulary)."""
    from autograd import backend
    from bpe.files.atomic import atomic_write_text
    from nn.checkpoint import save_safetensors

    f = export_family(cfg, family)  # refuses before anything is written
    if tokenizer is not None and not hasattr(tokenizer, "save_huggingface"):
        import warnings

        warnings.warn(f"a {type(tokenizer).__name__} has no Hugging Face tokenizer.json form: the folder "
                      "holds no tokenizer", stacklevel=3)
        tokenizer = None
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    host = {k: backend.to_device(v, "cpu") for k, v in state.items()}
    eot = f.eot_id(tokenizer)
    save_safetensors(folder / SINGLE, hf_weights.to_hf(host, cfg, f), metadata={"format": "pt"}, bf16=bf16)
    hf = hf_config.config_to_hf(cfg, {"bos_token_id": eot, "eos_token_id": eot, "pad_token_id": None}, f.name)
    if bf16:
        hf["torch_dtype"] = "bfloat16"
    atomic_write_text(folder / "config.json", json.dumps(hf, indent=2) + "\n")
    if tokenizer is not None:
        tokenizer.save_huggingface(folder / "tokenizer.json")
        tc = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.block_size,
              "clean_up_tokenization_spaces": False}
        if eot is not None:
            name = next(s for s, i in tokenizer.special_tokens.items() if i == eot)
            tc.update(bos_token=name, eos_token=name)
        atomic_write_text(folder / "tokenizer_config.json", json.dumps(tc, indent=2) + "\n")
    return folder
