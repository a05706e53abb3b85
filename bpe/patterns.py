"""Split patterns (pre-tokenization regexes) and safe places to cut text.

A split pattern cuts text into chunks before BPE runs; merges never cross a chunk
boundary. The strings are the ones the ecosystem uses, byte for byte:

- ``GPT2_PATTERN``: GPT-2's original pattern (also what Hugging Face's ByteLevel
  pre-tokenizer uses; equivalent to tiktoken's r50k/p50k string).
- ``GPT4_PATTERN``: tiktoken's cl100k_base string, possessive quantifiers included.
- ``O200K_PATTERN``: tiktoken's o200k_base string.

Cut points. Pre-tokenizing a long text is the slow part of training and encoding,
and code repeats whole lines. ``segment_splitter`` returns, for the built-in
patterns, a function that cuts text into segments at positions that are provably
chunk boundaries of that pattern, so that running the pattern on each segment
gives exactly the chunks of the whole text; repeated segments are then
pre-tokenized once. The proofs, per pattern (a chunk never straddles the cut, and
no lookahead or ``$`` at the end of the left segment changes its chunks):

- GPT-2: cut before a newline that follows a non-space character. No alternative
  continues a non-space chunk with a newline.
- cl100k: cut after a newline followed by optional spaces/tabs and a non-space.
  Whitespace runs that hold newlines end at their last newline (``\\s*[\\r\\n]``, or
  ``\\s++$`` on the left segment alone: the same chunk); punctuation takes trailing
  newlines only (``[\\r\\n]*+``).
- o200k: as cl100k, except a newline directly followed by ``/`` (punctuation may
  take ``[\\r\\n/]*``).

Unknown patterns get no cuts (the whole text is one segment).
"""
from __future__ import annotations

import re
from typing import Callable

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

GPT4_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""

O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)

PATTERNS: dict[str, str] = {"gpt2": GPT2_PATTERN, "gpt4": GPT4_PATTERN, "o200k": O200K_PATTERN}
# Aliases users may know from tiktoken.
PATTERNS["cl100k"] = GPT4_PATTERN
PATTERNS["cl100k_base"] = GPT4_PATTERN
PATTERNS["r50k"] = GPT2_PATTERN
PATTERNS["o200k_base"] = O200K_PATTERN


def resolve_pattern(pattern: str | None) -> str:
    """Return the regex string for a pattern name ('gpt2', 'gpt4', 'o200k', ...) or a regex.

    ``None`` means GPT-4's pattern. A string that is not a known name is taken as a
    regex and compiled once to check it, so a typo fails here with a clear message.
    """
    if pattern is None:
        return GPT4_PATTERN
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a name or a regex string, got {type(pattern).__name__}")
    if pattern in PATTERNS:
        return PATTERNS[pattern]
    import regex

    try:
        regex.compile(pattern)
    except regex.error as e:
        names = ", ".join(sorted(PATTERNS))
        raise ValueError(f"pattern {pattern!r} is neither a known name ({names}) nor a valid regex: {e}") from None
    return pattern


# Python's `re` treats \x1c-\x1f as whitespace while `regex` does not; since `re`'s \S
# is then the narrower set, a cut chosen with `re` is never wrong, only sometimes missed.
_CUTS = {
    GPT2_PATTERN: re.compile(r"(?<=\S)(?=\n)"),
    GPT4_PATTERN: re.compile(r"(?<=\n)(?=[ \t]*\S)"),
    O200K_PATTERN: re.compile(r"(?<=\n)(?=[ \t]+\S|[^\s/])"),
}


# ASCII-only equivalents of the built-in patterns for the standard library's `re`, which
# runs these about 3x faster than `regex` runs the Unicode ones. On text that is pure
# ASCII they give exactly the same chunks (checked by tests with hypothesis): \p{L} is
# [A-Za-z] there, \p{N} is [0-9], \s is the six characters below (not \x1c-\x1f, which
# `re` would count), possessive quantifiers are dropped where nothing after them could
# make the matcher backtrack, and \p{Lu}... are [A-Z] or [a-z].
_W = r"\t\n\x0b\x0c\r "
_ASCII = {
    GPT2_PATTERN: (
        rf"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^{_W}A-Za-z0-9]+|[{_W}]+(?![^{_W}])|[{_W}]+"""
    ),
    GPT4_PATTERN: (
        rf"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{{1,3}}| ?[^{_W}A-Za-z0-9]+[\r\n]*"""
        rf"""|[{_W}]+$|[{_W}]*[\r\n]|[{_W}]+(?![^{_W}])|[{_W}]"""
    ),
    O200K_PATTERN: (
        r"""[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
        r"""|[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
        rf"""|[0-9]{{1,3}}| ?[^{_W}A-Za-z0-9]+[\r\n/]*|[{_W}]*[\r\n]+|[{_W}]+(?![^{_W}])|[{_W}]+"""
    ),
}


def chunk_finder(pattern: str) -> Callable[[str], list[str]]:
    """``findall`` for the pattern: the `re` ASCII twin on ASCII text, `regex` otherwise."""
    import regex

    slow = regex.compile(pattern).findall
    twin = _ASCII.get(pattern)
    if twin is None:
        return slow
    fast = re.compile(twin, re.ASCII).findall

    def findall(text: str) -> list[str]:
        return fast(text) if text.isascii() else slow(text)

    return findall


def segment_cut(pattern: str) -> re.Pattern | None:
    """The compiled zero-width cut regex of a built-in pattern, or None."""
    return _CUTS.get(pattern)


def segment_splitter(pattern: str) -> Callable[[str], list[str]] | None:
    """A function cutting text into independently pre-tokenizable segments, or None.

    For the built-in patterns, ``"".join(f(text)) == text`` and the chunks of
    ``text`` are the concatenation of the chunks of each segment.
    """
    cut = _CUTS.get(pattern)
    return None if cut is None else cut.split
