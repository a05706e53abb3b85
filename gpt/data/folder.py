"""A data folder in nanoGPT's layout: its names, its meta.json, its token files, its tokenizer.

A data folder holds
    train.bin, val.bin   flat token ids, uint16 (uint32 when the vocabulary exceeds 65,536 ids)
    meta.json            {"vocab_size", "dtype", "tokenizer": file name or null, "eot_id", ...}
    tokenizer.json       the tokenizer that wrote the ids (our bpe JSON or a character table)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

EOT = "<|endoftext|>"
META_FILE = "meta.json"
TOKENIZER_FILE = "tokenizer.json"
SPLITS = ("train", "val")


# ---- small file helpers ---------------------------------------------------------------------
def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (vocab_size <= 65,536), else uint32, as nanoGPT does."""
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.uint32)


# ---- tokenizers -----------------------------------------------------------------------------
def load_tokenizer(path: str | os.PathLike):
    """Our bpe JSON tokenizer or a character-level table, whichever the file holds."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file {str(path)!r} does not exist")
    try:
        head = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        head = None
    from gpt.data.char_tokenizer import FORMAT, CharTokenizer

    if isinstance(head, dict) and head.get("format") == FORMAT:
        return CharTokenizer.from_dict(head, str(path))
    from bpe import Tokenizer

    return Tokenizer.load(path)


def eot_id(tok) -> int | None:
    """The id of the end-of-text token, or None when the tokenizer has none."""
    try:
        ids = tok.encode(EOT, allowed_special="all")
    except Exception:
        return None
    return ids[0] if len(ids) == 1 else None


# ---- reading a data folder ------------------------------------------------------------------
def read_meta(data_dir: str | os.PathLike, vocab_size: int | None = None) -> dict:
    """The folder's meta.json, checked; without one (a folder written by nanoGPT's own scripts),
    uint16 ids and a vocab size given or found as the largest id + 1."""
    d = Path(data_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"data folder {str(d)!r} does not exist")
    for s in SPLITS:
        if not (d / f"{s}.bin").is_file():
            raise FileNotFoundError(
                f"data folder {str(d)!r} has no {s}.bin: expected nanoGPT's layout "
                "(train.bin, val.bin, meta.json), e.g. written by `gpt prepare`")
    mpath = d / META_FILE
    if mpath.is_file():
        try:
            meta = json.loads(mpath.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{mpath} is not valid JSON: {exc}") from None
        if not isinstance(meta, dict) or "vocab_size" not in meta:
            raise ValueError(f"{mpath} has no 'vocab_size'")
        meta.setdefault("dtype", token_dtype(int(meta["vocab_size"])).name)
    else:
        meta = {"dtype": "uint16", "tokenizer": None}
        if vocab_size is None:
            ids = np.memmap(d / "train.bin", dtype=np.uint16, mode="r")
            vocab_size = int(ids.max()) + 1 if ids.size else 0
        meta["vocab_size"] = int(vocab_size)
    if meta["dtype"] not in ("uint16", "uint32"):
        raise ValueError(f"{mpath}: dtype must be 'uint16' or 'uint32', got {meta['dtype']!r}")
    tokf = meta.get("tokenizer")
    meta["tokenizer_path"] = str(d / tokf) if tokf and (d / tokf).is_file() else None
    return meta


def open_tokens(data_dir: str | os.PathLike, split: str, meta: dict | None = None) -> np.ndarray:
    """The ids of `split` ('train' or 'val') as a read-only memory map, shape (N,)."""
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    meta = meta or read_meta(data_dir)
    path = Path(data_dir) / f"{split}.bin"
    dtype = np.dtype(meta["dtype"])
    size = path.stat().st_size
    if size % dtype.itemsize:
        raise ValueError(f"{path} has {size} bytes, not a whole number of {dtype.name} ids")
    if size == 0:
        raise ValueError(f"{path} is empty: no {split} tokens")
    return np.memmap(path, dtype=dtype, mode="r")
