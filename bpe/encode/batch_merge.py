"""Encoding, many pieces at once: rank-ordered merging in NumPy, tiktoken's result for each piece.

``TokenTable(ranks)`` finds the rank of the token that a span of bytes spells, for a whole array of
spans at once: a token of up to 16 bytes is its bytes as two 64-bit words and its length, kept in a
hash table that NumPy reads; a span's words are read from the piece bytes directly (a big-endian
word starts at every byte), so comparing them with the token's is exact. The rare longer spans are
looked up in ``ranks`` itself. Building the table hashes each token once, so batch merging pays
only from a few thousand new pieces.

``merge_pieces(table, data, starts)`` runs ``rank_merge.merge_small`` on all pieces together: in
each round every piece that still holds a joinable pair joins its lowest-rank pair (the leftmost
of equal ranks), which is the step tiktoken takes next on that piece; a piece is finished when
it holds none. The parts of a piece are spans of its bytes, and two neighbours can be joined
exactly when the span they cover together is a token. A round is a few array operations over the
pieces still merging, so the interpreter's cost of a round is shared by all of them; once no
more than TAIL pieces are left merging (the longest ones, whose last rounds would serve only
them), they finish in Python from the parts they have reached (``rank_merge.merge_parts``).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..radix import radix_order
from ..text import HASH_MUL, HEAD_MASK, WORD, span_words
from .rank_merge import merge_parts

INF = (1 << 31) - 1  # "no such token": ranks must stay below it for the packed keys of a round
_LOW32 = (1 << 32) - 1
NEXT = 1 << 40  # in a token's row: the next row is in the same bucket
LOAD = 4  # buckets per token, at least (a power of two from LOAD to 2 * LOAD)
_INF_KEY = INF << 32
READ_SPANS = 1 << 15  # spans looked up per call by a reader (TokenTable.reader)
FEW_MORE = 24  # spans left in crowded buckets after the first row: up to this many read from the dict
TAIL = 32  # pieces: when no more are still merging, they finish in Python (a round costs about that much)
_SHORT = 2 * WORD  # bytes: tokens and spans up to this long are compared as two words in NumPy
_SIZE_BITS = 5  # a token's length beside its rank in one int64 (lengths up to _SHORT)
_SIZE_MASK = (1 << _SIZE_BITS) - 1
# The masks that keep the first L bytes (0..16) of a span's two big-endian words.
_HI_MASK = HEAD_MASK
_LO_MASK = HEAD_MASK[np.maximum(np.arange(_SHORT + 1) - WORD, 0)]


def _among(values: np.ndarray, sorted_values: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is in ``sorted_values`` (sorted, int64): bool, like ``values``."""
    i = np.minimum(sorted_values.searchsorted(values), max(sorted_values.size - 1, 0))
    return sorted_values[i] == values if sorted_values.size else np.zeros(values.size, dtype=bool)


def _mix(hi: np.ndarray, lo: np.ndarray, size: np.ndarray) -> np.ndarray:
    """An int64 hash of 16 zero-padded bytes and their length (equal strings, equal hashes)."""
    return (hi * HASH_MUL ^ lo).view(np.int64) ^ size


