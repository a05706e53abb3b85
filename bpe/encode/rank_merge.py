"""Encoding, one piece at a time: rank-ordered byte-pair merging, exactly as tiktoken does it.

Given ``ranks`` (token bytes -> rank) and the bytes of one pre-tokenized piece, start
from single bytes and repeatedly merge the adjacent pair whose concatenation has the
lowest rank (the leftmost such pair on ties) until no adjacent concatenation is a
token. The ids of the final parts are their ranks.

Two implementations with identical output: ``merge_small`` keeps the pair ranks in a
list (``min``/``index`` run in C; O(n^2) but fastest for the short pieces that make up
almost all text) and ``merge_long``, a linked list of parts plus a priority queue of candidate
pairs with lazy invalidation, updated locally after each join: O(n log n), so that a run of a
million equal bytes stays cheap. In a long piece the ranks with many candidates (the byte pairs
of DNA or base64, the runs of a repeated byte) are joined a whole rank at a time in NumPy.
``merge_parts`` is ``merge_small``'s loop resumed from parts already merged (``batch_merge``
finishes its last few pieces with it).
"""
from __future__ import annotations

import heapq
from functools import partial
from itertools import repeat
from operator import add
from typing import Callable

import numpy as np

LONG_PIECE = 256  # bytes; from here on merge_long wins
BULK_PIECE = 1 << 13  # bytes: merge_long takes a piece this long in arrays, its large levels in NumPy
# Candidates: a level this large is taken in NumPy (merge_long), its lookups read from the ranks'
# dict one by one, or from a table in NumPy (cheaper per span, so smaller levels pay).
BULK_MIN = 256
BULK_MIN_TABLE = 64
LEVEL_BLOCK = 1 << 16  # candidates of a level taken together (_take_level)
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


