"""Training: chunk counts as arrays, the form the merge learner reads and counting processes send.

A ``ChunkTable`` holds distinct chunks as their UTF-8 bytes end to end, with each chunk's byte
length and count. Training reads the bytes directly (``merge_learner``), and a counting process
sends its table as three arrays, which unpickle far faster than a dict of str chunks and need no
encoding again for the merges. ``join`` sums the counts of chunks that several tables hold, in NumPy.
"""
from __future__ import annotations

from itertools import compress
from typing import Iterable, Mapping

import numpy as np

from ..radix import radix_order
from ..text import HASH_MUL, HEAD_MASK, WORD, span_words, utf8

_MIDDLE_WORDS = 32  # words compared in NumPy rounds; a chunk longer still is compared as bytes
_MIX = (HASH_MUL, np.uint64(0xC2B2AE3D27D4EB4F))  # the second: xxHash's 64-bit prime 2


class ChunkTable:
    """Distinct chunks and their counts: data (L,) uint8, their UTF-8 bytes end to end; sizes (C,)
    int64, each one's byte length (at least 1); counts (C,) int64, how often each occurs (at
    least 1). ``len`` is the number of chunks."""

    __slots__ = ("data", "sizes", "counts")

    def __init__(self, data: np.ndarray, sizes: np.ndarray, counts: np.ndarray):
        self.data, self.sizes, self.counts = data, sizes, counts

    def __reduce__(self):
        return ChunkTable, (self.data, self.sizes, self.counts)

    def __len__(self) -> int:
        return int(self.sizes.size)

    def total(self) -> int:
        """Chunks counted, repeats included."""
        return int(self.counts.sum())

    @classmethod
    def of(cls, chunk_counts: Mapping[str | bytes, int]) -> "ChunkTable":
        """The table of ``{chunk: count}`` (str chunks as UTF-8; U+DC80..U+DCFF as the raw bytes
        they escape), without empty chunks and counts below one.

        str chunks are encoded in one call, their byte lengths read off their code points (one
        encode per chunk is the slow part of a table of many chunks).
        """
        keys = list(chunk_counts)
        try:
            counts = np.fromiter(chunk_counts.values(), dtype=np.int64, count=len(keys))
        except OverflowError:
            raise ValueError("a chunk's count is 2**63 or more; counts are held as int64") from None
        text, lengths = _joined(keys)  # text None: bytes chunks among them
        ok = (counts > 0) & (lengths > 0)
        if not ok.all():
            stale = text is not None and bool((lengths[counts <= 0] > 0).any())  # it holds a chunk dropped
            keys, counts, lengths = list(compress(keys, ok.tolist())), counts[ok], lengths[ok]
            if stale:
                text = "".join(keys)
        data = None
        if text is not None:
            try:
                data = text.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # lone surrogates: utf8() repairs each chunk on its own
                pass
        if data is None:
            parts = [utf8(k) if isinstance(k, str) else bytes(k) for k in keys]
            data, sizes = b"".join(parts), np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        elif len(data) == len(text):
            sizes = lengths
        else:
            cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            width = (cp >= 0x80).view(np.uint8) + 1  # a byte a character: an eighth of the memory
            width += cp >= 0x800
            width += cp >= 0x10000
            width[(cp >= 0xDC80) & (cp <= 0xDCFF)] = 1  # escaped raw bytes (surrogateescape)
            sizes = np.add.reduceat(width, np.cumsum(lengths) - lengths, dtype=np.int64)
        return cls(np.frombuffer(data, dtype=np.uint8), sizes, counts)

    def by_prefix(self) -> "ChunkTable":
        """The same chunks ordered by their first 8 bytes after a leading space, zero-padded (ties
        in their order here). Chunks of one script, and of one word's start, then lie side by side
        (" word" beside "word"), and so do the positions of most pairs in the merge learner's
        arrays: the scattered reads of a merge stay within fewer cache lines and pages. Training
        learns the same merges in any order."""
        if len(self) < 2:
            return self
        starts = np.cumsum(self.sizes) - self.sizes
        space = self.data[starts] == 0x20
        key = _heads(span_words(self.data), starts + space, self.sizes - space)
        order = radix_order(key, 8 * WORD)
        sizes = self.sizes[order]
        # each byte's place in the old data: its chunk's old start, plus its offset in the chunk
        moved = np.cumsum(sizes) - sizes - starts[order]
        src = np.arange(self.data.size) - np.repeat(moved, sizes)
        return ChunkTable(self.data[src], sizes, self.counts[order])

    def keep(self, mask: np.ndarray) -> "ChunkTable":
        """The chunks where ``mask`` (C,) bool is true."""
        if mask.all():
            return self
        return ChunkTable(self.data[np.repeat(mask, self.sizes)], self.sizes[mask], self.counts[mask])

    @staticmethod
    def join(tables: Iterable["ChunkTable"]) -> "ChunkTable":
        """One table of several: a chunk that several hold once, with the sum of their counts."""
        tables = [t for t in tables if len(t)]
        if len(tables) <= 1:
            return tables[0] if tables else ChunkTable(np.zeros(0, np.uint8), np.zeros(0, np.int64),
                                                       np.zeros(0, np.int64))
        every = ChunkTable(*(np.concatenate([getattr(t, f) for t in tables]) for f in ChunkTable.__slots__))
        stand = _stand_ins(every.data, every.sizes)
        again = stand != np.arange(stand.size)
        counts = every.counts.copy()
        np.add.at(counts, stand[again], counts[again])
        every.counts = counts
        return every.keep(~again)


