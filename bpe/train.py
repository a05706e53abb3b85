"""The BPE trainer: chunk counts in, merges out, incrementally.

Data structures (a corpus of C distinct chunks):

- ``words[w]``: chunk ``w`` as a list of token ids (bytes at first); ``counts[w]`` how
  often the chunk occurs in the corpus. Chunks of one byte hold no pair and are dropped.
- ``pairs[key]``: the number of times the pair occurs, weighted by chunk counts, with
  ``key = left * V + right`` (V bounds every id), so a pair is one small int and keys sort
  like the tuples ``(left, right)``.
- ``where[key]``: the chunks that held the pair when it was last added (a superset:
  chunks that lost it are skipped when scanned).
- a heap of ``-count * V*V + key`` ints: the top is the pair with the highest count,
  and among equal counts the smallest ``(left, right)``. Entries are not updated when a
  count drops; a popped entry whose count is stale is pushed back with its current
  count (lazy invalidation). This is exact because a pair's count only grows in the
  merge that creates one of its two tokens, and those pairs are pushed after that merge.

Tie rule (documented, machine independent): the next merge is the pair with the highest
count; among equal counts, the pair whose ``(left_id, right_id)`` is lexicographically
smallest. Within a chunk, occurrences are merged left to right without overlap
(``a a a`` with pair ``(a, a)`` becomes ``aa a``).

A merge of pair ``(a, b)`` into ``c`` visits only the chunks in ``where[(a, b)]``; for
each occurrence it moves the counts of the neighbour pairs ``(x, a) -> (x, c)`` and
``(b, y) -> (c, y)``.
"""
from __future__ import annotations

import heapq
import sys
import time
from typing import Callable, Mapping


class Progress:
    """A one-line progress display (merges/s) on stderr, only when stderr is a TTY."""

    def __init__(self, total: int, enabled: bool | None = None, label: str = "merges"):
        self.total = total
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.label = label
        self.t0 = time.perf_counter()
        self.last = 0.0

    def __call__(self, done: int, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not final and now - self.last < 0.2:
            return
        self.last = now
        dt = max(now - self.t0, 1e-9)
        sys.stderr.write(f"\r{self.label}: {done}/{self.total}  {done / dt:,.0f}/s  {dt:.1f}s ")
        if final:
            sys.stderr.write("\n")
        sys.stderr.flush()


def train_merges(
    chunk_counts: Mapping[str | bytes, int],
    n_merges: int,
    min_frequency: int = 1,
    progress: Callable[[int], None] | None = None,
) -> list[tuple[int, int]]:
    """Learn up to ``n_merges`` merges from distinct chunks and their counts.

    Returns a list of ``(left_id, right_id)``; merge ``k`` creates id ``256 + k``. Fewer
    merges come back when no pair occurs ``min_frequency`` times any more.
    """
    if n_merges <= 0:
        return []
    min_frequency = max(1, int(min_frequency))
    V = 256 + n_merges  # every id is below V
    S = V * V  # every pair key is below S

    words: list[list[int]] = []
    counts: list[int] = []
    for chunk, n in chunk_counts.items():
        b = chunk.encode("utf-8") if isinstance(chunk, str) else bytes(chunk)
        if len(b) >= 2 and n > 0:
            words.append(list(b))
            counts.append(int(n))

    pairs: dict[int, int] = {}
    where: dict[int, set[int]] = {}
    pget = pairs.get
    for wi, w in enumerate(words):
        n = counts[wi]
        prev = w[0]
        for t in w[1:]:
            k = prev * V + t
            pairs[k] = pget(k, 0) + n
            s = where.get(k)
            if s is None:
                where[k] = {wi}
            else:
                s.add(wi)
            prev = t

    heap = [k - c * S for k, c in pairs.items() if c >= min_frequency]
    heapq.heapify(heap)
    heappop, heappush = heapq.heappop, heapq.heappush

    merges: list[tuple[int, int]] = []
    while heap and len(merges) < n_merges:
        v = heappop(heap)
        k = v % S
        c = (k - v) // S
        cur = pget(k, 0)
        if cur != c:  # stale entry: the count dropped since it was pushed
            if cur >= min_frequency:
                heappush(heap, k - cur * S)
            continue
        a, b = divmod(k, V)
        new = 256 + len(merges)
        merges.append((a, b))
        newV = new * V
        bV = b * V
        touched: set[int] = set()
        for wi in where.pop(k):
            w = words[wi]
            L = len(w)
            n = counts[wi]
            res = None
            start = s = 0
            while True:
                try:
                    i = w.index(a, s)
                except ValueError:
                    break
                if i + 1 < L and w[i + 1] == b:
                    if res is None:
                        res = w[:i]
                    else:
                        res += w[start:i]
                    if res:
                        x = res[-1]
                        kk = x * V + a
                        pairs[kk] = pget(kk, 0) - n
                        kk = x * V + new
                        pairs[kk] = pget(kk, 0) + n
                        touched.add(kk)
                        ws = where.get(kk)
                        if ws is None:
                            where[kk] = {wi}
                        else:
                            ws.add(wi)
                    if i + 2 < L:
                        y = w[i + 2]
                        kk = bV + y
                        pairs[kk] = pget(kk, 0) - n
                        kk = newV + y
                        pairs[kk] = pget(kk, 0) + n
                        touched.add(kk)
                        ws = where.get(kk)
                        if ws is None:
                            where[kk] = {wi}
                        else:
                            ws.add(wi)
                    res.append(new)
                    start = s = i + 2
                else:
                    s = i + 1
            if res is not None:
                if start < L:
                    res += w[start:]
                words[wi] = res
        pairs.pop(k, None)
        for kk in touched:
            c = pget(kk, 0)
            if c >= min_frequency:
                heappush(heap, kk - c * S)
        if progress is not None:
            progress(len(merges))
    return merges
