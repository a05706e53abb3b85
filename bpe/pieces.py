"""Text without special tokens -> ids: split with the pattern, merge each new piece, cache the results.

``PieceEncoder(ranks, pattern)(text)`` is the hot path of encoding. The cache maps a piece to the
tuple of its ids; it starts with every token that is whole UTF-8 text (a piece equal to a token
encodes to that token, as in tiktoken). A block of text costs a ``findall``, one lookup per piece
(``map`` of the cache's ``__getitem__``) and a join of the id tuples (``chain.from_iterable``),
all in C. A piece not seen yet is merged in one of two ways, with the same ids:

- one by one in Python (``bytepair``), by the cache's ``__missing__``, while new pieces are few;
- together, by ``npmerge`` in NumPy, once a block brings many (a cold cache on text in a script
  the cache has not seen): the blocks that follow then wait until they hold BATCH_TARGET new
  pieces between them, which are merged in one batch, and the waiting stops when blocks bring
  few again. The pair table that batch merging needs is built only after such blocks have
  brought TABLE_AFTER new pieces, merged one by one (the table costs about as much as that
  many), so a short or familiar text, or one whose new pieces are spread thin (code), never
  pays for it.
"""
from __future__ import annotations

from itertools import chain, compress, filterfalse

import numpy as np

from .bytepair import LONG_PIECE, byte_pair_encode, merge_small, utf8
from .npmerge import PairTable, merge_pieces
from .patterns import segment_cut
from .split import chunk_finder

CACHE_LIMIT = 1 << 19  # pieces remembered beyond the tokens; then the cache is emptied (back to the tokens)
ENCODE_BLOCK = 1 << 13  # characters per regex call on long texts: bounds the memory of the pieces
MAX_CACHED_PIECE = 256  # characters; a rare huge piece is not worth its memory
DENSE = 128  # new pieces in one block from which the blocks wait to be merged together
BATCH_TARGET = 4096  # new pieces that waiting blocks gather before they are merged together
WAIT_CHARS = 1 << 20  # characters that may wait (it bounds the memory of their pieces)
BATCH_MIN = 128  # fewer new pieces are merged one by one
TABLE_AFTER = 8192  # new pieces of blocks with DENSE or more, merged one by one, before the pair table is built
BATCH_MAX_BYTES = 64  # longer pieces take rounds that only they use: merged one by one


def _merge_one(ranks: dict[bytes, int], piece: str) -> tuple[int, ...]:
    b = utf8(piece)
    return tuple(merge_small(ranks, b) if len(b) < LONG_PIECE else byte_pair_encode(ranks, b))


class PieceCache(dict):
    """piece -> tuple of ids; a missing piece is merged, remembered and returned."""

    def __init__(self, ranks: dict[bytes, int]):
        super().__init__()
        self.ranks = ranks
        base: dict[str, tuple[int]] = {}
        for b, i in ranks.items():
            try:
                base[b.decode("utf-8")] = (i,)
            except UnicodeDecodeError:
                pass
        self.base = base
        self.update(base)
        self.missed = 0  # pieces merged by __missing__

    def __missing__(self, piece: str) -> tuple[int, ...]:
        self.missed += 1
        ids = _merge_one(self.ranks, piece)
        if len(piece) <= MAX_CACHED_PIECE:
            self.make_room(1)
            self[piece] = ids
        return ids

    def make_room(self, n: int) -> None:
        """Back to the tokens when ``n`` more pieces would pass the limit."""
        if len(self) + n > CACHE_LIMIT + len(self.base):
            self.clear()
            self.update(self.base)


