"""A local Hugging Face model folder, read and written without PyTorch or transformers.

    config.json                      the architecture and its shape (gpt.pretrained.hf_config)
    model.safetensors                the weights, or shards listed by
    model.safetensors.index.json     {"weight_map": {tensor name: shard file}}
    tokenizer.json                   byte-level BPE (bpe.files.huggingface), or GPT-2's vocab.json + merges.txt
    tokenizer_config.json            what AutoTokenizer needs besides tokenizer.json

A folder with only `pytorch_model.bin` (a pickle, which we never load) is refused with the
command that converts it. Weights in F16, BF16 or F64 load as float32 (F16 and BF16 exactly);
other dtypes are refused. An export replaces the whole folder as a unit (gpt.pretrained.output).
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
from gpt.pretrained.output import new_folder, restore

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


def weight_shapes(folder: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """tensor name -> (safetensors dtype code, shape) of every weight file, from the headers
    alone (no data is read)."""
    from nn.checkpoint import read_safetensors_header

    shapes: dict[str, tuple[str, tuple[int, ...]]] = {}
    for path in weight_files(folder):
        for name, (code, shape, _, _) in read_safetensors_header(path)[0].items():
            if name in shapes:
                raise ValueError(f"{path}: tensor {name!r} is also in another shard")
            shapes[name] = (code, shape)
    return shapes


def read_weights(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of the folder's safetensors files, floating ones as float32."""
    from nn.checkpoint import load_safetensors

    tensors: dict[str, np.ndarray] = {}
    for path in weight_files(folder):
        for name, arr in load_safetensors(path)[0].items():
            tensors[name] = arr.astype(np.float32, copy=False) if arr.dtype.kind == "f" else arr
    return tensors


def load(path: str | os.PathLike, block_size: int | None = None) -> tuple[GPTConfig, dict[str, np.ndarray]]:
    """(GPTConfig, our state_dict as float32 host arrays) of a Hugging Face model folder. Every
    field's type and every size is checked against the safetensors headers before any weight
    is read (gpt.pretrained.hf_weights.check_sizes)."""
    folder = Path(path)
    if not folder.is_dir() and not restore(folder):
        raise FileNotFoundError(f"{str(folder)!r} is not a folder (a Hugging Face model folder: config.json + "
                                f"{SINGLE})")
    hf = read_json(folder / "config.json", "the model's configuration")
    if not isinstance(hf, dict):
        raise ValueError(f"{folder / 'config.json'}: expected a JSON object")
    where = str(folder / "config.json")
    cfg = hf_config.config_from_hf(hf, where, block_size)
    family = hf_config.architecture(hf, where)
    hf_weights.check_sizes(weight_shapes(folder), cfg, family, str(folder))
    return cfg, hf_weights.from_hf(read_weights(folder), cfg, family, str(folder))


def load_tokenizer(path: str | os.PathLike, vocab_size: int | None = None):
    """The folder's tokenizer (tokenizer.json, else vocab.json + merges.txt), or None; with
    vocab_size (the model's), one with an id the model has no row for is refused."""
    from bpe import Tokenizer
    from bpe.files.any_tokenizer import folder_files, load_any

    files = folder_files(path)
    if files is None:
        return None
    tokenizer = load_any(Tokenizer, path)
    if vocab_size is not None:
        check_vocab(tokenizer, vocab_size, str(files[0]))
    return tokenizer


def check_vocab(tokenizer, vocab_size: int, where: str) -> None:
    """Refuse a tokenizer with an id the model (of `vocab_size` rows) has no row for."""
    if tokenizer is not None and tokenizer.vocab_size > vocab_size:
        raise ValueError(f"{where}: the tokenizer has ids up to {tokenizer.vocab_size - 1:,} but the model's "
                         f"vocab_size is {vocab_size:,}")


EXPORT_NAMES = frozenset({"config.json", SINGLE, "tokenizer.json", "tokenizer_config.json"})


def save(folder: str | os.PathLike, cfg: GPTConfig, state: dict[str, Any], tokenizer=None,
         bf16: bool = False, family: str | None = None) -> Path:
    """Write config.json, model.safetensors (BF16 when asked) and, for a bpe Tokenizer,
    tokenizer.json + tokenizer_config.json: a folder AutoModelForCausalLM/AutoTokenizer load.
    The folder is replaced as a unit (gpt.pretrained.output): it then holds exactly these files,
    and an existing folder holding anything else is refused.
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
    check_vocab(tokenizer, cfg.vocab_size, "save_pretrained")
    host = {k: backend.to_device(v, "cpu") for k, v in state.items()}
    eot = f.eot_id(tokenizer)
    hf = hf_config.config_to_hf(cfg, {"bos_token_id": eot, "eos_token_id": eot, "pad_token_id": None}, f.name)
    if bf16:
        hf["torch_dtype"] = "bfloat16"
    with new_folder(folder, EXPORT_NAMES) as tmp:
        save_safetensors(tmp / SINGLE, hf_weights.to_hf(host, cfg, f), metadata={"format": "pt"}, bf16=bf16)
        atomic_write_text(tmp / "config.json", json.dumps(hf, indent=2) + "\n")
        if tokenizer is not None:
            tokenizer.save_huggingface(tmp / "tokenizer.json")
            tc = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.block_size,
                  "clean_up_tokenization_spaces": False}
            if eot is not None:
                name = next(s for s, i in tokenizer.special_tokens.items() if i == eot)
                tc.update(bos_token=name, eos_token=name)
            atomic_write_text(tmp / "tokenizer_config.json", json.dumps(tc, indent=2) + "\n")
    return Path(folder)
