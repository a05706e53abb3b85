"""The early merges of training in NumPy: every chunk's tokens as linked arrays.

A merge of a frequent pair changes tens of thousands of chunks, and the Python loop of
`merges.train_merges` pays about a microsecond for each (half of training 50 MB of code went
to the first 3,000 merges). Here the corpus's distinct chunks are one array of token ids with
``nxt``/``prv`` links between the live tokens of a chunk, and the index maps a pair to the
positions of its left token. A merge is then a few array passes over the pair's positions,
and Python runs once per distinct neighbour pair, not once per occurrence.

Every array pass has a fixed cost of microseconds, so once the merges' pairs occur in few
places the Python loop is faster: ``ArrayMerges.words`` and ``chunks_of`` hand the state over
to it. The counts and merges are the loop's exactly (tested against it); see merges.py for the
rules (left-to-right merges without overlap, the tie order).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

SHIFT = 21  # a pair's key is left << 21 | right, as in the merge loop's heap (ids < 2**21)
MASK = (1 << SHIFT) - 1


def _groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A stable order that groups equal keys, and where each group starts in it."""
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    new = np.empty(k.size, dtype=bool)
    new[0] = True
    np.not_equal(k[1:], k[:-1], out=new[1:])
    return order, np.flatnonzero(new)


def _shifted(first: np.ndarray, rest: np.ndarray, at_end: bool) -> np.ndarray:
    """``rest`` with ``first`` put before it (``at_end`` False) or after it: one allocation."""
    out = np.empty(rest.size + 1, dtype=rest.dtype)
    if at_end:
        out[:-1], out[-1] = rest, first
    else:
        out[0], out[1:] = first, rest
    return out


