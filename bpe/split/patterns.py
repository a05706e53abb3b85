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

Prose repeats words, not lines. In all three patterns a space can follow another character of a
chunk only in a chunk of whitespace, and nothing looks behind; so a space after a character
that is not whitespace is a cut: no chunk straddles it, the chunk before it ends there whatever
follows (it is no whitespace run, the only kind a lookahead or ``$`` ends), and the chunks from
it on do not depend on what precedes. ``word_splitter`` cuts at each space that has a
non-whitespace character on both sides, so that every middle segment starts with that space
and ends before one: such segments, like lines, can be joined in any order.

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


def resolve_pattern(pattern: str | None, where: str | None = None) -> str:
    """Return the regex string for a pattern name ('gpt2', 'gpt4', 'o200k', ...) or a regex.

    ``None`` means GPT-4's pattern. A string that is not a known name is taken as a regex,
    compiled once to check it (so a typo fails here with a clear message) and checked for
    catastrophic backtracking (``redos.check_pattern``), since patterns come from files users
    download. ``where`` (a file and field) prefixes the errors.
    """
    if pattern is None:
        return GPT4_PATTERN
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a name or a regex string, got {type(pattern).__name__}")
    if pattern in PATTERNS:
        return PATTERNS[pattern]
    if pattern in PATTERNS.values():
        return pattern
    try:
        return _checked(pattern)
    except ValueError as e:
        if where is None:
            raise
        raise ValueError(f"{where}: {e}") from None


def _checked(pattern: str) -> str:
    """``pattern`` if it is a regex that may serve as a split pattern, else ValueError."""
    if not pattern:
        raise ValueError("the split pattern is empty: it matches nothing, so every text would encode "
                         "to no tokens; give a pattern name or a regex that matches every character")
    import regex

    from .redos import check_pattern

    try:
        compiled = regex.compile(pattern)
    except regex.error as e:
        names = ", ".join(sorted(PATTERNS))
        raise ValueError(f"pattern {pattern[:60]!r} is neither a known name ({names}) nor a valid regex: {e}") from None
    if compiled.groups:  # findall would return the groups, not the chunks
        raise ValueError(f"pattern {pattern[:60]!r} has capturing groups; write them as (?:...), since a "
                         "chunk is the whole match")
    check_pattern(pattern)
    return pattern


# Python's `re` treats \x1c-\x1f as whitespace while `regex` does not; since `re`'s \S
# is then the narrower set, a cut chosen with `re` is never wrong, only sometimes missed.
_CUTS = {
    GPT2_PATTERN: re.compile(r"(?<=\S)(?=\n)"),
    GPT4_PATTERN: re.compile(r"(?<=\n)(?=[ \t]*\S)"),
    O200K_PATTERN: re.compile(r"(?<=\n)(?=[ \t]+\S|[^\s/])"),
}


# Text with a character of every kind a split pattern must handle: letters of several
# scripts and cases, marks, digits, punctuation, symbols, every whitespace, controls.
COVERAGE_PROBE = ("Hello, World 123! it's x=a/b; \"q\" \t\r\n\n  \x0b\x0c\x00\x1f\x7f\x85\xa0\u2028\u3000 "
                  "Straße ÉÇ e\u0301 日本語 한국어 العربية हिन्दी ٣ ½ Ⅻ 🎉 \u200b\ufeff\ufffd")


class PatternCoverageError(ValueError):
    """A split pattern skipped characters of a text, which encoding would silently drop."""


def uncovered(pattern: str, text: str) -> tuple[int, str] | None:
    """(position, character) of the first character of ``text`` no match of ``pattern`` covers.

    A pattern that is not built in runs under its time budget (``redos.time_budget``)."""
    import regex

    from .redos import time_budget, timed_out

    pos = 0
    try:
        for m in regex.finditer(pattern, text, timeout=time_budget(len(text))):
            if m.start() > pos:
                return pos, text[pos]
            pos = max(pos, m.end())
    except TimeoutError:
        raise timed_out(pattern, len(text)) from None
    return (pos, text[pos]) if pos < len(text) else None


def coverage_error(pattern: str, text: str) -> PatternCoverageError | None:
    """The error to raise when ``pattern`` does not cover ``text``, else None."""
    gap = uncovered(pattern, text)
    if gap is None:
        return None
    return PatternCoverageError(
        f"split pattern {pattern[:60]!r} does not match every character: {gap[1]!r} at character "
        f"{gap[0]} would be dropped; a split pattern must cover the whole text (end it with an "
        r"alternative such as '|\s+|.' or '|[\s\S]')")


def has_safe_cuts(pattern: str) -> bool:
    """True for the built-in patterns, whose safe cuts are proven (see the module docstring)."""
    return resolve_pattern(pattern) in _CUTS


def safe_cut(text: str, at: int, pattern: str) -> int:
    """The first position ``p >= at`` where ``text`` may be cut for ``pattern``, else ``len(text)``.

    Pre-tokenizing (or encoding) ``text[:p]`` and ``text[p:]`` apart gives exactly the chunks
    (the ids) of the whole ``text``, so long texts can be cut into pieces, encoded in any
    order or in parallel, and joined. Position 0 is always a cut. Under a pattern that is not
    built in no cut is provably safe, and ``len(text)`` comes back for any ``at > 0``.
    """
    if at <= 0:
        return 0
    cut = _CUTS.get(resolve_pattern(pattern))
    m = cut.search(text, at) if cut is not None and at < len(text) else None
    return m.start() if m else len(text)


# A space between two non-whitespace characters starts a chunk under every built-in pattern (no
# chunk ends in a lone space after a non-space): a cut before it is safe too, as word_splitter's.
# twins.segment_cut adds the cuts that need `regex`'s classes.
WORD_CUT = r"(?<=\S)(?= \S)"


def line_cut(pattern: str) -> re.Pattern | None:
    """The compiled zero-width line cut regex of a built-in pattern, or None."""
    return _CUTS.get(pattern)


# Spaces beside whitespace (`re`'s, the wider set: a cut missed, never one too many), which are
# no cuts; word_splitter stands GLUE_CHAR in for them, so that str.split(" ") cuts at the others.
_GLUED_SPACE = re.compile(r" (?:(?=\s)|(?<=\s ))")
GLUE_CHAR = "\x00"


def word_splitter(pattern: str) -> Callable[[str], list[str]] | None:
    """For the built-in patterns, a function cutting a text that holds no GLUE_CHAR at the spaces
    between two non-whitespace characters, dropping those spaces: ``f(text)`` is the parts between
    them, with GLUE_CHAR in place of every other space. Each part but the first, preceded by a
    space (and GLUE_CHAR put back), is a segment; None for other patterns."""
    if pattern not in _CUTS:
        return None
    glue = _GLUED_SPACE.sub

    def split(text: str) -> list[str]:
        return glue(GLUE_CHAR, text).split(" ")

    return split


def segment_splitter(pattern: str) -> Callable[[str], list[str]] | None:
    """A function cutting text into independently pre-tokenizable segments, or None.

    For the built-in patterns, ``"".join(f(text)) == text`` and the chunks of
    ``text`` are the concatenation of the chunks of each segment.
    """
    cut = _CUTS.get(pattern)
    return None if cut is None else cut.split
