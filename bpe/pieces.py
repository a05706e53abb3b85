"""Text without special tokens -> ids: split with the pattern, merge each piece, cache the results.

``PieceEncoder(ranks, pattern)(text)`` is the hot path of encoding. Pieces that are one
token map to their id through one dict lookup each, in C; only the other pieces run Python
code (``bytepair.byte_pair_encode``), and their ids are cached by piece.
"""
from __future__ import annotations

from .bytepair import byte_pair_encode, utf8
from .patterns import segment_cut
from .split import chunk_finder

CACHE_LIMIT = 1 << 19  # distinct pieces remembered; the cache is cleared when full
ENCODE_BLOCK = 1 << 13  # characters per regex call on long texts (more blocks are pure ASCII)


class PieceEncoder:
    """Encodes text (surrogates already repaired, or escaped bytes) as tiktoken's core does."""

    def __init__(self, ranks: dict[bytes, int], pattern: str):
        self.ranks = ranks
        self.findall = chunk_finder(pattern)
        self.cut = segment_cut(pattern)
        self.clear()

    def clear(self) -> None:
        """Empty the piece cache: ``one`` (piece -> id, for pieces of one token) and ``multi``
        (piece -> ids). ``one`` starts with every token that is whole UTF-8 text, since a
        piece equal to a token encodes to that token (as in tiktoken)."""
        one: dict[str, int] = {}
        for b, i in self.ranks.items():
            try:
                one[b.decode("utf-8")] = i
            except UnicodeDecodeError:
                pass
        self.one = one
        self.multi: dict[str, list[int]] = {}

    def __call__(self, text: str) -> list[int]:
        if len(text) <= ENCODE_BLOCK or self.cut is None:
            return self._pieces(text)
        # Long texts go in blocks cut at chunk boundaries, to bound the memory of the pieces.
        out: list[int] = []
        pos = 0
        n = len(text)
        while pos < n:
            m = self.cut.search(text, pos + ENCODE_BLOCK) if pos + ENCODE_BLOCK < n else None
            end = m.start() if m else n
            out += self._pieces(text[pos:end])
            pos = end
        return out

    def _pieces(self, text: str) -> list[int]:
        # Most pieces are one token: one C-level map over the pieces gives their ids, and
        # None marks the rest (pieces of several tokens, and pieces not seen yet), which
        # list.index finds in C; only those run Python code.
        pieces = self.findall(text)
        one = self.one
        ids = list(map(one.get, pieces))
        try:
            i = ids.index(None)
        except ValueError:
            return ids
        multi = self.multi
        if len(one) + len(multi) + len(pieces) > CACHE_LIMIT:
            self.clear()
            one, multi = self.one, self.multi
        ranks = self.ranks
        out = ids[:i]
        while True:
            piece = pieces[i]
            v = one.get(piece)  # it may have been a miss earlier in this text
            if v is not None:
                out.append(v)
            else:
                seq = multi.get(piece)
                if seq is None:
                    seq = byte_pair_encode(ranks, utf8(piece))
                    if len(seq) == 1:
                        one[piece] = seq[0]
                    elif len(piece) <= 256:  # a rare huge piece is not worth its memory
                        multi[piece] = seq
                out += seq
            try:
                j = ids.index(None, i + 1)
            except ValueError:
                out += ids[i + 1 :]
                return out
            out += ids[i + 1 : j]
            i = j
