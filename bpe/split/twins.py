"""Finding the chunks of a text: standard-library `re` twins of the built-in split patterns.

The built-in patterns (``patterns.py``) need the third-party `regex` module for ``\\p{L}``,
``\\p{N}``, ``\\p{Lu}``... and possessive quantifiers, and `regex` is slower than `re`.
Each built-in pattern has a twin for `re` that finds exactly the same chunks on any text:

- every Unicode class is written out as the explicit set of code points that `regex` itself
  puts in it (probed once per process over the Basic Multilingual Plane, so the two engines
  agree whatever Unicode version each was built with); ``\\s`` too, since `re` also counts
  \\x1c-\\x1f as whitespace. `re` tests such a set in constant time for characters up to
  U+FFFF only (above, it scans a list of ranges), so:
- characters above U+FFFF (emoji, rare CJK, mathematical letters) are first replaced by a
  character of the plane with the same class memberships, one for one, and the chunks are
  then cut from the original text at the same offsets;
- ``(?i:'s|...)`` becomes explicit case classes (``[sSſ]``: `regex` folds the long s);
- possessive quantifiers stay where the original has them, and are added where nothing after
  them can make the matcher backtrack into them (what follows always matches, or nothing
  does): fewer steps, the same chunks. Before Python 3.11, whose `re` lacks them, they are
  dropped, which by the same argument changes no chunk.

Equality with `regex` is checked by tests with hypothesis over Unicode text. Patterns that
are not built in run under `regex`, with a check that their chunks cover the text.
"""
from __future__ import annotations

import re
import sys
from functools import lru_cache
from itertools import accumulate
from typing import Callable

import numpy as np

from .patterns import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN, WORD_CUT, coverage_error, line_cut
from .redos import budgeted

# Placeholders: L letters, N numbers, S whitespace, U and W o200k's "upper" and "lower"
# letter classes, and one case class per contraction letter.
_CONTRACTION = r"'(?:[{s}]|[{t}]|[{r}][{e}]|[{v}][{e}]|[{m}]|[{l}][{l}]|[{d}])"
_TEMPLATES = {
    GPT2_PATTERN: r"'s|'t|'re|'ve|'m|'ll|'d| ?+[{L}]++| ?+[{N}]++| ?+[^{S}{L}{N}]++|[{S}]+(?![^{S}])|[{S}]+",
    GPT4_PATTERN: (r"'(?:[{s}{d}{m}{t}]|[{l}][{l}]|[{v}][{e}]|[{r}][{e}])|[^\r\n{L}{N}]?+[{L}]++|[{N}]{{1,3}}+"
                   r"| ?[^{S}{L}{N}]++[\r\n]*+|[{S}]++$|[{S}]*[\r\n]|[{S}]+(?![^{S}])|[{S}]"),
    O200K_PATTERN: (r"[^\r\n{L}{N}]?[{U}]*[{W}]+(?:" + _CONTRACTION + r")?"
                    r"|[^\r\n{L}{N}]?[{U}]+[{W}]*(?:" + _CONTRACTION + r")?"
                    r"|[{N}]{{1,3}}+| ?+[^{S}{L}{N}]++[\r\n/]*+|[{S}]*[\r\n]+|[{S}]+(?![^{S}])|[{S}]+"),
}
_CLASSES = {"L": r"\p{L}", "N": r"\p{N}", "S": r"\s", "U": r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]",
            "W": r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]", **{c: f"(?i:{c})" for c in "sdmtlvre"}}
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_ASTRAL_RUN = re.compile("([\U00010000-\U0010ffff]+)")


@lru_cache(maxsize=None)
def _members() -> dict[str, frozenset[str]]:
    """Each class's characters up to U+FFFF, as `regex` sees them."""
    import regex

    bmp = "".join(map(chr, range(0x10000)))
    return {k: frozenset(regex.findall(expr, bmp)) for k, expr in _CLASSES.items()}


@lru_cache(maxsize=None)
def _code_points() -> dict[str, np.ndarray]:
    """Each class's code points up to U+FFFF (``_members``), sorted: int64."""
    return {k: np.sort(np.fromiter(map(ord, v), dtype=np.int64, count=len(v))) for k, v in _members().items()}


def _set_body(cps: np.ndarray) -> str:
    """The inside of a `re` character set holding exactly the code points ``cps`` (sorted, int64),
    as ranges. In NumPy: a letter class holds 49k characters, too many for a Python loop."""
    if not cps.size:
        return ""
    cut = (np.diff(cps) != 1).nonzero()[0] + 1  # where a run of consecutive code points starts
    firsts = cps[np.concatenate(([0], cut))].tolist()
    lasts = cps[np.concatenate((cut - 1, [cps.size - 1]))].tolist()
    return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in zip(firsts, lasts))


@lru_cache(maxsize=None)
def twin(pattern: str, possessive: bool = sys.version_info >= (3, 11)) -> re.Pattern | None:
    """The compiled `re` twin of a built-in pattern (valid for text up to U+FFFF), else None.

    ``possessive=False`` gives the form for Python 3.10 (whose `re` lacks them), the same chunks."""
    template = _TEMPLATES.get(pattern)
    if template is None:
        return None
    if not possessive:
        template = re.sub(r"([?*+}])\+", r"\1", template)
    return re.compile(template.format(**{k: _set_body(v) for k, v in _code_points().items()}))


# Scripts written without spaces between words, and the punctuation that follows their words
# (ASCII, CJK, fullwidth): the candidates of segment_cut's third kind of cut, as code point ranges.
_UNSPACED = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3))
_PUNCTUATION = ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E), (0x3000, 0x303F), (0xFF00, 0xFF65))


def _spans(ranges) -> np.ndarray:
    return np.concatenate([np.arange(a, b + 1) for a, b in ranges])


