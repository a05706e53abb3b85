"""Encoding text without special tokens -> ids: split with the pattern, merge each new piece, cache
the results.

``PieceEncoder(ranks, pattern)(text)`` is the hot path of encoding. The cache maps a piece to the
tuple of its ids. It starts empty and holds only the pieces met, in the order first met: a
lookup's cost is the memory it touches, and the pieces a text uses most are then near each
other (a cache that starts with every token keeps the common pieces among 100,000 others). A
piece equal to a token encodes to that token, as in tiktoken, whether it is met alone (the
cache's ``__missing__``, and ``rank_merge.byte_pair_encode``) or in a batch (``_fill``). A block
of text costs a ``findall``, one lookup per piece (``map`` of the cache's ``__getitem__``) and a
join of the id tuples (``list.extend`` of each), all in C. A piece not seen yet is merged in one
of two ways, with the same ids:

- one by one in Python (``rank_merge``), by the cache's ``__missing__``, while the encoder has met
  few new pieces;
- together, by ``batch_merge`` in NumPy, once the pieces it has merged one by one (in earlier calls,
  and in this one projected over the rest of its text) cost about as much as building the token
  table that batch merging needs (``table_after`` pieces): from then on a missing piece gets an
  empty list in the cache that stands for its ids, and the blocks' ids wait until BATCH_TARGET
  new pieces are pending (or WAIT_CHARS characters wait); those are merged in one batch into
  their lists (which the cache keeps as their ids), and the waiting ids are joined (``extend``
  reads a filled list as it reads a tuple).

``encode_many(texts)`` runs the blocks of all the texts through the same loop, each block's ids onto
its own text's list, so that the new pieces of a batch of short texts are merged together too.
"""
from __future__ import annotations

import weakref
from collections import defaultdict, deque
from itertools import compress, islice
from typing import Callable

import numpy as np

from ..nogc import gc_paused
from ..split.twins import chunk_finder, segment_cut
from ..text import span_words, utf8
from .batch_merge import INF, TokenTable, merge_pieces
from .rank_merge import LONG_PIECE, byte_pair_encode

CACHE_LIMIT = 1 << 19  # pieces remembered; then the cache is emptied
ENCODE_BLOCK = 1 << 13  # characters per regex call on long texts: bounds the memory of the pieces
PROBE_BLOCK = 1 << 10  # characters of a long text's first block while the token table is undecided
MAX_CACHED_PIECE = 256  # characters; a rare huge piece is not worth its memory
TABLE_COST = 32  # tokens whose share of building the token table costs about one piece merged in Python
BATCH_TARGET = 1 << 14  # pending pieces that waiting blocks gather before they are merged together
WAIT_CHARS = 1 << 22  # characters that may wait (it bounds the memory of their id lists)
BATCH_MIN = 128  # fewer new pieces are merged one by one
# Pieces of LONG_PIECE bytes and more merge one by one (the heap version). Shorter long ones
# batch too: their last rounds finish in Python anyway (batch_merge.TAIL).
BATCH_MAX_BYTES = LONG_PIECE
TABLE_PIECE = 1 << 16  # bytes: a piece this long pays for building the token table (its lookups)


def extend_all(out: list[int], seqs) -> None:
    """Append the ids of every tuple or list in ``seqs`` to ``out``. ``out.extend`` copies a tuple or
    list at once, where ``out += chain.from_iterable(seqs)`` makes an iterator per piece and appends
    one id at a time."""
    deque(map(out.extend, seqs), maxlen=0)


class _Room:
    """The cache's bound on memory, shared by both kinds of cache."""

    def make_room(self, n: int) -> None:
        """Empty the cache when ``n`` more pieces would pass the limit."""
        if len(self) + n > CACHE_LIMIT:
            self.clear()


class PieceCache(_Room, dict):
    """piece -> its ids (a tuple, or what ``ids`` makes of one); a missing piece that spells a token
    (``ranks``) is that token, any other is merged (``merge(piece)``, in the same form); either is
    remembered and returned."""

    def __init__(self, ranks: dict[bytes, int], merge: Callable, ids: Callable = tuple):
        super().__init__()
        self.ranks, self.merge, self.ids = ranks, merge, ids

    def __missing__(self, piece: str):
        # A text's first pieces all miss, most of them tokens: those are looked up here, and the
        # merge's calls are made only for the others.
        token = self.ranks.get(utf8(piece))
        ids = self.ids((token,)) if token is not None else self.merge(piece)
        if len(piece) <= MAX_CACHED_PIECE:
            self.make_room(1)
            self[piece] = ids
        return ids


class BatchCache(_Room, defaultdict):
    """The piece cache while batching: a missing piece gets an empty list (in C: no Python code
    per new piece; a bytearray in a ``PackedEncoder``) that its later occurrences find too, and
    that is filled with its ids when its batch is merged. The pieces added since the last batch are
    the last ``pending`` keys."""

    def __init__(self, cache: PieceCache, pending: type = list):
        super().__init__(pending, cache)
        self.settled = len(self)  # keys before the pending ones

    @property
    def pending(self) -> int:
        return len(self) - self.settled

    def pending_pieces(self) -> list[str]:
        return list(islice(reversed(self), self.pending))

    def pending_lists(self) -> list[list[int]]:
        """The lists of ``pending_pieces()``, in the same order (read off the values, no lookups)."""
        return list(islice(reversed(self.values()), self.pending))


