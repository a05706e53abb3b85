"""Our JSON tokenizer file: read and write (``Tokenizer.save`` and ``Tokenizer.load``).

Version 1::

    {"format": "bpe-tokenizer", "version": 1, "pattern": "<regex>",
     "merges": [[left_id, right_id], ...],          # merge k makes id 256 + k
     "special_tokens": {"<|endoftext|>": 4095}}

A vocabulary that is not a merge list over ids 0..255 = bytes (one read from a
``.tiktoken`` file) is stored as ``"tokens": [[id, "<base64 bytes>"], ...]`` instead
of ``"merges"``. The reader names the file and the field when the content is malformed.
"""
from __future__ import annotations

import base64
import binascii
import json
import os

from .atomic import atomic_write_text
from .jsonio import read_json, token_id
from . import tiktoken_file

FORMAT = "bpe-tokenizer"
VERSION = 1


def to_json_dict(tok) -> dict:
    d = {"format": FORMAT, "version": VERSION, "pattern": tok.pattern}
    if tok.merges is not None:
        d["merges"] = [list(m) for m in tok.merges]
    else:
        ranks = tok.mergeable_ranks
        d["tokens"] = [[i, base64.b64encode(b).decode("ascii")] for b, i in sorted(ranks.items(), key=lambda x: x[1])]
    d["special_tokens"] = tok.special_tokens
    return d


def save_json(tok, path: str | os.PathLike) -> None:
    d = to_json_dict(tok)
    # One merge per line: diffable and still compact.
    body = {k: v for k, v in d.items() if k not in ("merges", "tokens")}
    text = json.dumps(body, ensure_ascii=False, indent=1)[:-2]
    for key in ("merges", "tokens"):
        if key in d:
            rows = ",\n  ".join(json.dumps(r, ensure_ascii=False) for r in d[key])
            text += f',\n "{key}": [\n  {rows}\n ]'
    text += "\n}\n"
    atomic_write_text(path, text)


def _list(d: dict, key: str, path) -> list:
    v = d[key]
    if not isinstance(v, list):
        raise ValueError(f"{path}: field {key!r} must be a list, got {type(v).__name__}")
    return v


def _merges(d: dict, path) -> list[tuple[int, int]]:
    pairs = []
    for k, m in enumerate(_list(d, "merges", path)):
        if not (isinstance(m, list) and len(m) == 2):
            raise ValueError(f"{path}: field 'merges[{k}]' must be a pair [left_id, right_id], got {str(m)[:40]}")
        pairs.append((token_id(m[0], f"{path}: field 'merges[{k}][0]'"), token_id(m[1], f"{path}: field 'merges[{k}][1]'")))
    return pairs


def _tokens(d: dict, path) -> dict[bytes, int]:
    ranks = {}
    for k, row in enumerate(_list(d, "tokens", path)):
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[1], str)):
            raise ValueError(f"{path}: field 'tokens[{k}]' must be [id, base64], got {str(row)[:40]}")
        try:
            b = base64.b64decode(row[1], validate=True)
        except binascii.Error:
            raise ValueError(f"{path}: field 'tokens[{k}]' has invalid base64 {row[1][:40]!r}") from None
        ranks[b] = token_id(row[0], f"{path}: field 'tokens[{k}][0]'")
    return ranks


def _header(d, path) -> tuple[str, dict[str, int]]:
    """The pattern and special tokens of a parsed tokenizer file, checked."""
    if not isinstance(d, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level")
    if "model" in d and "format" not in d:
        raise ValueError(f"{path}: this is a Hugging Face tokenizer.json, not our format; "
                         "read it with Tokenizer.from_huggingface")
    if d.get("format") == tiktoken_file.SIDE_FORMAT:
        raise ValueError(f"{path}: this is the side file of a .tiktoken file (its pattern and special "
                         f"tokens); load the .tiktoken file itself ({d.get('ranks_file')!r})")
    if d.get("format", FORMAT) != FORMAT:
        raise ValueError(f"{path}: field 'format' is {str(d.get('format'))[:40]}, expected {FORMAT!r}"
                         " (for Hugging Face or tiktoken files use the matching importer)")
    version = d.get("version")
    if version != VERSION or isinstance(version, bool):
        raise ValueError(f"{path}: field 'version' is {str(version)[:40]}; this code reads version {VERSION}")
    pattern = d.get("pattern")
    if not isinstance(pattern, str):
        raise ValueError(f"{path}: field 'pattern' is missing or not a string")
    specials = d.get("special_tokens", {})
    if not isinstance(specials, dict):
        raise ValueError(f"{path}: field 'special_tokens' must be an object mapping text to id")
    for s, i in specials.items():
        token_id(i, f"{path}: field 'special_tokens[{s[:40]!r}]'")
    return pattern, specials


def load_json(cls, path: str | os.PathLike):
    d = read_json(path, "tokenizer file")
    pattern, specials = _header(d, path)
    try:
        if "merges" in d:
            return cls.from_merges(_merges(d, path), pattern, specials)
        if "tokens" in d:
            return cls(_tokens(d, path), pattern, specials)
    except ValueError as e:
        if str(e).startswith(str(path)):
            raise
        raise ValueError(f"{path}: {e}") from None
    raise ValueError(f"{path}: neither field 'merges' nor field 'tokens' is present")
