"""A data folder in nanoGPT's layout: its names, its meta.json, its token files, its tokenizer.

A data folder holds
    train.bin, val.bin   flat token ids, uint16 (uint32 when the vocabulary exceeds 65,536 ids)
    meta.json            {"vocab_size", "dtype", "tokenizer": file name or null, "eot_id", ...}
    tokenizer.json       the tokenizer that wrote the ids (our bpe JSON or a character table)
"""
from __future__ import annotations

import json
import math
import os
import pickle
from pathlib import Path

import numpy as np

EOT = "<|endoftext|>"
META_FILE = "meta.json"
TOKENIZER_FILE = "tokenizer.json"
# Present while `gpt prepare` rewrites a folder; a folder holding it is incomplete and refused.
INCOMPLETE_FILE = ".incomplete"
NANOGPT_META = "meta.pkl"  # nanoGPT's own scripts write it for character datasets
SPLITS = ("train", "val")


# ---- small file helpers ---------------------------------------------------------------------
def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (vocab_size <= 65,536), else uint32, as nanoGPT does."""
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.uint32)


# ---- tokenizers -----------------------------------------------------------------------------
def load_tokenizer(path: str | os.PathLike):
    """A character-level table, nanoGPT's meta.pkl, or any tokenizer bpe reads (our JSON, a
    .tiktoken, a Hugging Face tokenizer.json), whichever the file holds; a folder (a run of ours,
    a Hugging Face model) is read for its tokenizer file."""
    from bpe import Tokenizer
    from bpe.files.any_tokenizer import kind_of, load_any
    from gpt.data.char_tokenizer import FORMAT, CharTokenizer

    path = Path(path)
    if path.is_dir() and (path / TOKENIZER_FILE).is_file():  # a run folder's may be a character table
        path = path / TOKENIZER_FILE
    if not path.exists():
        raise FileNotFoundError(f"tokenizer file {str(path)!r} does not exist")
    if path.name == NANOGPT_META:
        return _nanogpt_tokenizer(path)
    if path.is_file() and kind_of(path) == "json":  # ours, or gpt's character table
        try:
            head = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            head = None
        if isinstance(head, dict) and head.get("format") == FORMAT:
            return CharTokenizer.from_dict(head, str(path))
    return load_any(Tokenizer, path)


def tokenizer_text(path: str | os.PathLike) -> str:
    """The tokenizer file's text as a checkpoint embeds it (JSON; meta.pkl as our character table)."""
    path = Path(path)
    if path.name == NANOGPT_META:
        return json.dumps(_nanogpt_tokenizer(path).to_dict(), ensure_ascii=False)
    return path.read_text(encoding="utf-8")


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, strings and numbers only: every global (a class, a function) is
    refused, so a pickle can build no object and run no code (the restriction Python's pickle
    documentation describes)."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it refers to {module}.{name}; only plain data is accepted")