class PieceEncoder:
    """Encodes text (surrogates already repaired, or escaped bytes) as tiktoken's core does.

    The form of a piece's ids in the cache, and how they are joined, are hooks (``_ids``,
    ``_pending``, ``_join``, ``_put``) that ``PackedEncoder`` overrides."""

    _pending = list  # a new piece's ids while it waits for its batch: filled in place
    _ids = staticmethod(tuple)  # a piece's ids (a sequence of ints) as the cache keeps them
    _join = staticmethod(extend_all)  # (out, seqs): the cached ids of consecutive pieces onto out

    @staticmethod
    def _put(lists: list, ids: np.ndarray, stops: np.ndarray | None) -> None:
        """Fill each of ``lists`` (``_pending``'s) with its run of ``ids`` (int64), the runs ending at
        ``stops`` (int64, increasing; None: one id each)."""
        flat = ids.tolist()
        if stops is None:
            deque(map(list.append, lists, flat), maxlen=0)
        else:
            stops = stops.tolist()
            deque(map(list.extend, lists, map(flat.__getitem__, map(slice, [0] + stops[:-1], stops))), maxlen=0)

    def __init__(self, ranks: dict[bytes, int], pattern: str):
        self.ranks = ranks
        self.findall = chunk_finder(pattern)
        self.cut = segment_cut(pattern)
        self.table_after = len(ranks) // TABLE_COST  # pieces merged one by one before batching
        self._table: TokenTable | None | bool = None  # built when first worth it; False: cannot be
        self.clear()

    def clear(self) -> None:
        """Empty the piece cache."""
        method = weakref.WeakMethod(self._merge_one)  # the cache is this encoder's: no cycle through it
        self.cache = PieceCache(self.ranks, lambda piece: method()(piece), self._ids)
        self.merged = 0  # pieces merged one by one (not those that spell a token)
        if self._table:
            self.cache = BatchCache(self.cache, self._pending)

    def share_table(self) -> None:
        """Build the token table now, if it can be and is not yet: processes forked next inherit it
        instead of each building its own."""
        if self._table is None:
            self._token_table()

    def __call__(self, text: str) -> list[int]:
        out: list[int] = []
        self._run(((out, block) for block in self._blocks(text)), len(text))
        return out

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """``[self(t) for t in texts]``, with the new pieces of all the texts merged together (a batch
        of short texts then costs what their concatenation would)."""
        outs: list[list[int]] = [[] for _ in texts]
        self._run(((out, block) for out, t in zip(outs, texts) for block in self._blocks(t)), sum(map(len, texts)))
        return outs

    def _run(self, jobs, n_chars: int) -> None:
        """Encode each ``(out, block)`` of the iterator ``jobs`` onto its ``out``; ``n_chars``: the
        characters of all the blocks."""
        if n_chars <= ENCODE_BLOCK:
            self._encode(jobs, n_chars)
            return
        # A long text creates many tuples and lists (the ids of new pieces, the lists of ids): the
        # collector would scan the whole heap for cycles over and over.
        with gc_paused():
            self._encode(jobs, n_chars)

    def _encode(self, jobs, n_chars: int) -> None:
        cache, find = self.cache, self.findall
        if self._table:
            self._batched(jobs)
            return
        done, before = 0, self.merged
        for out, block in jobs:
            self._join(out, map(cache.__getitem__, find(block)))
            done += len(block)
            # Worth it once the pieces merged one by one reach table_after: those of earlier calls,
            # and this call's projected over the rest of its text at its rate so far (a call with
            # no new piece, or no text, builds nothing).
            if self._table is None and done and (
                    self.merged * done + (self.merged - before) * (n_chars - done) >= self.table_after * done):
                self._token_table()
            if self._table:  # built just now, or for a long piece (_merge_one)
                self._batched(jobs)
                break

    def _batched(self, jobs) -> None:
        """Encode ``jobs`` (as ``_run``), new pieces merged together (see the module docstring)."""
        cache, find = self.cache, self.findall
        wait: list = []  # the id tuples (and pending lists) of the blocks that wait
        marks: list = []  # [out, end]: wait[previous end:end] belongs to out
        n_chars = 0
        try:
            for out, block in jobs:
                wait += map(cache.__getitem__, find(block))
                if marks and marks[-1][0] is out:
                    marks[-1][1] = len(wait)
                else:
                    marks.append([out, len(wait)])
                n_chars += len(block)
                if not cache.pending or cache.pending >= BATCH_TARGET or n_chars >= WAIT_CHARS:
                    self._flush(wait, marks)
                    n_chars = 0
            self._flush(wait, marks)
        finally:
            for piece in cache.pending_pieces():  # an error left them: no list may stay in the cache
                del cache[piece]

    def _blocks(self, text: str):
        """``text`` in blocks of about ENCODE_BLOCK characters cut at chunk boundaries; the first
        one PROBE_BLOCK while the token table is undecided, which its new pieces decide."""
        if len(text) <= ENCODE_BLOCK or self.cut is None:
            yield text
            return
        pos, n, search = 0, len(text), self.cut.search
        size = PROBE_BLOCK if self._table is None else ENCODE_BLOCK
        while pos < n:
            m = search(text, pos + size) if pos + size < n else None
            end = m.start() if m else n
            yield text[pos:end]
            pos, size = end, ENCODE_BLOCK

    def _flush(self, wait: list, marks: list) -> None:
        """Merge the pending pieces together into their lists (which the cache keeps as their ids),
        then move the waiting ids onto their ``out`` lists (``marks``: as in ``_batched``)."""
        cache = self.cache
        if cache.pending:
            new = cache.pending_pieces()
            lens = np.fromiter(map(len, new), dtype=np.int64, count=len(new))
            self._fill(new, cache.pending_lists(), lens)
            for i in np.flatnonzero(lens > MAX_CACHED_PIECE).tolist():
                del cache[new[i]]  # a rare huge piece is not worth its memory
            cache.make_room(0)
            cache.settled = len(cache)
        if len(marks) == 1:
            self._join(marks[0][0], wait)
        else:
            start = 0
            for out, end in marks:
                self._join(out, wait[start:end])
                start = end
        wait.clear()
        marks.clear()

    def _fill(self, pieces: list[str], lists: list[list[int]], lens: np.ndarray) -> None:
        """Extend each list with the ids of its piece (the pieces distinct, ``lens`` their lengths in
        characters: int64, (len(pieces),)): the token a piece spells, else merged by NumPy
        together, the long ones (and all of them when they hold escaped bytes, whose byte counts
        differ) one by one."""
        one_by_one = self._merge_one
        data = None
        if len(pieces) >= BATCH_MIN:   # fewer go one by one: no join for them
            joined = "".join(pieces)
            try:
                data = joined.encode("utf-8")
            except UnicodeEncodeError:
                pass
        if data is None:
            deque(map(self._pending.extend, lists, map(one_by_one, pieces)), maxlen=0)
            return
        ends = np.cumsum(lens)
        if len(data) != len(joined):  # the byte where each character starts, then each piece
            first = np.flatnonzero((np.frombuffer(data, np.uint8) & 0xC0) != 0x80)
            ends = np.append(first, len(data))[ends]
        sizes = np.diff(ends, prepend=0)
        token = self._table.spans(data, span_words(np.frombuffer(data, np.uint8)).astype(np.uint64),
                                  ends - sizes, ends)
        keep = token == INF  # the pieces to merge
        if not keep.all():
            self._put(list(compress(lists, (~keep).tolist())), token[~keep], None)
        alone = keep & ((sizes >= BATCH_MAX_BYTES) | (sizes == 0))
        if alone.any():
            alone_list = alone.tolist()
            deque(map(self._pending.extend, compress(lists, alone_list),
                      map(one_by_one, compress(pieces, alone_list))), maxlen=0)
            keep &= ~alone
        if not keep.all():
            lists = list(compress(lists, keep.tolist()))
            sizes, ends = sizes[keep], ends[keep]
            if not lists:
                return
        # Longest first (merge_pieces reads only the front that is still merging): the bytes are
        # gathered piece by piece in that order.
        order = np.argsort(-sizes, kind="stable")
        sorted_sizes = sizes[order]
        starts = np.zeros(order.size + 1, dtype=np.int64)
        np.cumsum(sorted_sizes, out=starts[1:])
        src = np.repeat(ends[order] - starts[1:], sorted_sizes) + np.arange(starts[-1])
        counts, ids = merge_pieces(self._table, np.frombuffer(data, np.uint8)[src], starts)
        # The ids put back in the pieces' own order in NumPy, so that the lists are filled in turn
        # (not each list looked up in the sorted order).
        back = np.empty_like(order)
        back[order] = np.arange(order.size)
        first = (np.cumsum(counts) - counts)[back]  # where each piece's ids start in ``ids``
        counts = counts[back]
        stop = np.cumsum(counts)
        self._put(lists, ids[np.repeat(first - (stop - counts), counts) + np.arange(ids.size)], stop)

    def _merge_one(self, piece: str) -> tuple[int, ...]:
        """The ids of one piece alone (``rank_merge.byte_pair_encode``: the token it spells, else
        merged); a long one's large levels read the token table (built now for a piece of
        TABLE_PIECE bytes or more)."""
        b = utf8(piece)
        spans = None
        if len(b) >= LONG_PIECE:
            if len(b) >= TABLE_PIECE and self._table is None:
                self._token_table()
            spans = self._table.reader(b) if self._table else None
        ids = byte_pair_encode(self.ranks, b, spans)
        self.merged += len(ids) != 1  # one id: the piece spells a token (a merge ends in two or more)
        return self._ids(ids)

    def _token_table(self) -> bool:
        """Build the token table and start batching; False when it cannot be built for these ranks."""
        try:
            self._table = TokenTable(self.ranks)
        except ValueError:
            self._table = False
            return False
        self.cache = BatchCache(self.cache, self._pending)
        return True