class PieceEncoder:
    """Encodes text (surrogates already repaired, or escaped bytes) as tiktoken's core does."""

    def __init__(self, ranks: dict[bytes, int], pattern: str):
        self.ranks = ranks
        self.findall = chunk_finder(pattern)
        self.cut = segment_cut(pattern)
        self._table: PairTable | None | bool = None  # built when first worth it; False: ids too large
        self._dense = False  # whether blocks wait to be merged together (in this call)
        self._dense_missed = 0  # pieces merged one by one in blocks that brought DENSE or more
        self.clear()

    def clear(self) -> None:
        """Empty the piece cache (back to the tokens that are whole UTF-8 text)."""
        self.cache = PieceCache(self.ranks)

    def __call__(self, text: str) -> list[int]:
        out: list[int] = []
        wait: list[tuple[list[str], list[str]]] = []  # blocks, and their pieces not in the cache yet
        n_new = n_chars = 0
        cache, find = self.cache, self.findall
        self._dense = False
        for block in self._blocks(text):
            pieces = find(block)
            if not wait and not self._dense:
                before = cache.missed
                out += chain.from_iterable(map(cache.__getitem__, pieces))
                if cache.missed - before >= DENSE:
                    self._dense_missed += cache.missed - before
                    self._dense = isinstance(self._pair_table(), PairTable)
                continue
            new = list(filterfalse(cache.__contains__, pieces))  # __contains__ never merges
            wait.append((pieces, new))
            n_new += len(new)
            n_chars += len(block)
            if n_new >= BATCH_TARGET or n_chars >= WAIT_CHARS:
                self._flush(wait, n_new, out)
                wait, n_new, n_chars = [], 0, 0
        if wait:
            self._flush(wait, n_new, out)
        return out

    def _blocks(self, text: str):
        """``text`` in blocks of about ENCODE_BLOCK characters cut at chunk boundaries."""
        if len(text) <= ENCODE_BLOCK or self.cut is None:
            yield text
            return
        pos, n, search = 0, len(text), self.cut.search
        while pos < n:
            m = search(text, pos + ENCODE_BLOCK) if pos + ENCODE_BLOCK < n else None
            end = m.start() if m else n
            yield text[pos:end]
            pos = end

    def _flush(self, wait: list[tuple[list[str], list[str]]], n_new: int, out: list[int]) -> None:
        """Merge the new pieces of the waiting blocks (``n_new`` of them) together into the
        cache, then append the blocks' ids to ``out``."""
        self._dense = n_new >= DENSE * len(wait)
        new = list(dict.fromkeys(chain.from_iterable(n for _, n in wait)))
        self.cache.make_room(len(new))
        self.cache.update(self._merge_new(new))
        get = self.cache.__getitem__  # a piece too long to be cached is merged again here
        for pieces, _ in wait:
            out += chain.from_iterable(map(get, pieces))

    def _merge_new(self, pieces: list[str]) -> dict[str, tuple[int, ...]]:
        """Ids of distinct pieces, but those too long to be cached: merged by NumPy together, the
        long ones (and all of them when they hold escaped bytes, whose byte counts differ) one
        by one."""
        ranks = self.ranks
        joined = "".join(pieces)
        try:
            data = joined.encode("utf-8")
        except UnicodeEncodeError:
            data = None
        if data is None or len(pieces) < BATCH_MIN:
            return {p: _merge_one(ranks, p) for p in pieces if len(p) <= MAX_CACHED_PIECE}
        ends = np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)))
        if len(data) != len(joined):  # the byte where each character starts, then each piece
            first = np.flatnonzero((np.frombuffer(data, np.uint8) & 0xC0) != 0x80)
            ends = np.append(first, len(data))[ends]
        sizes = np.diff(ends, prepend=0)
        out = {}
        if sizes.max() >= BATCH_MAX_BYTES or sizes.min() == 0:
            keep = (sizes < BATCH_MAX_BYTES) & (sizes > 0)
            out = {p: _merge_one(ranks, p) for p in compress(pieces, (~keep).tolist()) if len(p) <= MAX_CACHED_PIECE}
            pieces = list(compress(pieces, keep.tolist()))
            sizes, ends = sizes[keep], ends[keep]
        # Longest first (merge_pieces reads only the front that is still merging): the bytes are
        # gathered piece by piece in that order.
        order = np.argsort(-sizes, kind="stable")
        starts = np.zeros(order.size + 1, dtype=np.int64)
        np.cumsum(sizes[order], out=starts[1:])
        src = np.repeat(ends[order] - starts[1:], sizes[order]) + np.arange(starts[-1])
        counts, ids = merge_pieces(self._table, np.frombuffer(data, np.uint8)[src], starts)
        flat = tuple(ids.tolist())  # a slice of a tuple is the tuple the cache holds
        stop = np.cumsum(counts).tolist()
        tuples = map(flat.__getitem__, map(slice, [0] + stop[:-1], stop))
        out.update(zip(map(pieces.__getitem__, order.tolist()), tuples))
        return out

    def _pair_table(self) -> PairTable | bool | None:
        """The pair table, once blocks with DENSE new pieces or more have brought TABLE_AFTER of
        them (merged one by one): None before then."""
        if self._table is None and self._dense_missed >= TABLE_AFTER:
            try:
                self._table = PairTable(self.ranks)
            except ValueError:
                self._table = False
        return self._table
