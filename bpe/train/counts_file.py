"""Training from shards, chunk-count files: what ``bpe count`` writes for one shard and
``bpe train --counts`` merges.

Training needs only how often each distinct pre-tokenized chunk occurs, and counts add up:
the counts of shards counted apart (by a shell loop, a cluster job array, MPI ranks) sum to
the counts of their union, so the merged counts train the same tokenizer as one run over all
shards. Memory is bounded by the number of distinct chunks, not by the corpus size.

One JSON object per file::

    {"format": "bpe-chunk-counts", "version": 1, "pattern": "<regex>",
     "special_tokens": ["<|endoftext|>"],        # they split documents, so they shape the counts
     "chunks": {"hello": 12, " world": 7, ...}}

The special tokens keep the order given, which gives their ids when training from the files (files
written before kept them sorted; files agree whatever their order). The text the counts stand for
stays below 2**53 bytes over all files, where every sum of counts training makes is exact.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Callable

from ..files.atomic import atomic_write_text
from ..files.corpus import expand_inputs
from ..files.jsonio import read_json
from ..split.patterns import resolve_pattern
from .chunk_counter import add_counts

FORMAT = "bpe-chunk-counts"
MAX_TEXT = 1 << 53  # bytes counted, over all files: the early merges sum pair counts as float64
VERSION = 1


def save_counts(path: str | os.PathLike, counts: Mapping[str, int], pattern: str,
                special_tokens: Iterable[str] = ()) -> None:
    """Write chunk counts atomically (a killed writer leaves no half file)."""
    d = {"format": FORMAT, "version": VERSION, "pattern": pattern,
         "special_tokens": list(special_tokens), "chunks": dict(counts)}
    atomic_write_text(path, json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n")


def read_counts(path: str | os.PathLike) -> tuple[dict[str, int], str, list[str]]:
    """(chunk counts, pattern, special tokens) of one file; a malformed file is a ValueError
    that names it."""
    d = read_json(path, "chunk-count file")
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"{path}: not a chunk-count file written by `bpe count` (field 'format' "
                         f"should be {FORMAT!r})")
    if d.get("version") != VERSION:
        raise ValueError(f"{path}: field 'version' is {json.dumps(d.get('version'))[:40]}; this code reads {VERSION}")
    pattern, specials, chunks = d.get("pattern"), d.get("special_tokens", []), d.get("chunks")
    if not isinstance(pattern, str):
        raise ValueError(f"{path}: field 'pattern' is missing or not a string")
    resolve_pattern(pattern, f"{path}: field 'pattern'")  # a pattern from a file is checked (split.redos)
    if not (isinstance(specials, list) and all(isinstance(s, str) and s for s in specials)):
        raise ValueError(f"{path}: field 'special_tokens' must be a list of non-empty strings")
    if not isinstance(chunks, dict):
        raise ValueError(f"{path}: field 'chunks' must be an object mapping chunk to count")
    for c, n in chunks.items():
        if not c:
            raise ValueError(f"{path}: an empty chunk (with count {str(n)[:40]}); chunks are non-empty")
        if type(n) is not int or not 0 < n < MAX_TEXT:
            raise ValueError(f"{path}: chunk {c[:40]!r} has count {str(n)[:40]}; counts are ints from 1 to "
                             f"2**53 - 1")
    return chunks, pattern, specials


def count_file_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Count files named by paths and globs (``'counts.*'``), sorted, each once."""
    files = expand_inputs(paths, skip_binary=False)
    if not files:
        raise FileNotFoundError(f"no chunk-count files in {paths!r}")
    return sorted(set(files))


def _text_bytes(counts: Mapping[str, int]) -> int:
    """The UTF-8 bytes of the text that chunk counts stand for (each chunk times its count; a lone
    surrogate as 3): more than any pair's count, and than any sum of counts training makes."""
    return sum(n * (len(c) if c.isascii() else len(c.encode("utf-8", "surrogatepass"))) for c, n in counts.items())


def _named(files: list[Path]) -> str:
    """The first few files, and how many more (an error about 10,000 shards stays one line)."""
    shown = ", ".join(map(str, files[:3]))
    return shown if len(files) <= 3 else f"{shown} and {len(files) - 3:,} more"


def load_counts(paths, log: Callable[[str], None] = lambda msg: None) -> tuple[Counter, str, list[str]]:
    """The summed counts of several files, with their common pattern and special tokens (in the
    first file's order).

    Files made with another pattern or other special tokens are refused, naming both files:
    their counts would not add up to the counts of one run. So are files whose counts together
    stand for 2**53 bytes or more (``MAX_TEXT``), naming them.
    """
    total: Counter[str] = Counter()
    first = None
    files = count_file_paths(paths)
    for f in files:
        chunks, pattern, specials = read_counts(f)
        if first is None:
            first = (f, pattern, specials)
        elif (pattern, sorted(specials)) != (first[1], sorted(first[2])):
            what = "split pattern" if pattern != first[1] else "special tokens"
            raise ValueError(f"{f} and {first[0]} were counted with different {what}; "
                             "counts merge only under the same pattern and special tokens")
        add_counts(total, chunks)
    text = _text_bytes(total)
    if text >= MAX_TEXT:
        raise ValueError(f"the count files {_named(files)} stand for {text:,} bytes of text, 2**53 or more: "
                         "training sums counts exactly only below that")
    log(f"{len(total):,} distinct chunks ({sum(total.values()):,} in all) from {len(files)} count file(s)")
    return total, first[1], first[2]
