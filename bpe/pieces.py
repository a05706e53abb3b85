"""Text without special tokens -> ids: split with the pattern, merge each piece, cache the results.

``PieceEncoder(ranks, pattern)(text)`` is the hot path of encoding. The cache maps a piece to
the tuple of its ids; it starts with every token that is whole UTF-8 text (a piece equal to a
token encodes to that token, as in tiktoken). Looking the pieces up and joining their ids is
one chain of C calls (``map`` of the cache's ``__getitem__``, ``chain.from_iterable``); only a
piece not seen yet runs Python code (the cache's ``__missing__``: ``bytepair.merge_small``).
"""
from __future__ import annotations

from itertools import chain

from .bytepair import LONG_PIECE, byte_pair_encode, merge_small, utf8
from .patterns import segment_cut
from .split import chunk_finder

CACHE_LIMIT = 1 << 19  # pieces remembered beyond the tokens; then the cache is emptied (back to the tokens)
ENCODE_BLOCK = 1 << 13  # characters per regex call on long texts, to bound the memory of the pieces
MAX_CACHED_PIECE = 256  # characters; a rare huge piece is not worth its memory


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

    def __missing__(self, piece: str) -> tuple[int, ...]:
        try:
            b = piece.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            b = utf8(piece)
        ids = tuple(merge_small(self.ranks, b) if len(b) < LONG_PIECE else byte_pair_encode(self.ranks, b))
        if len(piece) <= MAX_CACHED_PIECE:
            if len(self) >= CACHE_LIMIT + len(self.base):
                self.clear()
                self.update(self.base)
            self[piece] = ids
        return ids


class PieceEncoder:
    """Encodes text (surrogates already repaired, or escaped bytes) as tiktoken's core does."""

    def __init__(self, ranks: dict[bytes, int], pattern: str):
        self.ranks = ranks
        self.findall = chunk_finder(pattern)
        self.cut = segment_cut(pattern)
        self.clear()

    def clear(self) -> None:
        """Empty the piece cache (back to the tokens that are whole UTF-8 text)."""
        self.cache = PieceCache(self.ranks)

    def __call__(self, text: str) -> list[int]:
        get, findall = self.cache.__getitem__, self.findall
        if len(text) <= ENCODE_BLOCK or self.cut is None:
            return list(chain.from_iterable(map(get, findall(text))))
        # Long texts go in blocks cut at chunk boundaries, to bound the memory of the pieces.
        out: list[int] = []
        pos = 0
        n = len(text)
        search = self.cut.search
        while pos < n:
            m = search(text, pos + ENCODE_BLOCK) if pos + ENCODE_BLOCK < n else None
            end = m.start() if m else n
            out += chain.from_iterable(map(get, findall(text[pos:end])))
            pos = end
        return out
