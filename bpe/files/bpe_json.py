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
import json
import os
import re

from ..split.patterns import resolve_pattern
from .atomic import atomic_write_text
from .jsonio import parse_json, read_text
from .schema import at, base64_token, expect, id_limit, member, token_id
from . import tiktoken_file

FORMAT = "bpe-tokenizer"
VERSION = 1
_TIKTOKEN_LINE = re.compile(r"[A-Za-z0-9+/=]+ [0-9]+\r?\n")  # what a .tiktoken file starts with


def to_json_dict(tok) -> dict:
    d = {"format": FORMAT, "version": VERSION, "pattern": tok.pattern}
    if tok.merges is not None:
        d["merges"] = [list(m) for m in tok.merges]
    else:
        ranks = tok.mergeable_ranks
        d["tokens"] = [[i, base64.b64encode(b).decode("ascii")] for b, i in sorted(ranks.items(), key=lambda x: x[1])]
    d["special_tokens"] = tok.special_tokens
    return d


def json_text(tok) -> str:
    """The file ``save_json`` writes: one merge (or token) per line, diffable and still compact."""
    d = to_json_dict(tok)
    body = {k: v for k, v in d.items() if k not in ("merges", "tokens")}
    text = json.dumps(body, ensure_ascii=False, indent=1)[:-2]
    for key in ("merges", "tokens"):
        if key in d:
            rows = ",\n  ".join(json.dumps(r, ensure_ascii=False) for r in d[key])
            text += f',\n "{key}": [\n  {rows}\n ]'
    return text + "\n}\n"


def save_json(tok, path: str | os.PathLike) -> None:
    atomic_write_text(path, json_text(tok))


def _merges(merges: list, path) -> list[tuple[int, int]]:
    """The merges' id pairs (``from_merges`` then checks that each id is made before it is used)."""
    pairs = []
    for k, m in enumerate(merges):
        if not (isinstance(m, list) and len(m) == 2):
            raise ValueError(f"{path}: field 'merges[{k}]' must be a pair [left_id, right_id], got {str(m)[:40]}")
        pairs.append(tuple(token_id(m[j], f"{path}: field 'merges[{k}][{j}]'") for j in (0, 1)))
    return pairs


def _tokens(rows: list, n_ids: int, path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    rows_of: dict[int, int] = {}  # id -> the row that has it
    limit = id_limit(n_ids)
    for k, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[1], str)):
            raise ValueError(f"{path}: field 'tokens[{k}]' must be [id, base64], got {str(row)[:40]}")
        b = base64_token(row[1], f"{path}: field 'tokens[{k}][1]'")
        if b in ranks:
            raise ValueError(f"{path}: field 'tokens[{k}]' repeats the token of id {ranks[b]}")
        i = token_id(row[0], f"{path}: field 'tokens[{k}][0]'", limit)
        if i in rows_of:
            raise ValueError(f"{path}: field 'tokens[{k}][0]' is id {i}, which tokens[{rows_of[i]}] has too")
        ranks[b], rows_of[i] = i, k
    return ranks


def _header(d, path) -> tuple[str, dict]:
    """The pattern and the special tokens (not yet their ids) of a parsed tokenizer file, checked."""
    expect(d, dict, path, "(top level)")
    if "model" in d and "format" not in d:
        raise ValueError(f"{path}: this is a Hugging Face tokenizer.json, not our format; "
                         "read it with Tokenizer.from_huggingface")
    if d.get("format") == tiktoken_file.SIDE_FORMAT:
        raise ValueError(f"{path}: this is the side file of a .tiktoken file (its pattern and special "
                         f"tokens); load the .tiktoken file itself ({str(d.get('ranks_file'))[:80]!r})")
    if d.get("format", FORMAT) != FORMAT:
        raise ValueError(f"{path}: field 'format' is {str(d.get('format'))[:40]}, expected {FORMAT!r}"
                         " (for Hugging Face or tiktoken files use the matching importer)")
    version = d.get("version")
    if version != VERSION or isinstance(version, bool):
        raise ValueError(f"{path}: field 'version' is {json.dumps(version)[:40]}; this code reads version {VERSION}")
    pattern = resolve_pattern(member(d, "pattern", str, path), f"{path}: field 'pattern'")
    return pattern, member(d, "special_tokens", dict, path, default={})


def load_json(cls, path: str | os.PathLike):
    text = read_text(path, "tokenizer file")
    if _TIKTOKEN_LINE.match(text):
        raise ValueError(f"{path}: this looks like a .tiktoken file (lines of '<base64 token> <rank>'), not "
                         "our JSON format; read it with Tokenizer.from_tiktoken (the bpe command reads a "
                         "file whose name ends in .tiktoken as one)")
    d = parse_json(text, path, "tokenizer file")
    pattern, specials = _header(d, path)
    if "merges" in d:
        merges = member(d, "merges", list, path)
        n_ids = 256 + len(merges) + len(specials)
        ids = _merges(merges, path)
        make = lambda s: cls.from_merges(ids, pattern, s)  # noqa: E731
    elif "tokens" in d:
        rows = member(d, "tokens", list, path)
        n_ids = len(rows) + len(specials)
        ranks = _tokens(rows, n_ids, path)
        make = lambda s: cls(ranks, pattern, s)  # noqa: E731
    else:
        raise ValueError(f"{path}: neither field 'merges' nor field 'tokens' is present")
    limit = id_limit(n_ids)
    special_ids: dict[str, int] = {}
    for s, i in specials.items():
        field = f"{path}: field '{at('special_tokens', s)}'"
        if token_id(i, field, limit) in special_ids.values():
            raise ValueError(f"{field} is id {i}, which another special token has too")
        special_ids[s] = i
    try:
        return make(special_ids)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
