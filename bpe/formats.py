"""Our JSON tokenizer file and tiktoken's ``.tiktoken`` file: read and write.

Our JSON (``version`` 1)::

    {"format": "bpe-tokenizer", "version": 1, "pattern": "<regex>",
     "merges": [[left_id, right_id], ...],          # merge k makes id 256 + k
     "special_tokens": {"<|endoftext|>": 4095}}

A vocabulary that is not a merge list over ids 0..255 = bytes (one read from a
``.tiktoken`` file) is stored as ``"tokens": [[id, "<base64 bytes>"], ...]`` instead
of ``"merges"``.

``.tiktoken``: one ``<base64 token> <rank>`` per line, ordered by rank.

Every reader names the file and the line or field when the content is malformed.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
from pathlib import Path

from .atomic import atomic_write_text

FORMAT = "bpe-tokenizer"
VERSION = 1


def _read_text(path: str | os.PathLike, what: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise type(e)(e.errno, f"cannot read {what} {str(path)!r}: {e.strerror}") if e.errno else e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: {what} is not UTF-8 text (bad byte at offset {e.start})") from None


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


def _int(v, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"{where} must be a non-negative int, got {v!r}")
    return v


def load_json(cls, path: str | os.PathLike):
    text = _read_text(path, "tokenizer file")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}"
                         " - is the file truncated?") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level")
    if "model" in d and "format" not in d:
        raise ValueError(f"{path}: this is a Hugging Face tokenizer.json, not our format; "
                         "bpe writes that format (save_huggingface) but does not read it")
    if d.get("format", FORMAT) != FORMAT:
        raise ValueError(f"{path}: field 'format' is {d.get('format')!r}, expected {FORMAT!r}"
                         " (for Hugging Face or tiktoken files use the matching importer)")
    version = d.get("version")
    if version != VERSION:
        raise ValueError(f"{path}: field 'version' is {version!r}; this code reads version {VERSION}")
    pattern = d.get("pattern")
    if not isinstance(pattern, str):
        raise ValueError(f"{path}: field 'pattern' is missing or not a string")
    specials = d.get("special_tokens", {})
    if not isinstance(specials, dict):
        raise ValueError(f"{path}: field 'special_tokens' must be an object mapping text to id")
    for s, i in specials.items():
        _int(i, f"{path}: field 'special_tokens[{s!r}]'")
    try:
        if "merges" in d:
            merges = d["merges"]
            if not isinstance(merges, list):
                raise ValueError(f"{path}: field 'merges' must be a list")
            pairs = []
            for k, m in enumerate(merges):
                if not (isinstance(m, list) and len(m) == 2):
                    raise ValueError(f"{path}: field 'merges[{k}]' must be a pair [left_id, right_id], got {m!r}")
                pairs.append((_int(m[0], f"{path}: field 'merges[{k}][0]'"), _int(m[1], f"{path}: field 'merges[{k}][1]'")))
            return cls.from_merges(pairs, pattern, specials)
        if "tokens" in d:
            ranks = {}
            for k, row in enumerate(d["tokens"]):
                if not (isinstance(row, list) and len(row) == 2 and isinstance(row[1], str)):
                    raise ValueError(f"{path}: field 'tokens[{k}]' must be [id, base64], got {row!r}")
                try:
                    b = base64.b64decode(row[1], validate=True)
                except binascii.Error:
                    raise ValueError(f"{path}: field 'tokens[{k}]' has invalid base64 {row[1]!r}") from None
                ranks[b] = _int(row[0], f"{path}: field 'tokens[{k}][0]'")
            return cls(ranks, pattern, specials)
    except ValueError as e:
        if str(e).startswith(str(path)):
            raise
        raise ValueError(f"{path}: {e}") from None
    raise ValueError(f"{path}: neither field 'merges' nor field 'tokens' is present")


def load_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """Token bytes -> rank from a ``.tiktoken`` file; errors name the file and line."""
    text = _read_text(path, ".tiktoken file")
    ranks: dict[bytes, int] = {}
    seen_ranks: set[int] = set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}, line {n}: expected '<base64 token> <rank>', got {line[:80]!r}"
                             " - is the file truncated?")
        try:
            b = base64.b64decode(parts[0], validate=True)
        except binascii.Error:
            raise ValueError(f"{path}, line {n}: invalid base64 token {parts[0][:80]!r}") from None
        if not parts[1].isdigit():
            raise ValueError(f"{path}, line {n}: rank {parts[1][:80]!r} is not a non-negative integer")
        r = int(parts[1])
        if b in ranks:
            raise ValueError(f"{path}, line {n}: token {b!r} appears twice (also with rank {ranks[b]})")
        if r in seen_ranks:
            raise ValueError(f"{path}, line {n}: rank {r} appears twice")
        ranks[b] = r
        seen_ranks.add(r)
    if not ranks:
        raise ValueError(f"{path}: the .tiktoken file holds no tokens")
    missing = [x for x in range(256) if bytes([x]) not in ranks]
    if missing:
        raise ValueError(f"{path}: {len(missing)} single bytes are not tokens (e.g. byte {missing[0]});"
                         " is the file truncated?")
    return ranks


def save_tiktoken(tok, path: str | os.PathLike) -> None:
    ranks = tok.mergeable_ranks
    lines = [f"{base64.b64encode(b).decode('ascii')} {i}" for b, i in sorted(ranks.items(), key=lambda x: x[1])]
    atomic_write_text(path, "\n".join(lines) + "\n")
