"""Training, the merge learner: chunk counts in, merges out (incremental, in Python).

Data structures (a corpus of C distinct chunks):

- ``words[w]``: chunk ``w`` as a ``str`` holding one character per token, ``chr(id)``
  (bytes at first), so ``str.find`` and ``str.replace`` scan and merge in C;
  ``counts[w]`` is how often the chunk occurs. Chunks of one byte hold no pair and
  are dropped.
- ``pairs[p]``: how often pair ``p`` occurs, weighted by chunk counts (pairs made fewer times
  than a floor are left out until it is lowered: see train_merges). A pair is the int
  ``left * 2**21 + right`` (ids < 2**21), which orders like the tuple ``(left, right)``.
- ``made_in[t]``: the chunks token ``t`` was made in. A pair forms only where the newer of
  its two tokens is made, so the chunks that may hold a pair are those of its newer token
  (either token's list is a superset: the shorter is read); a chunk that lost it since is
  skipped by a ``str.find``. Pairs of older tokens come from the NumPy phase below.
- a heap of ints ``-count * 2**42 + pair``: the smallest entry is the
  pair with the highest count, and among equal counts the smallest ``(left, right)``.
  Entries are not updated when a count drops; a popped entry whose count is stale is
  pushed back with its current count (lazy invalidation). This is exact because a
  pair's count only grows in the merge that creates one of its two tokens, and those
  pairs are pushed after that merge.

Tie rule (documented, machine independent): the next merge is the pair with the highest
count; among equal counts, the pair whose ``(left_id, right_id)`` is lexicographically
smallest. Within a chunk, occurrences are merged left to right without overlap
(``a a a`` with pair ``(a, a)`` becomes ``aa a``).

A merge of pair ``(a, b)`` into ``c`` visits only the chunks that may hold it, each once;
for each occurrence it moves the counts of the neighbour pairs ``(x, a) -> (x, c)`` and
``(b, y) -> (c, y)``. One long chunk is visited once per merge, however often it holds the
pair (listing it once per occurrence made training quadratic in the chunk's length).

The first merges, whose pairs occur in tens of thousands of chunks, run in NumPy instead
(``early_merges``: the same counts and merges, a few array passes per merge); the state is handed
to the loop above once the merges' pairs occur in few places.
"""
from __future__ import annotations

import heapq
import sys
from typing import Callable, Mapping

import numpy as np

from ..nogc import gc_paused
from .chunk_table import ChunkTable
from .early_merges import MASK, SHIFT, ArrayMerges, word_pairs

# Merges run in NumPy (early_merges.py) until their pairs start at fewer than this many
# positions on average (a running mean over about 64 merges); the Python loop runs the rest.
# An array pass costs microseconds however few the positions.
ARRAY_MIN = 15
# Pairs counted fewer times are not kept at first (train_merges): the floor, lowered by DROP
# each time no pair above it is left.
PUSH_MIN = 64
DROP = 4


