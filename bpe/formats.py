"""Our JSON tokenizer file and tiktoken's ``.tiktoken`` file: read and write.

Our JSON (``version`` 1)::

    {"format": "bpe-tokenizer", "version": 1, "pattern": "<regex>",
     "merges": [[left_id, right_id], ...],          # merge k makes id 256 + k
     "special_tokens": {"<|endoftext|>": 4095}}

A vocabulary that is not a merge list over ids 0..255 = bytes (one read from a
``.tiktoken`` file) is stored as ``"tokens": [[id, "<base64 bytes>"], ...]`` instead
of ``"merges"``.

``.tiktoken``: one ``<base64 token> <rank>`` per line, ordered by rank. It cannot hold the
split pattern nor the special tokens, which tiktoken's users keep in code; ``save_tiktoken``
writes them beside it, to ``<file>.tiktoken.json`` (``pat_str``, ``special_tokens``, named as
``tiktoken.Encoding`` takes them), and ``from_tiktoken`` reads them from there.

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
TIKTOKEN_SIDE_FORMAT = "bpe-tiktoken-side"


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


MAX_ID = (1 << 31) - 1  # ids fit an int32, as in every array of token ids downstream


def _int(v, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_ID:
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
        raise ValueError(f"{where} must be an int id from 0 to {MAX_ID}, got {shown}")
    return v


def _list(d: dict, key: str, path) -> list:
    v = d[key]
    if not isinstance(v, list):
        raise ValueError(f"{path}: field {key!r} must be a list, got {type(v).__name__}")
    return v


def read_json(path: str | os.PathLike, what: str):
    """A JSON file's value; every failure (syntax, a 5,000-digit number, deep nesting) is one
    ValueError that names the file."""
    text = _read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}"
                         " - is the file truncated?") from None
    except (ValueError, RecursionError) as e:  # int() digit limit, nesting deeper than the stack
        raise ValueError(f"{path}: {what} cannot be read as JSON: {str(e)[:120] or type(e).__name__}") from None


def _merges(d: dict, path) -> list[tuple[int, int]]:
    pairs = []
    for k, m in enumerate(_list(d, "merges", path)):
        if not (isinstance(m, list) and len(m) == 2):
            raise ValueError(f"{path}: field 'merges[{k}]' must be a pair [left_id, right_id], got {str(m)[:40]}")
        pairs.append((_int(m[0], f"{path}: field 'merges[{k}][0]'"), _int(m[1], f"{path}: field 'merges[{k}][1]'")))
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
        ranks[b] = _int(row[0], f"{path}: field 'tokens[{k}][0]'")
    return ranks


def _header(d, path) -> tuple[str, dict[str, int]]:
    """The pattern and special tokens of a parsed tokenizer file, checked."""
    if not isinstance(d, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level")
    if "model" in d and "format" not in d:
        raise ValueError(f"{path}: this is a Hugging Face tokenizer.json, not our format; "
                         "read it with Tokenizer.from_huggingface")
    if d.get("format") == TIKTOKEN_SIDE_FORMAT:
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
        _int(i, f"{path}: field 'special_tokens[{s[:40]!r}]'")
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


def tiktoken_side_path(path: str | os.PathLike) -> Path:
    """Where the pattern and special tokens of a ``.tiktoken`` file go: ``<file>.json``."""
    return Path(str(path) + ".json")


def save_tiktoken(tok, path: str | os.PathLike) -> Path:
    """Write the ranks to ``path`` and, beside it, what a .tiktoken file cannot hold.

    tiktoken keeps the split pattern and the special tokens in code
    (``tiktoken.Encoding(name, pat_str=..., mergeable_ranks=..., special_tokens=...)``), so they
    go to ``<path>.json`` under exactly those names; ``from_tiktoken`` reads them back. Returns
    the side file's path.
    """
    ranks = tok.mergeable_ranks
    lines = [f"{base64.b64encode(b).decode('ascii')} {i}" for b, i in sorted(ranks.items(), key=lambda x: x[1])]
    side = tiktoken_side_path(path)
    info = {"format": TIKTOKEN_SIDE_FORMAT, "ranks_file": Path(path).name, "name": Path(path).stem,
            "pat_str": tok.pattern, "special_tokens": tok.special_tokens}
    atomic_write_text(side, json.dumps(info, ensure_ascii=False, indent=1) + "\n")
    atomic_write_text(path, "\n".join(lines) + "\n")
    return side


def load_tiktoken_side(path: str | os.PathLike) -> tuple[str | None, dict[str, int] | None]:
    """(pattern, special tokens) from the side file of a .tiktoken file, or (None, None)."""
    side = tiktoken_side_path(path)
    if not side.exists():
        return None, None
    d = read_json(side, "tiktoken side file")
    if not isinstance(d, dict) or d.get("format") != TIKTOKEN_SIDE_FORMAT:
        raise ValueError(f"{side}: expected the side file of {Path(path).name} (field 'format' "
                         f"{TIKTOKEN_SIDE_FORMAT!r})")
    pattern, specials = d.get("pat_str"), d.get("special_tokens", {})
    if not isinstance(pattern, str) or not isinstance(specials, dict):
        raise ValueError(f"{side}: fields 'pat_str' (a string) and 'special_tokens' (an object) are required")
    return pattern, {s: _int(i, f"{side}: field 'special_tokens[{s[:40]!r}]'") for s, i in specials.items()}
