"""Encoding, one piece at a time: rank-ordered byte-pair merging, exactly as tiktoken does it.

Given ``ranks`` (token bytes -> rank) and the bytes of one pre-tokenized piece, start
from single bytes and repeatedly merge the adjacent pair whose concatenation has the
lowest rank (the leftmost such pair on ties) until no adjacent concatenation is a
token. The ids of the final parts are their ranks.

Two implementations with identical output: ``merge_small`` keeps the pair ranks in a
list (``min``/``index`` run in C; O(n^2) but fastest for the short pieces that make up
almost all text) and ``merge_long``, a linked list of parts plus a heap of candidate
pairs with lazy invalidation, O(n log n), so that a run of a million equal bytes stays cheap.
``merge_parts`` is ``merge_small``'s loop resumed from parts already merged (``batch_merge``
finishes its last few pieces with it).
"""
from __future__ import annotations

import heapq
from itertools import repeat
from operator import add

LONG_PIECE = 256  # bytes; from here on the heap version wins
_INF = 1 << 62


_SINGLE = [bytes([i]) for i in range(256)]


def merge_small(ranks: dict[bytes, int], b: bytes) -> list[int]:
    """Token ids of piece ``b`` (any length; quadratic, meant for short pieces)."""
    return list(map(ranks.__getitem__, merge_parts(ranks, list(map(_SINGLE.__getitem__, b)))))


def merge_parts(ranks: dict[bytes, int], parts: list[bytes]) -> list[bytes]:
    """The final parts of a piece whose merging has reached ``parts`` (tokens, in order; changed in
    place and returned)."""
    get = ranks.get
    # pr[i]: rank of joining parts i and i+1 (_INF when that is not a token)
    pr = list(map(get, map(add, parts, parts[1:]), repeat(_INF)))
    while pr:
        m = min(pr)
        if m == _INF:
            break
        i = pr.index(m)  # the leftmost pair of lowest rank
        parts[i] += parts.pop(i + 1)
        del pr[i]
        if i:
            pr[i - 1] = get(parts[i - 1] + parts[i], _INF)
        if i < len(pr):
            pr[i] = get(parts[i] + parts[i + 1], _INF)
    return parts


def merge_long(ranks: dict[bytes, int], b: bytes) -> list[int]:
    """Token ids of piece ``b`` in O(n log n): same result as ``merge_small``.

    A heap entry is the int ``(rank * M + s) * M + e`` (M = n + 1) for joining the parts
    ``[s, m)`` and ``[m, e)``: ints order like ``(rank, s, e)`` (lowest rank, then leftmost) and
    compare faster than tuples. An entry is stale when its left part has died or grown since.
    """
    get = ranks.get
    n = len(b)
    M = n + 1
    nxt = list(range(1, n + 1))  # the part starting at s ends at nxt[s]
    prv = list(range(-1, n - 1))  # start of the part before the one starting at s; -2: s is no start
    heap = []
    for s in range(n - 1):
        r = get(b[s : s + 2])
        if r is not None:
            heap.append((r * M + s) * M + s + 2)
    heapq.heapify(heap)
    heappop, heappush = heapq.heappop, heapq.heappush
    while heap:
        v = heappop(heap)
        e = v % M
        s = v // M % M
        m = nxt[s]
        # Valid only while [s, m) and [m, e) are both still parts: prv[m] == s fails once s has
        # been absorbed to its left, nxt[m] != e once m's part has grown.
        if m >= n or nxt[m] != e or prv[m] != s:
            continue
        nxt[s] = e
        prv[m] = -2
        if e < n:
            prv[e] = s
            e2 = nxt[e]
            rr = get(b[s:e2])
            if rr is not None:
                heappush(heap, (rr * M + s) * M + e2)
        p = prv[s]
        if p >= 0:
            rr = get(b[p:e])
            if rr is not None:
                heappush(heap, (rr * M + p) * M + e)
    out = []
    s = 0
    while s < n:
        e = nxt[s]
        out.append(ranks[b[s:e]])
        s = e
    return out


def byte_pair_encode(ranks: dict[bytes, int], b: bytes) -> list[int]:
    """Token ids of one piece: a single lookup when the piece is itself a token."""
    r = ranks.get(b)
    if r is not None:
        return [r]
    if len(b) < LONG_PIECE:
        return merge_small(ranks, b)
    return merge_long(ranks, b)
