""".tiktoken files: read and write (``Tokenizer.from_tiktoken`` and ``Tokenizer.save_tiktoken``).

One ``<base64 token> <rank>`` per line, ordered by rank. It cannot hold the split pattern nor
the special tokens, which tiktoken's users keep in code; ``save_tiktoken`` writes them beside
it, to ``<file>.tiktoken.json`` (``pat_str``, ``special_tokens``, named as ``tiktoken.Encoding``
takes them), and ``from_tiktoken`` reads them from there. Every reader names the file and the
line or field when the content is malformed.
"""
from __future__ import annotations

import base64
import os
from pathlib import Path

from ..split.patterns import GPT4_PATTERN, resolve_pattern
from .jsonio import json_text, read_json, read_text
from .schema import at, base64_token, expect, id_limit, member, token_id
from .write_set import write_together

SIDE_FORMAT = "bpe-tiktoken-side"


def load_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """Token bytes -> rank from a ``.tiktoken`` file; errors name the file and line.

    Ranks are ASCII digits (``int`` would also take "٣") no larger than ``id_limit`` of the
    number of lines: dense, as in every real file (cl100k's are 0..100255)."""
    text = read_text(path, ".tiktoken file")
    lines = text.splitlines()
    limit = id_limit(len(lines))
    ranks: dict[bytes, int] = {}
    seen_ranks: set[int] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"{path}, line {n}: expected '<base64 token> <rank>', got {line[:80]!r}"
                             " - is the file truncated?")
        b = base64_token(parts[0], f"{path}, line {n}")
        if b in ranks:
            raise ValueError(f"{path}, line {n}: token {b!r} appears twice (also with rank {ranks[b]})")
        if not (parts[1].isascii() and parts[1].isdigit()):
            raise ValueError(f"{path}, line {n}: rank {parts[1][:80]!r} is not a non-negative integer"
                             " in ASCII digits")
        if len(parts[1]) > 10 or int(parts[1]) > limit:
            raise ValueError(f"{path}, line {n}: rank {parts[1][:40]} is beyond {limit:,}, the most a file "
                             f"of {len(lines):,} lines may use (ranks are dense from 0)")
        r = int(parts[1])
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


def tiktoken_texts(tok, path: str | os.PathLike) -> dict[Path, str]:
    """The ranks file and, beside it, the side file with what a .tiktoken file cannot hold.

    tiktoken keeps the split pattern and the special tokens in code
    (``tiktoken.Encoding(name, pat_str=..., mergeable_ranks=..., special_tokens=...)``), so they
    go to ``<path>.json`` under exactly those names; ``from_tiktoken`` reads them back.
    """
    ranks = tok.mergeable_ranks
    lines = [f"{base64.b64encode(b).decode('ascii')} {i}" for b, i in sorted(ranks.items(), key=lambda x: x[1])]
    info = {"format": SIDE_FORMAT, "ranks_file": Path(path).name, "name": Path(path).stem,
            "pat_str": tok.pattern, "special_tokens": tok.special_tokens}
    return {Path(path): "\n".join(lines) + "\n", tiktoken_side_path(path): json_text(info)}


def save_tiktoken(tok, path: str | os.PathLike) -> Path:
    """Write ``tiktoken_texts`` as one set (``write_set``); returns the side file's path."""
    write_together(tiktoken_texts(tok, path))
    return tiktoken_side_path(path)


def load_tiktoken_side(path: str | os.PathLike, n_ranks: int) -> tuple[str | None, dict[str, int] | None]:
    """(pattern, special tokens) from the side file of a .tiktoken file of ``n_ranks`` ranks, or
    (None, None) without one."""
    side = tiktoken_side_path(path)
    if not side.exists():
        return None, None
    d = expect(read_json(side, "tiktoken side file"), dict, side, "(top level)")
    if d.get("format") != SIDE_FORMAT:
        raise ValueError(f"{side}: expected the side file of {Path(path).name} (field 'format' "
                         f"{SIDE_FORMAT!r})")
    pattern = resolve_pattern(member(d, "pat_str", str, side), f"{side}: field 'pat_str'")
    specials = member(d, "special_tokens", dict, side, default={})
    limit = id_limit(n_ranks + len(specials))
    return pattern, {s: token_id(i, f"{side}: field '{at('special_tokens', s)}'", limit) for s, i in specials.items()}


def load_tiktoken(cls, path: str | os.PathLike, pattern: str | None, special_tokens):
    """A Tokenizer from a .tiktoken file; a pattern or special tokens not given come from its side
    file, and without one GPT-4's pattern and no special tokens. Errors name the file."""
    ranks = load_tiktoken_ranks(path)
    side_pattern, side_special = (load_tiktoken_side(path, len(ranks)) if pattern is None or special_tokens is None
                                  else (None, None))
    try:
        return cls(ranks, pattern or side_pattern or GPT4_PATTERN, side_special if special_tokens is None else special_tokens)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
