"""What a data folder holds, in a few numbers a checkpoint keeps: the tokenizer file's sha256 and
each token file's size and hash. A resumed run compares them with the folder it finds, so a
folder prepared again under it (other text, another tokenizer) is refused by name.

    {"tokenizer": "<sha256>" | None, "train.bin": {"bytes": n, "sha256": "<hex>"}, "val.bin": ...}

A token file up to SAMPLE_FROM bytes is hashed whole; a larger one by its size and
SAMPLE_BLOCKS evenly spaced blocks of BLOCK bytes (first and last included), so that checking a
many-gigabyte folder at every resume stays a fraction of a second; any rewrite by `gpt prepare`
moves its size or its blocks.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from gpt.data.folder import SPLITS

BLOCK = 1 << 20
SAMPLE_FROM = 1 << 28
SAMPLE_BLOCKS = 64


def _file_hash(path: Path) -> str:
    size = path.stat().st_size
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= SAMPLE_FROM:
            for block in iter(lambda: f.read(BLOCK), b""):
                h.update(block)
        else:
            h.update(b"sampled:%d:" % size)
            for i in range(SAMPLE_BLOCKS):
                f.seek((size - BLOCK) * i // (SAMPLE_BLOCKS - 1))
                h.update(f.read(BLOCK))
    return h.hexdigest()


def fingerprint(data_dir: str | os.PathLike, tokenizer_path: str | os.PathLike | None) -> dict:
    """The fingerprint of `data_dir`'s token files and of its tokenizer file (None: none)."""
    d = Path(data_dir)
    out: dict = {"tokenizer": _file_hash(Path(tokenizer_path)) if tokenizer_path else None}
    for split in SPLITS:
        path = d / f"{split}.bin"
        out[path.name] = {"bytes": path.stat().st_size, "sha256": _file_hash(path)}
    return out


def changes(saved: dict, now: dict) -> list[str]:
    """What differs between two fingerprints, each part named ([] when they agree)."""
    found = []
    if saved.get("tokenizer") != now.get("tokenizer"):
        found.append("the tokenizer file differs" if saved.get("tokenizer") and now.get("tokenizer")
                     else "the tokenizer file was " + ("removed" if saved.get("tokenizer") else "added"))
    for name in (f"{s}.bin" for s in SPLITS):
        was, is_ = saved.get(name) or {}, now.get(name) or {}
        if was.get("bytes") != is_.get("bytes"):
            found.append(f"{name} was {was.get('bytes')} bytes and is {is_.get('bytes')}")
        elif was.get("sha256") != is_.get("sha256"):
            found.append(f"{name} holds other tokens (same size, another hash)")
    return found
