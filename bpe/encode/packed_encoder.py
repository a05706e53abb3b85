"""Encoding into the bytes of an int32 array: the encoder of a batch's worker process.

A worker sends its ids to the calling process as the bytes of one array (``parallel_encode``).
Encoding into lists and packing the lists costs a pass over every id for each; here the cache
keeps each piece's ids as their int32 bytes, so that a block's ids are one ``b"".join`` of its
pieces' (a copy per piece, in C), and a text's are the join of its blocks'.

The pieces the ``PieceEncoder`` it is made from has met (its cache, which a forked worker
inherits) are a second cache: such a piece is packed from there, not merged again (an empty
entry there, a piece still waiting for its batch, counts as not met).
"""
from __future__ import annotations

from array import array
from collections import deque
from itertools import compress

import numpy as np

from .piece_encoder import PieceEncoder

ID_TYPE = np.int32  # the ids' type in the bytes, native byte order
ID_SIZE = np.dtype(ID_TYPE).itemsize  # bytes an id takes
_CODE = next(c for c in "ilh" if array(c).itemsize == ID_SIZE)  # array's code for it


def pack_ids(ids) -> bytes:
    """Ids (a sequence of ints) as the bytes of an ID_TYPE array."""
    return array(_CODE, ids).tobytes()


def _join(out: list, seqs) -> None:
    out.append(b"".join(seqs))


def _put(lists: list, ids: np.ndarray, stops: np.ndarray | None) -> None:
    data = ids.astype(ID_TYPE).tobytes()
    ends = (np.arange(1, ids.size + 1) if stops is None else stops) * ID_SIZE
    ends = ends.tolist()
    deque(map(bytearray.extend, lists, map(data.__getitem__, map(slice, [0] + ends[:-1], ends))), maxlen=0)


class PackedEncoder(PieceEncoder):
    """``PieceEncoder(ranks, pattern)`` of ``encoder``, whose results are bytes: the ids as ID_TYPE,
    native byte order (``np.frombuffer(encoder(text), ID_TYPE).tolist() == encoder(text)``). The
    ids must fit ID_TYPE."""

    _pending = bytearray
    _ids = staticmethod(pack_ids)
    _join = staticmethod(_join)
    _put = staticmethod(_put)

    def __init__(self, encoder: PieceEncoder):
        self.ranks, self.findall, self.cut = encoder.ranks, encoder.findall, encoder.cut
        self.table_after = encoder.table_after
        self._table = encoder._table  # noqa: SLF001 - shared, read only
        self.known = encoder.cache  # piece -> tuple of ids, read only
        self.clear()

    def __call__(self, text: str) -> bytes:
        return b"".join(super().__call__(text))

    def encode_many(self, texts: list[str]) -> list[bytes]:
        return [b"".join(out) for out in super().encode_many(texts)]

    def _merge_one(self, piece: str) -> bytes:
        ids = self.known.get(piece)
        return pack_ids(ids) if ids else super()._merge_one(piece)

    def _fill(self, pieces: list[str], lists: list, lens: np.ndarray) -> None:
        found = list(map(self.known.get, pieces)) if self.known else []
        if not any(found):
            super()._fill(pieces, lists, lens)
            return
        old = list(map(bool, found))
        new = [not o for o in old]
        deque(map(bytearray.extend, compress(lists, old), map(pack_ids, compress(found, old))), maxlen=0)
        if any(new):
            super()._fill(list(compress(pieces, new)), list(compress(lists, new)), lens[np.array(new)])