def _lowered(floor: int, min_frequency: int, pairs: dict[int, int], keys: np.ndarray, counts: np.ndarray) -> int:
    """The floor lowered by DROP until a pair reaches it (or to min_frequency), with ``pairs``
    refilled from every pair counted again (``keys``, ``counts``: int64) that reaches it."""
    best = int(counts.max(initial=0))
    while floor > min_frequency and floor > best:
        floor = max(min_frequency, floor // DROP)
    keep = counts >= floor
    pairs.clear()
    pairs.update(zip(keys[keep].tolist(), counts[keep].tolist()))
    return floor


# The loop makes a list and a dict per merge and the pair counts' dict holds 100,000s of ints:
# none can form a cycle, so the collector's scans of them would be wasted.
@gc_paused()
def train_merges(
    chunk_counts: Mapping[str | bytes, int] | ChunkTable,
    n_merges: int,
    min_frequency: int = 1,
    progress: Callable[[int], None] | None = None,
    array_min: float | None = None,
) -> list[tuple[int, int]]:
    """Learn up to ``n_merges`` merges from distinct chunks and their counts (``{chunk: count}``
    or a ChunkTable).

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
    table = chunk_counts if isinstance(chunk_counts, ChunkTable) else ChunkTable.of(chunk_counts).by_prefix()
    table = table.keep(table.sizes >= 2)  # a chunk of one byte holds no pair
    data, sizes, weights = table.data, table.sizes, table.counts
    counts = weights.tolist()
    early: ArrayMerges | None = ArrayMerges(data, sizes, weights)
    handed = early  # the early index, read by the Python loop once it runs the merges
    pairs = early.pairs
    made_in: dict[int, list[int]] = {}  # token made by the Python loop -> the chunks it was made in
    words: list[str] = []  # the chunks as strs, from the hand-over on
    pget = pairs.get
    array_min = ARRAY_MIN if array_min is None else array_min
    mean = None  # the running mean of the merges' numbers of starts

    # Heap entries are ints -count * 2**COUNT + pair (a pair's key takes 2 * SHIFT bits), so
    # the smallest entry is the highest count, then the smallest (left, right).
    COUNT = 2 * SHIFT
    heappop, heappush, heapreplace = heapq.heappop, heapq.heappush, heapq.heapreplace

    def heap_of(least: int) -> list[int]:
        h = [k - (n << COUNT) for k, n in pairs.items() if n >= least]
        heapq.heapify(h)
        return h

    # Pairs counted below `floor` are neither pushed nor kept: most pairs a merge makes are rare,
    # and a dict of fewer pairs is faster to read. A pair's count only grows in the merge that
    # makes it, so one below the floor stays there; once no pair above it is left, the floor is
    # lowered, every pair counted again and the heap rebuilt.
    floor = max(min_frequency, PUSH_MIN)
    heap = heap_of(floor)

    # The hot loop of training, one function on purpose: its names stay fast locals.
    merges: list[tuple[int, int]] = []
    while len(merges) < n_merges:
        if floor > min_frequency and (not heap or heap[0] >> COUNT > -floor):
            counted = early.live_pairs() if early is not None else word_pairs(words, weights)
            floor = _lowered(floor, min_frequency, pairs, *counted)
            heap = heap_of(floor)
        if not heap:
            break
        v = heap[0]
        key = v & ((1 << COUNT) - 1)
        cur = pget(key, 0)
        if cur != -(v >> COUNT):  # stale entry: the count dropped since it was pushed
            if cur >= floor:  # its place taken by its current count: one sift, not a pop and a push
                heapreplace(heap, key - (cur << COUNT))
            else:
                heappop(heap)
            continue
        heappop(heap)
        A, B, C = key >> SHIFT, key & MASK, 256 + len(merges)
        merges.append((A, B))
        if early is not None:
            at = early.starts(key)
            mean = len(at) if mean is None else mean + (len(at) - mean) / 64
            if mean >= array_min:
                grown, n = early.merge(key, C, at, floor)
                # in Python ints: in int64, counts from 2**21 on would overflow the entries
                for k, n in zip(grown, n):
                    heappush(heap, k - (n << COUNT))
                listed, new = (), {}
            else:  # the Python loop takes over from this merge on
                words, early = early.hand_over(), None
                listed = handed.chunks_of(key)
        else:
            # A pair forms where the newer of its tokens is made: a pair holding a token of the
            # loop's is in the chunks that token was made in (the rarer's, of two such tokens);
            # any other pair was in the arrays at the hand-over.
            in_a, in_b = made_in.get(A), made_in.get(B)
            if in_a is None and in_b is None:
                listed = handed.chunks_of(key)
            else:
                listed = in_a if in_b is None or (in_a is not None and len(in_a) <= len(in_b)) else in_b
        if early is None:
            new: dict[int, int] = {}  # the pairs made with C, kept below if counted floor times
            nget = new.get
            ab, c = chr(A) + chr(B), chr(C)
            B_left, C_left = B << SHIFT, C << SHIFT
            made_in[C] = found = []
        for wi in listed:  # each chunk once
            w = words[wi]
            i = w.find(ab)
            if i < 0:
                continue  # the chunk lost this pair, or never held it
            found.append(wi)
            n = counts[wi]
            last = len(w) - 2
            end = -1  # where the previous occurrence in this chunk ended
            while i >= 0:
                if i > 0:
                    if end == i:  # right after the previous occurrence: its (C, A) is (C, C)
                        new[C_left | A] -= n
                        k = C_left | C
                    else:
                        x = ord(w[i - 1]) << SHIFT
                        k = x | A
                        old = pget(k)
                        if old is not None:  # else counted below the floor
                            pairs[k] = old - n
                        k = x | C
                    new[k] = nget(k, 0) + n
                if i < last:
                    y = ord(w[i + 2])
                    k = B_left | y
                    old = pget(k)
                    if old is not None:
                        pairs[k] = old - n
                    k = C_left | y
                    new[k] = nget(k, 0) + n
                end = i + 2
                i = w.find(ab, end)
            words[wi] = w.replace(ab, c)
        del pairs[key]
        for k, n in new.items():
            if n >= floor:
                pairs[k] = n
                heappush(heap, k - (n << COUNT))
        if progress is not None:
            progress(len(merges))
    return merges
