"""The incremental merge learner: chunk counts in, merges out.

Data structures (a corpus of C distinct chunks):

- ``words[w]``: chunk ``w`` as a ``str`` holding one character per token, ``chr(id)``
  (bytes at first), so ``str.find`` and ``str.replace`` scan and merge in C;
  ``counts[w]`` is how often the chunk occurs. Chunks of one byte hold no pair and
  are dropped.
- ``pairs[p]``: how often pair ``p`` occurs, weighted by chunk counts. A pair is the
  2-character string of its tokens, which orders like the tuple ``(left, right)``.
- ``where[p]``: the chunks that held the pair when it was added, once per occurrence (a
  superset: chunks that lost it since are skipped by a ``str.find`` when scanned). A
  merge visits each listed chunk once (``dict.fromkeys``): a long chunk is listed once
  per occurrence, and re-scanning it for every stale duplicate made training quadratic in
  the chunk's length.
- a heap of ints ``-count * 2**42 + left * 2**21 + right``: the smallest entry is the
  pair with the highest count, and among equal counts the smallest ``(left, right)``.
  Entries are not updated when a count drops; a popped entry whose count is stale is
  pushed back with its current count (lazy invalidation). This is exact because a
  pair's count only grows in the merge that creates one of its two tokens, and those
  pairs are pushed after that merge.

Tie rule (documented, machine independent): the next merge is the pair with the highest
count; among equal counts, the pair whose ``(left_id, right_id)`` is lexicographically
smallest. Within a chunk, occurrences are merged left to right without overlap
(``a a a`` with pair ``(a, a)`` becomes ``aa a``).

A merge of pair ``(a, b)`` into ``c`` visits only the chunks in ``where[(a, b)]``; for
each occurrence it moves the counts of the neighbour pairs ``(x, a) -> (x, c)`` and
``(b, y) -> (c, y)``.

The first merges, whose pairs occur in tens of thousands of chunks, run in NumPy instead
(arraymerge.py: the same counts and merges, a few array passes per merge); the state is handed
to the loop above once the merges' pairs occur in few places.
"""
from __future__ import annotations

import heapq
import sys
from collections import defaultdict
from typing import Callable, Mapping


from .arraymerge import ArrayMerges
from .bytepair import utf8
from .nogc import gc_paused

# Merges run in NumPy (arraymerge.py) until their pairs are listed at fewer than this many
# positions on average (a running mean over about 64 merges); the Python loop runs the rest.
# An array pass costs microseconds however few the positions.
ARRAY_MIN = 100


def _words(chunk_counts: Mapping[str | bytes, int]) -> tuple[list[str], list[int]]:
    """Chunks as strs of one character per token (chr(id)), and their counts.

    str.find and str.replace then scan and merge in C, and a pair is the 2-character string of
    its two tokens, which compares like the tuple (left_id, right_id). Chunks of one byte hold
    no pair and are dropped.
    """
    words: list[str] = []
    counts: list[int] = []
    for chunk, n in chunk_counts.items():
        b = utf8(chunk) if isinstance(chunk, str) else bytes(chunk)
        if len(b) >= 2 and n > 0:
            words.append(b.decode("latin-1"))
            counts.append(int(n))
    return words, counts


# The pair index is a list per pair, and the loop makes more: none can form a cycle, and the
# collector's scans of them were 12% of training 50 MB of code.
@gc_paused()
def train_merges(
    chunk_counts: Mapping[str | bytes, int],
    n_merges: int,
    min_frequency: int = 1,
    progress: Callable[[int], None] | None = None,
    array_min: float | None = None,
) -> list[tuple[int, int]]:
    """Learn up to ``n_merges`` merges from distinct chunks and their counts.

    Returns a list of ``(left_id, right_id)``; merge ``k`` creates id ``256 + k``. Fewer
    merges come back when no pair occurs ``min_frequency`` times any more. ``array_min``
    (default ARRAY_MIN) chooses where the merges leave NumPy for the Python loop: 0 never,
    ``math.inf`` at once; the merges are the same.
    """
    if n_merges <= 0:
        return []
    if 256 + n_merges > sys.maxunicode + 1:
        raise ValueError(f"at most {sys.maxunicode + 1 - 256} merges are supported, asked for {n_merges}")
    min_frequency = max(1, int(min_frequency))
    words, counts = _words(chunk_counts)
    early: ArrayMerges | None = ArrayMerges(words, counts)
    handed = early  # the early index, read by the Python loop once it runs the merges
    pairs = early.pairs
    where: defaultdict[str, list[int]] = defaultdict(list)
    pget = pairs.get
    array_min = ARRAY_MIN if array_min is None else array_min
    mean = None  # the running mean of the merges' listed positions

    # Heap entries are ints: -count * 2**42 + left * 2**21 + right (ids < 2**21), so the
    # smallest entry is the highest count, then the smallest (left, right).
    heap = [(ord(p[0]) << 21 | ord(p[1])) - (c << 42) for p, c in pairs.items() if c >= min_frequency]
    heapq.heapify(heap)
    heappop, heappush = heapq.heappop, heapq.heappush
    MASK = (1 << 21) - 1

    # The hot loop of training, one function on purpose: its names stay fast locals.
    merges: list[tuple[int, int]] = []
    while heap and len(merges) < n_merges:
        v = heappop(heap)
        key = v & ((1 << 42) - 1)
        a = chr(key >> 21)
        b = chr(key & MASK)
        ab = a + b
        cur = pget(ab, 0)
        if cur != -(v >> 42):  # stale entry: the count dropped since it was pushed
            if cur >= min_frequency:
                heappush(heap, key - (cur << 42))
            continue
        c = chr(256 + len(merges))
        merges.append((ord(a), ord(b)))
        if early is not None:
            n_listed = early.listed(key)
            mean = n_listed if mean is None else mean + (n_listed - mean) / 64
            if mean >= array_min:
                touched = early.merge(key, ord(c))
                listed = ()
            else:
                words, early = early.words(), None
        if early is None:
            listed = where.pop(ab, [])
            listed += handed.chunks_of(key)
            touched = set()
            tadd = touched.add
        # Each chunk once: a chunk holding the pair k times is listed k times.
        for wi in dict.fromkeys(listed):
            w = words[wi]
            i = w.find(ab)
            if i < 0:
                continue  # the chunk lost this pair since it was indexed
            n = counts[wi]
            last = len(w) - 2
            end = -1  # where the previous occurrence in this chunk ended
            while i >= 0:
                if i > 0:
                    x = c if end == i else w[i - 1]
                    k = x + a
                    pairs[k] -= n
                    k = x + c
                    pairs[k] += n
                    tadd(k)
                    where[k].append(wi)
                if i < last:
                    y = w[i + 2]
                    k = b + y
                    pairs[k] -= n
                    k = c + y
                    pairs[k] += n
                    tadd(k)
                    where[k].append(wi)
                end = i + 2
                i = w.find(ab, end)
            words[wi] = w.replace(ab, c)
        del pairs[ab]
        for k in touched:
            n = pairs[k]
            if n >= min_frequency:
                heappush(heap, (ord(k[0]) << 21 | ord(k[1])) - (n << 42))
        if progress is not None:
            progress(len(merges))
    return merges
