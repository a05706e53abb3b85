""".tiktoken files: read and write (``Tokenizer.from_tiktoken`` and ``Tokenizer.save_tiktoken``).

One ``<base64 token> <rank>`` per line, ordered by rank. It cannot hold the split pattern nor
the special tokens, which tiktoken's users keep in code; ``save_tiktoken`` writes them beside
it, to ``<file>.tiktoken.json`` (``pat_str``, ``special_tokens``, named as ``tiktoken.Encoding``
takes them), and ``from_tiktoken`` reads them from there. Every reader names the file and the
line or field when the content is malformed.
"""
from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path

from .atomic import atomic_write_text
from .jsonio import read_json, read_text, token_id, write_json

SIDE_FORMAT = "bpe-tiktoken-side"


def load_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """Token bytes -> rank from a ``.tiktoken`` file; errors name the file and line."""
    text = read_text(path, ".tiktoken file")
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
    info = {"format": SIDE_FORMAT, "ranks_file": Path(path).name, "name": Path(path).stem,
            "pat_str": tok.pattern, "special_tokens": tok.special_tokens}
    write_json(side, info)
    atomic_write_text(path, "\n".join(lines) + "\n")
    return side


def load_tiktoken_side(path: str | os.PathLike) -> tuple[str | None, dict[str, int] | None]:
    """(pattern, special tokens) from the side file of a .tiktoken file, or (None, None)."""
    side = tiktoken_side_path(path)
    if not side.exists():
        return None, None
    d = read_json(side, "tiktoken side file")
    if not isinstance(d, dict) or d.get("format") != SIDE_FORMAT:
        raise ValueError(f"{side}: expected the side file of {Path(path).name} (field 'format' "
                         f"{SIDE_FORMAT!r})")
    pattern, specials = d.get("pat_str"), d.get("special_tokens", {})
    if not isinstance(pattern, str) or not isinstance(specials, dict):
        raise ValueError(f"{side}: fields 'pat_str' (a string) and 'special_tokens' (an object) are required")
    return pattern, {s: token_id(i, f"{side}: field 'special_tokens[{s[:40]!r}]'") for s, i in specials.items()}
