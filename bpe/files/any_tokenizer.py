"""One reader for a tokenizer wherever one is expected, whatever kind the path holds.

    load_any(Tokenizer, "tok.json")              our JSON (``bpe train``, ``Tokenizer.save``)
    load_any(Tokenizer, "cl100k_base.tiktoken")  tiktoken's ranks (its side file's pattern, else GPT-4's)
    load_any(Tokenizer, "hf/tokenizer.json")     a Hugging Face byte-level BPE tokenizer.json
    load_any(Tokenizer, "hf/")                   a model folder: its tokenizer.json, else GPT-2's
                                                 vocab.json + merges.txt

The kind is read from the file's first bytes (a .tiktoken line, our ``"format"``, the top-level
fields of Hugging Face's format), not from its name, so a renamed file still reads; the reader
of that kind then checks the whole file.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from .bpe_json import _TIKTOKEN_LINE

HEAD_BYTES = 1 << 16
KINDS = ("our JSON", "a .tiktoken file", "a Hugging Face tokenizer.json",
         "a model folder (tokenizer.json, or vocab.json + merges.txt)")
_FORMAT = re.compile(r'"format"\s*:\s*"([^"]{0,80})"')
_HF_FIELDS = re.compile(r'"(truncation|padding|added_tokens|normalizer|pre_tokenizer|post_processor|decoder)"\s*:')


def folder_files(folder: str | os.PathLike) -> list[Path] | None:
    """The tokenizer files of a model folder: [tokenizer.json], else [vocab.json, merges.txt], else None."""
    d = Path(folder)
    if (d / "tokenizer.json").is_file():
        return [d / "tokenizer.json"]
    if (d / "vocab.json").is_file() and (d / "merges.txt").is_file():
        return [d / "vocab.json", d / "merges.txt"]
    return None


def kind_of(path: str | os.PathLike) -> str:
    """'folder', 'tiktoken', 'huggingface' or 'json' (ours, or JSON its reader will name)."""
    p = Path(path)
    if p.is_dir():
        return "folder"
    if not p.is_file():
        raise FileNotFoundError(f"tokenizer file {str(p)!r} does not exist" if not p.exists() else
                                f"tokenizer path {str(p)!r} is neither a file nor a folder")
    with open(p, "rb") as f:
        head = f.read(HEAD_BYTES).decode("utf-8", "replace")
    if _TIKTOKEN_LINE.match(head):
        return "tiktoken"
    if _FORMAT.search(head) is None and _HF_FIELDS.search(head):
        return "huggingface"
    return "json"


def load_any(cls, path: str | os.PathLike, pattern: str | None = None):
    """A `cls` (bpe.Tokenizer) from any kind in KINDS; `pattern` overrides a .tiktoken file's."""
    kind = kind_of(path)
    if kind == "folder":
        files = folder_files(path)
        if files is None:
            raise FileNotFoundError(f"folder {str(path)!r} holds no tokenizer (looked for tokenizer.json, "
                                    "or vocab.json + merges.txt)")
        if len(files) == 2:
            return cls.from_gpt2_files(*files, pattern=pattern)
        return load_any(cls, files[0], pattern)
    if kind == "tiktoken":
        return cls.from_tiktoken(path, pattern=pattern)
    if kind == "huggingface":
        return cls.from_huggingface(path)
    return cls.load(path)
