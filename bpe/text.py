"""Text and byte helpers that training and encoding both use, so that both see the same pieces.

- ``repair_surrogates``, ``utf8``: str -> the bytes BPE works on, as tiktoken makes them.
- ``alternation``: a regex for special-token text (counting skips it, encoding finds it).
- ``span_words``, ``HEAD_MASK``, ``HASH_MUL``: spans of a byte array read and hashed as
  big-endian 64-bit words, in NumPy (the chunk table's join and the encoder's token table).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import regex

WORD = 8  # bytes in one big-endian word
_ONES = (1 << 64) - 1
# HEAD_MASK[k] keeps the first k bytes of a word (k from 0 to 16: past 8, all of them).
HEAD_MASK = np.array([_ONES ^ (_ONES >> 8 * min(k, WORD)) for k in range(2 * WORD + 1)], dtype=np.uint64)
HASH_MUL = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: 2**64 over the golden ratio


def repair_surrogates(text: str) -> str:
    """``text`` with surrogate pairs joined into their code points and lone surrogates as U+FFFD.

    tiktoken does this to the whole text before splitting it, so a pair that spells a letter
    (``"\\ud835\\udfce"``, a mathematical digit) is split as that letter, not as two punctuation
    characters. Text without surrogates (all valid text) comes back as it is.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def utf8(piece: str) -> bytes:
    """UTF-8 bytes of a piece. Surrogates U+DC80..U+DCFF are the raw bytes that
    ``encode_bytes`` escaped (``surrogateescape``); other lone surrogates (text that skipped
    ``repair_surrogates``) become U+FFFD."""
    try:
        return piece.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return repair_surrogates(piece).encode("utf-8", "surrogateescape")


def alternation(strings: Iterable[str]) -> regex.Pattern:
    """A regex matching any of ``strings``, the longest first so that a prefix never wins."""
    alts = sorted(set(strings), key=len, reverse=True)
    return regex.compile("|".join(regex.escape(s) for s in alts))


def span_words(data: np.ndarray) -> np.ndarray:
    """The big-endian 64-bit word starting at each byte of ``data`` (uint8, (n,)), zero-padded:
    (n + 9,) of dtype '>u8', so that the words at ``i`` and ``i + 8`` hold any span of up to 16
    bytes starting at ``i < n``. A view with a stride of one byte over a padded copy, so that a
    word is read only where it is looked up."""
    padded = np.concatenate([data, np.zeros(2 * WORD, dtype=np.uint8)])
    return np.ndarray(shape=(data.size + 9,), dtype=">u8", buffer=padded, strides=(1,))