def read_nanogpt_meta(path: str | os.PathLike) -> dict:
    """nanoGPT's meta.pkl of a character dataset: {"vocab_size": V, "itos": {id: char}, "stoi": ...}."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            meta = _PlainUnpickler(f).load()
    except Exception as exc:  # noqa: BLE001 - any failure of a hostile file is the same refusal
        raise ValueError(f"{path} is not a plain nanoGPT meta.pkl: {exc}") from None
    itos = meta.get("itos") if isinstance(meta, dict) else None
    V = meta.get("vocab_size") if isinstance(meta, dict) else None
    if not (_is_int(V) and isinstance(itos, dict) and _maps_ids_to_chars(itos, V)):
        raise ValueError(f"{path} is not the meta.pkl of a nanoGPT character dataset (vocab_size and "
                         "itos mapping 0..V-1 to single characters)")
    return meta


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _maps_ids_to_chars(itos: dict, V: int) -> bool:
    """Whether `itos` maps exactly the ids 0..V-1 to single characters; the size is compared
    first, so a hostile V builds nothing, and keys of any type compare without raising."""
    return (len(itos) == V and all(_is_int(i) and 0 <= i < V for i in itos)
            and all(isinstance(c, str) and len(c) == 1 for c in itos.values()))


def _nanogpt_tokenizer(path: Path):
    from gpt.data.char_tokenizer import CharTokenizer

    itos = read_nanogpt_meta(path)["itos"]
    return CharTokenizer([itos[i] for i in range(len(itos))])


def eot_id(tok) -> int | None:
    """The id of the end-of-text token, or None when the tokenizer has none."""
    try:
        ids = tok.encode(EOT, allowed_special="all")
    except Exception:
        return None
    return ids[0] if len(ids) == 1 else None


def same_ids(a, b) -> bool:
    """Whether ids mean the same text under tokenizers `a` and `b` (bpe Tokenizers, character
    tables): every id of the smaller vocabulary decodes to the same bytes. True when either is None
    (nothing to compare: a data folder of bare ids)."""
    if a is None or b is None:
        return True
    n = min(int(a.vocab_size), int(b.vocab_size))
    return all(_id_bytes(a, i) == _id_bytes(b, i) for i in range(n))


def _id_bytes(tok, i: int) -> bytes | None:
    try:  # None for an id the tokenizer leaves unused (a gap before its special tokens)
        return tok.decode_bytes([i]) if hasattr(tok, "decode_bytes") else tok.decode([i]).encode("utf-8")
    except (KeyError, IndexError, ValueError):
        return None


def describe_tokenizer(tok, source: str | None = None) -> str:
    """'a BPE tokenizer of 1000 ids (runs/a/tokenizer.json)', for messages that name one."""
    kind = "character table" if not hasattr(tok, "decode_bytes") else "BPE tokenizer"
    return f"a {kind} of {int(tok.vocab_size)} ids" + (f" ({source})" if source else "")


# ---- bits per byte --------------------------------------------------------------------------
def split_bytes(meta: dict, split: str, tokens: np.ndarray, tok=None) -> int | None:
    """UTF-8 bytes of the text behind a split: the count `gpt prepare` wrote in meta.json, else
    the bytes `tok` decodes the ids to (end-of-text tokens left out), else None. tokens: (N,) ids."""
    if isinstance(meta.get(f"{split}_bytes"), int):
        return meta[f"{split}_bytes"]
    if tok is None:
        return None
    ids = np.asarray(tokens)
    eot = meta.get("eot_id")
    if eot is not None:
        ids = ids[ids != eot]
    n, step = 0, 1 << 20  # in blocks: a large split never becomes one Python list
    for lo in range(0, len(ids), step):
        part = ids[lo:lo + step].tolist()
        n += len(tok.decode_bytes(part)) if hasattr(tok, "decode_bytes") else len(tok.decode(part).encode())
    return n


def bits_per_byte(loss: float, n_tokens: int, n_bytes: int | None) -> float | None:
    """A mean loss in nats per token as bits per byte of text (comparable across tokenizers):
    loss x tokens / bytes / ln 2; None without a byte count."""
    if not n_bytes:
        return None
    return loss * n_tokens / n_bytes / math.log(2)


# ---- reading a data folder ------------------------------------------------------------------
def read_meta(data_dir: str | os.PathLike, vocab_size: int | None = None) -> dict:
    """The folder's meta.json, checked, with "tokenizer_path" added (None without a tokenizer).

    Without meta.json (a folder written by nanoGPT's own scripts): uint16 ids and a vocab size
    given or found as the largest id of train and val + 1. Either way every id of both splits is
    checked against the vocab size here, before any training or evaluation starts."""
    d = Path(data_dir)
    if not d.is_dir():
        if d.is_file():
            raise FileNotFoundError(f"{str(d)!r} is a file, not a data folder: give text as --input, or make a "
                                    f"data folder of it with gpt prepare --input {str(d)!r} --out DIR")
        raise FileNotFoundError(f"data folder {str(d)!r} does not exist")
    for s in SPLITS:
        if not (d / f"{s}.bin").is_file():
            raise FileNotFoundError(
                f"data folder {str(d)!r} has no {s}.bin: expected nanoGPT's layout "
                "(train.bin, val.bin, meta.json), e.g. written by `gpt prepare`")
    if (d / INCOMPLETE_FILE).exists():
        raise ValueError(f"data folder {str(d)!r} is incomplete: `gpt prepare` was interrupted while writing "
                         "it (or is still writing it); run it again")
    mpath = d / META_FILE
    if mpath.is_file():
        meta = _checked_meta(d, mpath)
    elif (d / NANOGPT_META).is_file():  # nanoGPT's character datasets: ids, and the characters
        meta = {"dtype": "uint16", "tokenizer": NANOGPT_META, "tokenizer_path": str(d / NANOGPT_META),
                "vocab_size": read_nanogpt_meta(d / NANOGPT_META)["vocab_size"]}
    else:
        meta = {"dtype": "uint16", "tokenizer": None, "tokenizer_path": None}
        if vocab_size is None:
            vocab_size = max(_max_id(d, s, np.dtype(np.uint16)) for s in SPLITS) + 1
        meta["vocab_size"] = int(vocab_size)
    for s in SPLITS:
        top = _max_id(d, s, np.dtype(meta["dtype"]))
        if top >= meta["vocab_size"]:
            raise ValueError(f"{d / (s + '.bin')} holds id {top}, outside the vocabulary of "
                             f"{meta['vocab_size']} ids {'in ' + str(mpath) if mpath.is_file() else ''}".rstrip())
    return meta


def _checked_meta(d: Path, mpath: Path) -> dict:
    from nn.checkpoint import parse_json

    try:
        meta = parse_json(mpath.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{mpath} is not valid JSON: {exc}") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{mpath} must hold a JSON object, got {type(meta).__name__}")
    V = meta.get("vocab_size")
    if isinstance(V, bool) or not isinstance(V, int) or V < 1:
        raise ValueError(f"{mpath}: 'vocab_size' must be a positive integer, got {V!r}")
    meta.setdefault("dtype", token_dtype(V).name)
    if meta["dtype"] not in ("uint16", "uint32"):
        raise ValueError(f"{mpath}: 'dtype' must be 'uint16' or 'uint32', got {meta['dtype']!r}")
    if meta["dtype"] == "uint16" and V > 65536:
        raise ValueError(f"{mpath}: 'dtype' uint16 cannot hold the ids of a vocabulary of {V}")
    eot = meta.get("eot_id")
    if eot is not None and (isinstance(eot, bool) or not isinstance(eot, int) or not 0 <= eot < V):
        raise ValueError(f"{mpath}: 'eot_id' must be null or an id below vocab_size={V}, got {eot!r}")
    meta["tokenizer_path"] = _tokenizer_path(d, mpath, meta.get("tokenizer"))
    return meta


def _tokenizer_path(d: Path, mpath: Path, name) -> str | None:
    """The tokenizer file meta.json names: a file inside the data folder, never outside it."""
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise ValueError(f"{mpath}: 'tokenizer' must be null or a file name, got {name!r}")
    path = (d / name).resolve()
    if path.parent != d.resolve() and d.resolve() not in path.parents:
        raise ValueError(f"{mpath}: 'tokenizer' {name!r} points outside the data folder")
    if not path.is_file():
        raise FileNotFoundError(f"{mpath} names the tokenizer {name!r}, which is not in {str(d)!r}")
    return str(d / name)


def _max_id(d: Path, split: str, dtype: np.dtype) -> int:
    """The largest id in `split`.bin (-1 when empty), read in blocks: memory stays small."""
    ids, top, block = _token_file(d / f"{split}.bin", dtype), -1, 1 << 24
    for i in range(0, len(ids), block):
        top = max(top, int(ids[i:i + block].max()))
    return top


def _token_file(path: Path, dtype: np.dtype) -> np.ndarray:
    size = path.stat().st_size
    if size % dtype.itemsize:
        raise ValueError(f"{path} has {size} bytes, not a whole number of {dtype.name} ids")
    return np.memmap(path, dtype=dtype, mode="r") if size else np.zeros(0, dtype)


def open_tokens(data_dir: str | os.PathLike, split: str, meta: dict | None = None) -> np.ndarray:
    """The ids of `split` ('train' or 'val') as a read-only memory map, shape (N,)."""
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    meta = meta or read_meta(data_dir)
    path = Path(data_dir) / f"{split}.bin"
    ids = _token_file(path, np.dtype(meta["dtype"]))
    if ids.size == 0:
        raise ValueError(f"{path} is empty: no {split} tokens")
    return ids