_SEP = "\uffff"  # a noncharacter, rare in text: a chunk that holds it costs a second pass


def _joined(keys: list) -> tuple[str | None, np.ndarray]:
    """The chunks end to end (None if some are bytes) and each one's length, (n,) int64. Each chunk
    is read once: a count's chunks lie scattered in memory, and a second pass over them
    (``map(len, keys)``) costs as much as the join."""
    if not keys:
        return "", np.zeros(0, dtype=np.int64)
    try:
        text = _SEP.join(keys)
    except TypeError:
        return None, np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    if text.count(_SEP) != len(keys) - 1:
        return "".join(keys), np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    cuts = np.flatnonzero(cp == ord(_SEP))
    return text.replace(_SEP, ""), np.diff(cuts, prepend=-1, append=cp.size) - 1


def run_starts(k: np.ndarray) -> np.ndarray:
    """Where each run of equal values of the sorted ``k`` starts: (n,) bool, whether each differs
    from the one before (the first: True; an empty ``k``, none)."""
    out = np.empty(k.size, dtype=bool)  # not np.ones, a Python function: a merge calls this
    out[:1] = True
    np.not_equal(k[1:], k[:-1], out=out[1:])
    return out


def _heads(words: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The first 8 bytes (fewer where ``sizes`` is less, zero-padded) of the spans at ``starts`` as
    big-endian uint64 (``words``: ``span_words`` of their data), so that they order as the bytes do."""
    return np.take(words, starts) & HEAD_MASK[np.minimum(sizes, WORD)]


def _stand_ins(data: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """For each chunk of a table, the chunk that stands for all with its bytes (one of them, which
    stands for itself): (C,) int64. Chunks are grouped by a key of their size and first and last
    8 bytes, which is all of a chunk of up to 16; longer ones are compared with the chunk that
    leads their group byte by byte, and the rare chunks that differ from it are matched by a dict."""
    starts = np.cumsum(sizes) - sizes
    words = span_words(data)
    head = _heads(words, starts, sizes)
    tail = np.where(sizes > WORD, words[np.maximum(starts + sizes - WORD, 0)], 0).astype(np.uint64)
    key = ((head * _MIX[0]) ^ (tail * _MIX[1]) ^ sizes.astype(np.uint64)).view(np.int64)
    order = np.argsort(key)  # any chunk of a group may lead it
    k = key[order]
    # Only the chunks after the first of their group (in this order) are compared, with that first
    # one: most chunks are alone in their group, and reading them all would double the join.
    starting = run_starts(k)
    later, lead = np.flatnonzero(~starting), np.flatnonzero(starting)  # lead: where each group starts
    member, leader = order[later], order[lead[np.searchsorted(lead, later, side="right") - 1]]
    same = (sizes[member] == sizes[leader]) & (head[member] == head[leader]) & (tail[member] == tail[leader])
    # Longer chunks: the bytes between, 8 at a time (the last word may overlap the tail's bytes)
    check = np.flatnonzero(same & (sizes[member] > 2 * WORD))
    a, b, n = starts[member[check]], starts[leader[check]], sizes[member[check]]
    at = WORD
    while check.size and at < _MIDDLE_WORDS * WORD:
        differ = words[a + at] != words[b + at]
        same[check[differ]] = False
        at += WORD
        go = ~differ & (at < n - WORD)
        check, a, b, n = check[go], a[go], b[go], n[go]
    raw = data.tobytes()
    for i, x, y, m in zip(check.tolist(), a.tolist(), b.tolist(), n.tolist()):  # longer still: rare
        same[i] = raw[x:x + m] == raw[y:y + m]
    stand = np.arange(sizes.size)
    stand[member[same]] = leader[same]
    seen: dict[bytes, int] = {}
    for m in member[~same].tolist():  # the first of equal chunks met stands for them
        a = int(starts[m])
        stand[m] = seen.setdefault(raw[a:a + int(sizes[m])], m)
    return stand