def merge_long(ranks: dict[bytes, int], b: bytes, spans: Callable | None = None,
               bulk_min: int | None = None) -> list[int]:
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

    In a piece of BULK_PIECE bytes or more, a level of ``bulk_min`` candidates or more (default
    BULK_MIN, or BULK_MIN_TABLE with ``spans``) is taken in NumPy at once (``_take_level``) when that
    is exactly what the loop would do: no urgent pair waits and none of the pairs its joins make
    ranks below it. ``spans(starts, ends)`` (int64 arrays) gives the ranks of the tokens the spans
    ``b[starts[i]:ends[i]]`` spell, -1 where none (``batch_merge.TokenTable.reader``); by default
    ``ranks`` is read span by span.
    """
    get = ranks.get
    n = len(b)
    M = n + 1
    # The part starting at s ends at nxt[s] (and is the token tok[s], kept in a long piece); prv[s]
    # is the start of the part before it (-1: none, -2: s starts no part). Position n is a
    # sentinel that no pair reaches.
    bulk = n >= BULK_PIECE
    if bulk:  # arrays, which the loop reads and writes through memoryviews
        nxt_a = np.arange(1, n + 2, dtype=np.int64)
        prv_a = np.arange(-1, n, dtype=np.int64)
        tok_a = _byte_ids(ranks, b)
        nxt, prv, tok = memoryview(nxt_a), memoryview(prv_a), memoryview(tok_a)
    else:  # lists: faster to read one item at a time
        nxt, prv = list(range(1, n + 2)), list(range(-1, n))
    # rank -> starts of its candidates (a list, or an int64 array as NumPy queued them); rank -> the
    # token's length
    levels, width = _pair_levels(ranks, b, arrays=bulk)
    order = list(levels)  # the ranks of the levels still to take
    heapq.heapify(order)
    urgent: list[int] = []
    heappop = heapq.heappop
    queue_at = levels.get
    if bulk_min is None:
        bulk_min = BULK_MIN if spans is None else BULK_MIN_TABLE
    spans = spans or partial(_dict_spans, get, b)

    def enqueue(r: int, start: int, stop: int) -> None:  # a new candidate pair [start, stop)
        queued = queue_at(r)
        if queued is None:
            _queue(levels, width, order, urgent, lvl, M, r, start, stop)
        else:
            if type(queued) is not list:
                levels[r] = queued = queued.tolist()
            queued.append(start)
    while order:
        lvl = heappop(order)
        starts = levels.pop(lvl)
        w = width[lvl]
        if (bulk and not urgent and len(starts) >= bulk_min
                and _take_level(n, lvl, w, starts, nxt_a, prv_a, tok_a, spans, levels, width, order)):
            continue
        if type(starts) is not list:
            starts = starts.tolist()
        starts.sort()
        top = lvl * M
        i, k = 0, len(starts)
        while True:
            if urgent and (i == k or urgent[0] < (top + starts[i]) * M + starts[i] + w):
                v, e = divmod(heappop(urgent), M)
                r, s = divmod(v, M)
            elif i < k:
                s = starts[i]
                i += 1
                e = s + w
                r = lvl
            else:
                break
            m = nxt[s]
            # Valid only while [s, m) and [m, e) are both still parts: prv[m] == s fails once s has
            # been absorbed to its left, nxt[m] != e once m's part has grown.
            if m >= n or nxt[m] != e or prv[m] != s:
                continue
            nxt[s] = e
            if bulk:  # (a short piece's tokens are looked up at the end)
                tok[s] = r
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
    if bulk:
        return tok_a[np.flatnonzero(prv_a[:n] != -2)].tolist()  # the parts' tokens, in order
    out = []
    s = 0
    while s < n:
        e = nxt[s]
        out.append(ranks[b[s:e]])
        s = e
    return out


def _take_level(n: int, lvl: int, w: int, starts, nxt, prv, tok, spans, levels, width, order) -> bool:
    """Take the level ``lvl`` (its token ``w`` bytes long, its candidates ``starts``: a list or an
    int64 array, which is sorted in place) as ``merge_long``'s loop would, in array passes over its
    ``nxt``, ``prv`` and ``tok`` (int64, (n + 1,)), and queue the pairs its joins make. The
    candidates go in order, LEVEL_BLOCK at a time (their temporaries stay in cache), each block's
    joins made before the next block is read, as the loop makes them. False when a block's joins
    would make a pair that ranks below the level: the loop must then take it in turn, between the
    level's own joins, so that block and the rest are left to it (the candidates joined so far are
    stale for it)."""
    s_all = np.fromiter(starts, dtype=np.int64, count=len(starts)) if type(starts) is list else starts
    s_all.sort(kind="stable")  # the loop's order; a merge of the sorted runs it was queued in
    made: dict[int, list] = {}  # rank -> [its token's length, the starts of the pairs made, by block]
    taken = True
    for at in range(0, s_all.size, LEVEL_BLOCK):
        found = _take_block(n, lvl, w, s_all[at:at + LEVEL_BLOCK], nxt, prv, tok, spans)
        if found is None:
            taken = False
            break
        for rank, size, lo in _by_rank(*found):
            made.setdefault(rank, [size]).append(lo)
    for rank, (size, *parts) in made.items():  # queued as the loop queues them
        lo = parts[0] if len(parts) == 1 else np.concatenate(parts)
        queued = levels.get(rank)
        if queued is None:
            levels[rank] = lo
            width[rank] = size
            heapq.heappush(order, rank)
        elif type(queued) is list:
            queued.extend(lo.tolist())
        else:
            levels[rank] = np.concatenate((queued, lo))
    return taken


def _take_block(n: int, lvl: int, w: int, s, nxt, prv, tok, spans):
    """``_take_level`` for one block of its candidates ``s`` (int64, increasing): the pairs its joins
    make, as (starts, ends, ranks), or None, with nothing changed, when one ranks below the level."""
    if s.size > 1:  # each once
        fresh = np.empty(s.size, dtype=bool)
        fresh[0] = True
        np.not_equal(s[1:], s[:-1], out=fresh[1:])
        s = s[fresh]
    m = nxt[s]
    e = s + w
    valid = (nxt[m] == e) & (prv[m] == s)   # a stale candidate's parts have changed
    s, m, e = s[valid], m[valid], e[valid]
    if s.size == 0:
        return s, s, s
    # A candidate that starts at the right part of the one before (a a a with (a, a)) is absorbed
    # by it: along such a chain every second one joins, from its first.
    chained = np.zeros(s.size, dtype=bool)
    np.equal(s[1:], m[:-1], out=chained[1:])
    if chained.any():
        i = np.arange(s.size)
        keep = (i - np.maximum.accumulate(np.where(chained, 0, i))) % 2 == 0
        s, m, e = s[keep], m[keep], e[keep]
    # The pairs the loop looks up at each join, in turn: with the part after (as it is then: a
    # later join of this level has not grown it yet) and with the part before (the previous join's,
    # when that one ends here; an earlier block's joins are made already).
    before = prv[s]
    np.copyto(before[1:], s[:-1], where=s[1:] == e[:-1])
    inner = e < n
    left = before >= 0
    lo = np.concatenate((s[inner], before[left]))
    hi = np.concatenate((nxt[e[inner]], e[left]))
    r = spans(lo, hi)
    found = r >= 0
    if found.any() and r[found].min() < lvl:
        return None
    nxt[s] = e
    tok[s] = lvl
    prv[m] = -2
    prv[e[inner]] = s[inner]
    return lo[found], hi[found], r[found]


def _by_rank(lo: np.ndarray, hi: np.ndarray, r: np.ndarray) -> list:
    """The pairs [lo, hi) of ranks ``r`` (int64 arrays) by rank: (rank, its token's length, the
    pairs' starts in their order) for each rank."""
    if r.size == 0:
        return []
    if r[0] == r[-1] and (r == r[0]).all():  # one rank (a run of one byte): no sort
        return [(int(r[0]), int(hi[0] - lo[0]), lo)]
    by_rank = np.argsort(r, kind="stable")
    r, lo, size = r[by_rank], lo[by_rank], (hi - lo)[by_rank]
    cut = np.flatnonzero(r[1:] != r[:-1]) + 1
    first = np.concatenate(([0], cut))
    return list(zip(r[first].tolist(), size[first].tolist(), np.split(lo, cut)))


def _dict_spans(get: Callable, b: bytes, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The ranks of the tokens ``b[lo[i]:hi[i]]`` spell (-1 where none), read from ``ranks.get``."""
    return np.fromiter(map(get, map(b.__getitem__, map(slice, lo.tolist(), hi.tolist())), repeat(-1)),
                       dtype=np.int64, count=lo.size)


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


def _byte_ids(ranks: dict[bytes, int], b: bytes) -> np.ndarray:
    """The id of each byte of ``b`` (int64, (len(b),)), one lookup per distinct byte."""
    u = np.frombuffer(b, np.uint8)
    ids = np.zeros(256, dtype=np.int64)
    present = np.flatnonzero(np.bincount(u, minlength=256))
    ids[present] = [ranks[_SINGLE[c]] for c in present.tolist()]
    return ids[u]


def _pair_levels(ranks: dict[bytes, int], b: bytes, arrays: bool = False) -> tuple[dict, dict[int, int]]:
    """The adjacent byte pairs of ``b`` that are tokens, by rank: rank -> their starts in order (a
    list, or with ``arrays`` an int64 array), and rank -> 2 (the token's length). Grouped in NumPy
    by the pair's two bytes, one lookup per distinct pair."""
    if len(b) < 2:
        return {}, {}
    u = np.frombuffer(b, np.uint8)
    code = (u[:-1].astype(np.uint16) << 8) | u[1:]
    order = np.argsort(code, kind="stable")  # a radix sort for 16-bit keys: the starts stay in order
    code = code[order]
    cut = np.flatnonzero(code[1:] != code[:-1]) + 1
    first = np.concatenate(([0], cut)).tolist()
    get = ranks.get
    levels: dict = {}
    if not arrays:
        order = order.tolist()
    for c, a, z in zip(code[first].tolist(), first, first[1:] + [len(order)]):
        r = get(_SINGLE[c >> 8] + _SINGLE[c & 255])
        if r is not None:
            levels[r] = order[a:z]
    return levels, dict.fromkeys(levels, 2)


def byte_pair_encode(ranks: dict[bytes, int], b: bytes, spans: Callable | None = None) -> list[int]:
    """Token ids of one piece: a single lookup when the piece is itself a token. ``spans``: as
    ``merge_long``'s, for a long piece."""
    r = ranks.get(b)
    if r is not None:
        return [r]
    if len(b) < LONG_PIECE:
        return merge_small(ranks, b)
    return merge_long(ranks, b, spans)