@lru_cache(maxsize=None)
def segment_cut(pattern: str) -> re.Pattern | None:
    """The compiled zero-width cut regex of a built-in pattern, or None: its line cuts, a space
    between words, or a CJK letter or number before punctuation, so that a long text without
    newlines (or spaces: Chinese, Japanese) still cuts into blocks.

    A chunk holding a letter or a number ends at the end of a run of letters, marks or numbers, or
    of a contraction (``'s``): a character of none of these (nor ``'``) starts the next chunk under
    every built-in pattern. The candidates are kept only where `regex` classes them so (``_members``;
    the classes U and W hold every letter and mark)."""
    lines = line_cut(pattern)
    if lines is None:
        return None
    cp = _code_points()
    before = _spans(_UNSPACED)
    before = before[np.isin(before, cp["L"]) | np.isin(before, cp["N"])]
    after = _spans(_PUNCTUATION)
    after = after[~np.isin(after, np.concatenate([cp[k] for k in "SUWN"])) & (after != ord("'"))]
    return re.compile(f"{lines.pattern}|{WORD_CUT}|(?<=[{_set_body(before)}])(?=[{_set_body(after)}])")


class _Astral:
    """Replaces characters above U+FFFF by same-class characters of the plane (one for one)."""

    def __init__(self):
        import regex

        self._classes = [regex.compile(expr) for expr in _CLASSES.values()]
        self._members = list(_members().values())
        self._literals = set("'\r\n /").union(*self._members[-8:])  # the contraction letters' classes
        self._rep: dict[tuple, str | None] = {}
        self._table: dict[int, str] = {}  # code point -> its stand-in (a ``str.translate`` table)
        self._known: set[str] = set()  # the characters met, with a stand-in or not
        self._lacking: set[str] = set()  # those without one

    def _stand_in(self, sig: tuple) -> str | None:
        """The lowest non-ASCII character of the plane with memberships ``sig``, if any."""
        if sig not in self._rep:
            self._rep[sig] = None
            for cp in range(0x80, 0x10000):
                c = chr(cp)
                if (not 0xD800 <= cp < 0xE000 and c not in self._literals
                        and tuple(c in m for m in self._members) == sig):
                    self._rep[sig] = c
                    break
        return self._rep[sig]

    def _learn(self, chars: str) -> None:
        """Find the stand-ins of ``chars`` (distinct, not met before): each class's members among
        them by one ``findall``, the memberships read in C (``map``), a stand-in found per
        signature, not per character."""
        members = [set(cls.findall(chars)) for cls in self._classes]
        sigs = list(zip(*(map(m.__contains__, chars) for m in members)))
        rep = {sig: None if any(sig[-8:]) else self._stand_in(sig) for sig in set(sigs)}
        if None in rep.values():  # no stand-in: such a character stays out of the table
            self._lacking.update(c for c, sig in zip(chars, sigs) if rep[sig] is None)
            self._table.update((ord(c), rep[sig]) for c, sig in zip(chars, sigs) if rep[sig] is not None)
        else:
            self._table.update(zip(map(ord, chars), map(rep.__getitem__, sigs)))
        self._known.update(chars)

    def replace(self, text: str) -> str | None:
        """``text`` with its astral characters replaced, or None if one has no stand-in."""
        parts = _ASTRAL_RUN.split(text)  # the runs of astral characters at the odd places
        runs = parts[1::2]
        met = set("".join(runs))
        new = met - self._known
        if new:
            self._learn("".join(new))
        if not met.isdisjoint(self._lacking):
            return None
        parts[1::2] = [run.translate(self._table) for run in runs]
        return "".join(parts)


# CPython stores a str in 1, 2 or 4 bytes per character, the fewest its characters need (PEP 393),
# and sys.getsizeof is then a fixed header plus (length + 1) * that width, or more when an UTF-8
# copy is cached. A size below the 4-byte width proves that no character is above U+FFFF without
# reading the text; None where the sizes do not follow that rule.
_HEADER = sys.getsizeof("\xe9" * 2) - 3
if sys.getsizeof("\U0001f600" * 2) != _HEADER + 12 or sys.getsizeof("\u0400" * 2) != _HEADER + 6:
    _HEADER = None


def has_astral(text: str) -> bool:
    """Whether ``text`` holds a character above U+FFFF (which the twins see through stand-ins)."""
    if text.isascii() or (_HEADER is not None and sys.getsizeof(text) < _HEADER + 4 * (len(text) + 1)):
        return False
    return _ASTRAL.search(text) is not None


@lru_cache(maxsize=None)
def _astral() -> _Astral:
    return _Astral()


def chunk_finder(pattern: str) -> Callable[[str], list[str]]:
    """``findall`` for ``pattern``: the chunks of a text, in order.

    Built-in patterns run as their `re` twin. Any other pattern runs under `regex`, within its
    time budget (``redos.budgeted``: PatternTimeout past it), and each call checks that the
    chunks add up to the whole text, raising PatternCoverageError otherwise, since text between
    two matches would be lost from training and encoding alike.
    """
    import regex

    slow = regex.compile(pattern).findall
    fast = twin(pattern)
    if fast is None:
        slow = budgeted(slow, pattern)

        def checked(text: str) -> list[str]:
            chunks = slow(text)
            if sum(map(len, chunks)) != len(text):
                raise coverage_error(pattern, text)
            return chunks

        return checked
    fast_findall = fast.findall

    def findall(text: str) -> list[str]:
        if not has_astral(text):
            return fast_findall(text)
        stand_in = _astral().replace(text)
        if stand_in is None:
            return slow(text)
        ends = list(accumulate(map(len, fast_findall(stand_in))))
        return list(map(text.__getitem__, map(slice, [0] + ends[:-1], ends)))

    return findall