class ArrayMerges:
    """The chunks ``words`` (strs of one character per byte, as merges._words makes them) with
    their ``counts``, as linked token arrays, a position index and the pair counts.

    pairs: pair (2-character str) -> count weighted by the chunks' counts, for the caller's heap.
    """

    def __init__(self, words: list[str], counts: list[int]):
        if sum(map(len, words)) >= 1 << 31:
            raise ValueError("the distinct chunks hold 2**31 bytes or more: more than int32 positions reach")
        sizes = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        self.tok = np.frombuffer("".join(words).encode("latin-1"), dtype=np.uint8).astype(np.int32)
        self.chunk = np.repeat(np.arange(len(words), dtype=np.int32), sizes)     # chunk of a position
        self.counts = np.array(counts, dtype=np.int64)                           # of a chunk
        L = self.tok.size
        ends = np.cumsum(sizes) - 1
        self.nxt = np.arange(1, L + 1, dtype=np.int32)
        self.nxt[ends] = -1
        self.prv = np.arange(-1, L - 1, dtype=np.int32)
        self.prv[ends[:-1] + 1] = -1
        self.index: dict[int, list[np.ndarray]] = {}  # pair key -> arrays of left positions (a superset)
        self.pairs: defaultdict[str, int] = defaultdict(int)
        left = np.flatnonzero(self.nxt >= 0).astype(np.int32)  # positions: int32 (nxt's dtype) halves the index
        self._grow(self.tok[left].astype(np.int64) << SHIFT | self.tok[left + 1], self.counts[self.chunk[left]], left)

    def listed(self, key: int) -> int:
        """How many positions the index lists for the pair ``key`` (some may have lost it)."""
        return sum(map(len, self.index.get(key, ())))

    def merge(self, key: int, c: int) -> list[str]:
        """Merge the pair ``key`` into the new token ``c`` everywhere. Returns the pairs whose
        count grew (those holding ``c``), for the heap; ``pairs`` of the merged pair is left to
        the caller."""
        a, b = key >> SHIFT, key & MASK
        tok, nxt, prv = self.tok, self.nxt, self.prv
        listed = self.index.pop(key, None)
        if listed is None:
            return []
        # Positions are never listed twice for one pair: a position's pair only changes to one
        # holding a new token.
        p = self._occurrences(np.sort(np.concatenate(listed) if len(listed) > 1 else listed[0]), a, b)
        if p.size == 0:
            return []
        q, l = nxt[p], prv[p]
        r = nxt[q]
        w = self.counts[self.chunk[p]]
        after = _shifted(False, q[:-1] == l[1:], at_end=False)   # the previous occurrence ends just before
        before = _shifted(False, r[:-1] == p[1:], at_end=True)   # the next one starts just after
        has_l, has_r = l >= 0, r >= 0
        x = tok[l]
        lost_l = has_l & ~after
        self._shrink(np.concatenate([x[lost_l].astype(np.int64) << SHIFT | a, (b << SHIFT) | tok[r[has_r]].astype(np.int64)]),
                     np.concatenate([w[lost_l], w[has_r]]))
        tok[p], tok[q] = c, -1
        nxt[p] = r
        prv[r[has_r]] = p[has_r]
        # New pairs: (x, c) left of each occurrence (x = c after an adjacent one), and (c, y)
        # right of it unless the next occurrence starts there (that pair is its (c, c)).
        at_l = np.where(after, _shifted(0, p[:-1], at_end=False), l)[has_l]
        x = np.where(after, c, x)[has_l]
        gain_r = has_r & ~before
        return self._grow(np.concatenate([x.astype(np.int64) << SHIFT | c, (c << SHIFT) | tok[r[gain_r]].astype(np.int64)]),
                          np.concatenate([w[has_l], w[gain_r]]), np.concatenate([at_l, p[gain_r]]))

    def _occurrences(self, p: np.ndarray, a: int, b: int) -> np.ndarray:
        """The listed positions ``p`` (sorted) that still start the pair, left to right without
        overlap: in a run ``a a a a`` of the pair (a, a) every second one, as str.replace does."""
        q = self.nxt[p]
        p = p[q >= 0]
        q = self.nxt[p]
        p = p[(self.tok[p] == a) & (self.tok[q] == b)]
        if a != b or p.size < 2:
            return p
        first = _shifted(True, self.nxt[p[:-1]] != p[1:], at_end=False)  # a run of chained starts begins
        i = np.arange(p.size)
        return p[(i - np.maximum.accumulate(np.where(first, i, 0))) % 2 == 0]

    def _shrink(self, keys: np.ndarray, w: np.ndarray) -> None:
        if keys.size == 0:
            return
        order, starts = _groups(keys)
        pairs = self.pairs
        for k, d in zip(keys[order[starts]].tolist(), np.add.reduceat(w[order], starts).tolist()):
            pairs[chr(k >> SHIFT) + chr(k & MASK)] -= d

    def _grow(self, keys: np.ndarray, w: np.ndarray, at: np.ndarray) -> list[str]:
        """Add each pair's weight to ``pairs`` and its positions to the index; the pairs, as strs."""
        if keys.size == 0:
            return []
        order, starts = _groups(keys)
        at = at[order]
        bounds = starts.tolist() + [keys.size]
        pairs, index = self.pairs, self.index
        grown = []
        for k, d, s, e in zip(keys[order[starts]].tolist(), np.add.reduceat(w[order], starts).tolist(),
                              bounds[:-1], bounds[1:]):
            p = chr(k >> SHIFT) + chr(k & MASK)
            pairs[p] += d
            index.setdefault(k, []).append(at[s:e])
            grown.append(p)
        return grown

    # ---- handing over to the Python loop ------------------------------------------------

    def words(self) -> list[str]:
        """Each chunk's live tokens as a str of one character per token, in chunk order."""
        live = self.tok >= 0
        text = self.tok[live].astype(np.uint32).tobytes().decode("utf-32-le")
        ends = np.cumsum(np.bincount(self.chunk[live], minlength=int(self.chunk[-1]) + 1 if self.chunk.size else 0))
        ends = ends.tolist()
        return [text[s:e] for s, e in zip([0] + ends[:-1], ends)]

    def chunks_of(self, key: int) -> list[int]:
        """The chunks that held the pair ``key`` at the hand-over, each once, in increasing order
        (removing the pair from the index). Positions that had lost it are dropped here: in the
        Python loop each costs a chunk lookup and a failed str.find."""
        at = self.index.pop(key, None)
        if at is None:
            return []
        p = np.concatenate(at) if len(at) > 1 else at[0]
        q = self.nxt[p]
        p = p[(q >= 0) & (self.tok[p] == key >> SHIFT) & (self.tok[q] == key & MASK)]
        return np.unique(self.chunk[p]).tolist()
