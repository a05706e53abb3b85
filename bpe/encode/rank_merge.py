"""Encoding, one piece at a time: rank-ordered byte-pair merging, exactly as tiktoken does it.

Given ``ranks`` (token bytes -> rank) and the bytes of one pre-tokenized piece, start
from single bytes and repeatedly merge the adjacent pair whose concatenation has the
lowest rank (the leftmost such pair on ties) until no adjacent concatenation is a
token. The ids of the final parts are their ranks.

Two implementations with identical output: ``merge_small`` keeps the pair ranks in a
list (``min``/``index`` run in C; O(n^2) but fastest for the short pieces that make up
almost all text) and ``merge_long``, a linked list of parts plus a priority queue of candidate
pairs with lazy invalidation, updated locally after each join: O(n log n), so that a run of a
million equal bytes stays cheap.
``merge_parts`` is ``merge_small``'s loop resumed from parts already merged (``batch_merge``
finishes its last few pieces with it).
"""
from __future__ import annotations

import heapq
from itertools import repeat
from operator import add

import numpy as np

LONG_PIECE = 256  # bytes; from here on merge_long wins
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

    The parts are a doubly linked list over byte offsets; a candidate pair is the start ``s`` of
    its left part and the end ``e`` of its right one, stale once either part has changed (lazy
    invalidation). The candidates form a priority queue ordered by (rank, s) in two layers:

    - a level per rank, the starts of its candidates, taken rank by rank and left to right (a level's
      token has one length, so ``e`` is implied): joining two parts makes only the two pairs around
      the new part, so the queue is updated locally and, in a trained vocabulary, almost always
      with ranks above the level being taken, where they join their level's list;
    - ``urgent``, a heap of ``(rank * M + s) * M + e`` (M = n + 1; ints order like (rank, s, e))
      for the rare new pair whose rank is not above the current level's: it is taken whenever its
      key comes before the level's next one, so the order stays exactly tiktoken's.

    One heap of every candidate orders the same, but its pops wander over memory as it grows: the
    levels are read in order, and sorting one costs about a linear pass (it is appended nearly in
    order). The ranks must be distinct (a Tokenizer's are).
    """
    get = ranks.get
    n = len(b)
    M = n + 1
    nxt = list(range(1, n + 1))  # the part starting at s ends at nxt[s]
    prv = list(range(-1, n - 1))  # start of the part before the one starting at s; -2: s is no start
    levels, width = _pair_levels(ranks, b)  # rank -> starts of its candidates; rank -> token length
    order = list(levels)  # the ranks of the levels still to take
    heapq.heapify(order)
    urgent: list[int] = []
    heappop = heapq.heappop
    queue_at = levels.get

    def enqueue(r: int, start: int, stop: int) -> None:  # a new candidate pair [start, stop)
        queued = queue_at(r)
        if queued is None:
            _queue(levels, width, order, urgent, lvl, M, r, start, stop)
        else:
            queued.append(start)
    while order:
        lvl = heappop(order)
        starts = levels.pop(lvl)
        starts.sort()
        w, top = width[lvl], lvl * M
        i, k = 0, len(starts)
        while True:
            if urgent and (i == k or urgent[0] < (top + starts[i]) * M + starts[i] + w):
                v = heappop(urgent)
                e = v % M
                s = v // M % M
            elif i < k:
                s = starts[i]
                i += 1
                e = s + w
            else:
                break
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
                r = get(b[s:e2])
                if r is not None:
                    enqueue(r, s, e2)
            p = prv[s]
            if p >= 0:
                r = get(b[p:e])
                if r is not None:
                    enqueue(r, p, e)
    out = []
    s = 0
    while s < n:
        e = nxt[s]
        out.append(ranks[b[s:e]])
        s = e
    return out


def _queue(levels: dict[int, list[int]], width: dict[int, int], order: list[int], urgent: list[int],
           lvl: int, M: int, r: int, s: int, e: int) -> None:
    """``merge_long``'s queue takes the pair [s, e) of rank ``r``, which has no level yet: into
    ``urgent`` when ``r`` is not above the level being taken (``lvl``), else as a new level."""
    if r <= lvl:
        heapq.heappush(urgent, (r * M + s) * M + e)
    else:
        levels[r] = [s]
        width[r] = e - s
        heapq.heappush(order, r)


def _pair_levels(ranks: dict[bytes, int], b: bytes) -> tuple[dict[int, list[int]], dict[int, int]]:
    """The adjacent byte pairs of ``b`` that are tokens, by rank: rank -> their starts in order, and
    rank -> 2 (the token's length). Grouped in NumPy by the pair's two bytes, one lookup per
    distinct pair."""
    if len(b) < 2:
        return {}, {}
    u = np.frombuffer(b, np.uint8)
    code = (u[:-1].astype(np.uint16) << 8) | u[1:]
    order = np.argsort(code, kind="stable")  # a radix sort for 16-bit keys: the starts stay in order
    code = code[order]
    cut = np.flatnonzero(code[1:] != code[:-1]) + 1
    first = np.concatenate(([0], cut)).tolist()
    starts = order.tolist()
    get = ranks.get
    levels: dict[int, list[int]] = {}
    for c, a, z in zip(code[first].tolist(), first, first[1:] + [len(starts)]):
        r = get(_SINGLE[c >> 8] + _SINGLE[c & 255])
        if r is not None:
            levels[r] = starts[a:z]
    return levels, dict.fromkeys(levels, 2)


def byte_pair_encode(ranks: dict[bytes, int], b: bytes) -> list[int]:
    """Token ids of one piece: a single lookup when the piece is itself a token."""
    r = ranks.get(b)
    if r is not None:
        return [r]
    if len(b) < LONG_PIECE:
        return merge_small(ranks, b)
    return merge_long(ranks, b)