class TokenTable:
    """The rank of the token each span of a buffer spells, for arrays of spans.

    ``byte_id`` (int64, (256,)) is each byte's id, ``byte_pair`` (int64, (65536,)) the rank of each
    two-byte token by ``first * 256 + second`` (INF where none). Raises ValueError when the ids do
    not fit the packed keys of a round (then merge one by one).

    The hash table: LOAD to 2 * LOAD buckets per token (the top bits of ``key * HASH_MUL``), the
    tokens as rows sorted by bucket, and each bucket's first row. A lookup reads its bucket's
    first row, then the rows after it while they are in the same bucket (NEXT) and do not match.
    """

    def __init__(self, ranks: dict[bytes, int]):
        toks = list(ranks)
        ids = np.fromiter(ranks.values(), dtype=np.int64, count=len(toks))
        if ids.max() >= INF:
            raise ValueError(f"ids up to {ids.max()} do not fit the packed keys of the NumPy merge")
        self.ranks = ranks
        try:  # the lengths as one byte each: bytes() reads them in a C loop, twice as fast as fromiter
            size_all = np.frombuffer(bytes(map(len, toks)), dtype=np.uint8).astype(np.int64)
        except ValueError:  # a token of 256 bytes or more
            size_all = np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))
        starts = np.cumsum(size_all) - size_all
        words = span_words(np.frombuffer(b"".join(toks), dtype=np.uint8))
        short = np.flatnonzero(size_all <= _SHORT)
        # Each token of up to 16 bytes as its two words, read and masked as a span's are.
        size, rank = size_all[short], ids[short]
        hi = np.take(words, starts[short]) & _HI_MASK[size]  # take: fancy indexing is slower on the strided view
        lo = np.take(words[WORD:], starts[short]) & _LO_MASK[size]
        self.byte_id = np.zeros(256, dtype=np.int64)
        one = size == 1
        if one.sum() != 256:
            raise ValueError("byte-level BPE needs every single byte as a token")
        self.byte_id[(hi[one] >> np.uint64(56)).astype(np.int64)] = rank[one]
        self.byte_pair = np.full(1 << 16, INF, dtype=np.int64)
        two = size == 2
        self.byte_pair[(hi[two] >> np.uint64(48)).astype(np.int64)] = rank[two]
        self._build(_mix(hi, lo, size), hi, lo, rank << _SIZE_BITS | size)
        # The longer tokens' hashes (of their first 16 bytes and their length), sorted: a longer
        # span is looked up in ``ranks`` only when its hash is among them.
        long = np.flatnonzero(size_all > _SHORT)
        self._long = np.sort(_mix(np.take(words, starts[long]), np.take(words[WORD:], starts[long]),
                                  size_all[long]))

    def _build(self, key: np.ndarray, hi: np.ndarray, lo: np.ndarray, meta: np.ndarray) -> None:
        """The rows (hi, lo, meta: rank << 5 | length, with NEXT where the next row is in the same
        bucket; one more row past the tokens, whose length is above _SHORT: equal to no span
        compared in NumPy) sorted by bucket, and each bucket's first row (that past the tokens for
        an empty bucket). Tokens whose keys collide share a bucket: a lookup compares whole rows."""
        n, bits = key.size, max(4, (LOAD * key.size).bit_length())
        self._shift = np.uint64(64 - bits)
        home = self._home(key)
        order = radix_order(home, bits)
        home = home[order]
        rows = np.zeros((n + 1, 4), dtype=np.uint64)
        rows[:n, 0], rows[:n, 1], rows[:n, 2] = hi[order], lo[order], meta[order].view(np.uint64)
        rows[:-2, 2] |= np.where(home[1:] == home[:-1], np.uint64(NEXT), np.uint64(0))
        rows[n, 2] = _SIZE_MASK
        first = np.flatnonzero(np.diff(home, prepend=-1))
        self._head = np.full(1 << bits, n, dtype=np.int32 if n < 1 << 31 else np.int64)
        self._head[home[first]] = first
        self._rows = rows

    def spans(self, data: bytes, words: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Ranks (int64, like ``start``) of the tokens ``data[start[i]:end[i]]`` spell, INF where none.
        ``words`` is ``span_words(data)``, or (faster to read) its copy as native uint64."""
        size = end - start
        k = np.minimum(size, _SHORT)
        hi = np.take(words, start) & _HI_MASK[k]
        lo = np.take(words[WORD:], start) & _LO_MASK[k]
        row = self._head[self._home(_mix(hi, lo, k))]
        out, hit, meta = self._match(row, hi, lo, size)
        more = np.flatnonzero(~hit & (meta >= NEXT))  # the spans to read the next row of their bucket for
        if more.size <= FEW_MORE:  # a few: looked up by their bytes, not a round of array passes
            for i, a, b in zip(more.tolist(), start[more].tolist(), end[more].tolist()):
                out[i] = self.ranks.get(data[a:b], INF)
            more = more[:0]
        row = row[more]
        while more.size:
            row += 1
            out[more], hit, meta = self._match(row, hi[more], lo[more], size[more])
            go = ~hit & (meta >= NEXT)
            more, row = more[go], row[go]
        longer = np.flatnonzero(size > _SHORT)
        if longer.size:  # looked up by their bytes where a longer token hashes alike
            longer = longer[_among(_mix(hi[longer], lo[longer], size[longer]), self._long)]
            for i, a, b in zip(longer.tolist(), start[longer].tolist(), end[longer].tolist()):
                out[i] = self.ranks.get(data[a:b], INF)
        return out

    def reader(self, data: bytes) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """``spans(starts, ends)`` over the bytes ``data``: the ranks (int64) of the tokens
        ``data[starts[i]:ends[i]]`` spell, -1 where none (``rank_merge.merge_long``'s lookup)."""
        words = span_words(np.frombuffer(data, np.uint8)).astype(np.uint64)

        def spans(start: np.ndarray, end: np.ndarray) -> np.ndarray:
            if start.size <= READ_SPANS:
                out = self.spans(data, words, start, end)
            else:
                out = np.empty(start.size, dtype=np.int64)
                for i in range(0, start.size, READ_SPANS):  # a lookup's temporaries stay in cache
                    out[i:i + READ_SPANS] = self.spans(data, words, start[i:i + READ_SPANS], end[i:i + READ_SPANS])
            out[out == INF] = -1
            return out

        return spans

    def _home(self, key: np.ndarray) -> np.ndarray:
        """The bucket of each key (int64): the top bits of ``key * HASH_MUL``."""
        return ((key.view(np.uint64) * HASH_MUL) >> self._shift).view(np.int64)

    def _match(self, g: np.ndarray, hi, lo, size) -> tuple:
        """(rank where token row ``g`` spells the span of words ``hi``, ``lo`` and length ``size``,
        else INF; whether it does; the rows' third words), each like ``g``."""
        row = np.take(self._rows, g, axis=0)
        meta = row[:, 2].view(np.int64)
        hit = (row[:, 0] == hi) & (row[:, 1] == lo) & ((meta & _SIZE_MASK) == size)
        return np.where(hit, (meta >> _SIZE_BITS) & INF, INF), hit, meta


def merge_pieces(table: TokenTable, data: np.ndarray, starts: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of many pieces: piece i is ``data[starts[i]:starts[i + 1]]`` (``data``: uint8, (n,);
    ``starts``: int64, (P + 1,), increasing, so no piece is empty). The pieces should come longest
    first: the ones that take the most rounds then stay at the front, and a round only reads the
    front up to the last piece still merging.

    Returns ``(counts, ids)``: each piece's number of tokens (int64, (P,)) and the ids of all
    pieces end to end (int64, (sum(counts),)); each piece's ids are ``rank_merge.merge_small``'s.
    """
    n = data.size
    # The words copied out of span_words' strided big-endian view: a round's gathers from native,
    # aligned words run several times faster, and a batch's copy costs about one of them.
    raw, words = data.tobytes(), span_words(data).astype(np.uint64)
    place = np.arange(n, dtype=np.int64)
    # A part is a span [p, nxt[p]) of its piece, kept at its first byte p; a part absorbed by its
    # left neighbour leaves a hole. key[p] = rank of joining part p with the next one << 32 | p, so
    # the minimum over a piece is its lowest rank, leftmost first; a hole or a piece's last part
    # has rank INF.
    tok = table.byte_id[data]
    end = np.repeat(starts[1:], np.diff(starts))  # where the piece holding each byte ends
    key = np.empty(n, dtype=np.int64)
    key[:-1] = table.byte_pair[data[:-1].astype(np.uint16) << 8 | data[1:]] << 32 | place[:-1]  # 16-bit pairs: narrow passes
    last = starts[1:] - 1
    key[last] = _INF_KEY | last
    nxt = place + 1
    prv = place - 1  # the part before, -1 before a piece's first
    prv[starts[:-1]] = -1
    alive = np.ones(n, dtype=bool)
    seg = starts[:-1]
    live_end = seg.size  # pieces past this one are finished
    while live_end:
        best = np.minimum.reduceat(key[:starts[live_end]], seg[:live_end])
        rank = best >> 32
        live = np.flatnonzero(rank != INF)
        if live.size <= TAIL:
            _finish(table, raw, live, starts, tok, nxt, alive)
            break
        live_end = int(live[-1]) + 1
        at = best[live] & _LOW32
        gone = nxt[at]
        alive[gone] = False
        key[gone] = _INF_KEY | gone
        tok[at] = rank[live]
        _relink(table, raw, words, at, nxt[gone], end, key, nxt, prv)
    counts = np.add.reduceat(alive, seg).astype(np.int64) if seg.size else np.zeros(0, np.int64)
    return counts, tok[alive]


def _relink(table: TokenTable, raw: bytes, words: np.ndarray, at, stop, end, key, nxt, prv) -> None:
    """Part ``at`` now spans ``[at, stop)``: link it to the part after it and look up its rank
    with its neighbours on both sides, in place."""
    nxt[at] = stop
    right = stop < end[at]
    # np.compress, not a[mask]: several times faster on masks of no pattern
    a_r, s_r = np.compress(right, at), np.compress(right, stop)
    prv[s_r] = a_r
    before = prv[at]
    left = before >= 0
    b_l = np.compress(left, before)
    new = table.spans(raw, words, np.concatenate([a_r, b_l]), np.concatenate([nxt[s_r], np.compress(left, stop)]))
    key[at] = _INF_KEY | at
    key[a_r] = new[: a_r.size] << 32 | a_r
    key[b_l] = new[a_r.size:] << 32 | b_l


def _finish(table: TokenTable, raw: bytes, pieces: np.ndarray, starts, tok, nxt, alive) -> None:
    """Merge ``pieces`` (indexes) to the end in Python, from the parts they have reached."""
    ranks = table.ranks
    for j in pieces.tolist():
        s, e = int(starts[j]), int(starts[j + 1])
        ends = nxt[s:e].tolist()
        parts, p = [], s
        while p < e:
            parts.append(raw[p:ends[p - s]])
            p = ends[p - s]
        alive[s:e] = False
        for part in merge_parts(ranks, parts):
            alive[s] = True
            tok[s] = ranks[part]
            s += len(part)
