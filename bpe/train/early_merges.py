"""Training, the early merges in NumPy: every chunk's tokens as linked arrays.

A merge of a frequent pair changes tens of thousands of chunks, and the Python loop of
``merge_learner.train_merges`` pays for each of them in the interpreter. Here the corpus's distinct chunks are one array of token ids with
``nxt``/``prv`` links between the live tokens of a chunk, and an index of where each pair of
bytes and each pair made by a merge started. A merge is then a few array passes over the
pair's positions, and Python runs once per distinct neighbour pair, not once per occurrence.

Every array pass has a fixed cost of microseconds, so a merge at few positions runs in Python
over memoryviews of the same arrays (``FEW``), and once the merges' pairs occur in few places on
average the Python loop is faster: ``ArrayMerges.hand_over`` and ``chunks_of`` hand the state
over to it. The counts and merges are the loop's exactly (tested against it); see
``merge_learner`` for the rules (left-to-right merges without overlap, the tie order).
"""
from __future__ import annotations

from bisect import bisect_left
from itertools import compress, repeat

import numpy as np

from ..radix import radix_order
from .chunk_table import run_starts

SHIFT = 21  # a pair's key is left << SHIFT | right (ids < 2**21), here and in merge_learner's loop
MASK = (1 << SHIFT) - 1
EMPTY = np.zeros(0, dtype=np.int32)
EMPTY64 = np.zeros(0, dtype=np.int64)
# The pairs made with a token are indexed by their other token, the side (RIGHT | y for a pair
# (c, y)), and where each starts: one int64 ``side << POS | start`` (22 + 41 bits).
RIGHT = 1 << SHIFT
POS = 41
POS_MASK = (1 << POS) - 1
# A merge at fewer positions than this (and a pair looked for among fewer) runs in Python over
# memoryviews of the arrays, which read and write single ints: an array pass costs microseconds
# however few the positions, and a merge makes dozens.
FEW = 48
# A merge whose pairs made have fewer distinct neighbours than this counts them in Python
# (``_account``): a few dict operations each, where the array form makes two dozen calls.
FEW_SIDES = 64
# A merge at this many positions or more sorts the pairs it made by a radix sort of 16-bit sides
# (a token below SIDE16 - 1 beside the bit SIDE16 of a right side), not by a sort of int64 keys.
RADIX_MIN = 1024
SIDE_BITS = 15
SIDE16 = 1 << SIDE_BITS


def _sums(keys: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys and each one's total weight. The grouping sort is not a stable one: on
    int64 keys NumPy's stable sort is several times slower than its quicksort."""
    if keys.size == 0:
        return EMPTY64, EMPTY64
    order = np.argsort(keys)
    k = keys[order]
    first = np.flatnonzero(run_starts(k))
    return k[first], np.add.reduceat(weights[order], first)


def _within(sizes: np.ndarray) -> np.ndarray:
    """For chunks of these sizes end to end, whether each position and the next are in one chunk:
    (sum(sizes) - 1,) bool, where a pair may start."""
    inner = np.ones(max(int(sizes.sum()) - 1, 0), dtype=bool)
    inner[(np.cumsum(sizes) - 1)[:-1]] = False
    return inner


def word_pairs(words: list[str], weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair in the Python loop's words (as ``hand_over`` gives them, ``weights`` (C,) int64
    their counts), counted again: int64 keys and counts. See ``ArrayMerges.live_pairs``."""
    sizes = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    tok = np.frombuffer("".join(words).encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int64)
    keys = (tok[:-1] << SHIFT | tok[1:])[_within(sizes)]
    return _sums(keys, np.repeat(weights, sizes - 1))


def _side_pairs(sides: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    """The pair key of each side (as _index_made gives them) with the token ``c``: a left
    neighbour x, (x, c); a right one RIGHT | y, (c, y). Also whether each side is a right one."""
    right = sides >= RIGHT
    low = sides & MASK
    return np.where(right, c << SHIFT | low, low << SHIFT | c), right


def _lost(a: int, b: int, c: int, sides: np.ndarray, grown: np.ndarray, right: np.ndarray,
          made: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs that merging (a, b) into c lost and by how much (int64 keys, negative counts),
    read off the pairs it made (``sides``, their keys ``grown`` and counts ``made``) without a
    sort of their own: (x, c) made is (x, a) lost and (c, y) made is (b, y) lost, except (c, c),
    made after an adjacent occurrence: there the (b, a) between the two is lost once, on the
    right of the one before (which made no (c, y) there). (b, a) can also be lost on both sides
    of one occurrence (b a b)."""
    keys = grown + np.where(right, (b - c) << SHIFT, a - c)
    cc = sides == c
    followed = int(np.add.reduce(made[cc]))  # the weight of the occurrences that the next one follows at once
    left = ~cc
    keys, lost = keys[left], -made[left]
    ba = b << SHIFT | a
    twice = keys == ba
    if followed or np.logical_or.reduce(twice):  # one entry for (b, a)
        total = int(lost[twice].sum()) - followed
        keys, lost = np.append(keys[~twice], ba), np.append(lost[~twice], total)
    return keys, lost


def _distinct_pairs(left: np.ndarray, right: np.ndarray, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (pair key, chunk) of the pairs (left, right) in ``chunks`` (nondecreasing, as
    positions give them), sorted: int64 keys, chunk numbers. A stable radix sort by the pair
    alone keeps each pair's chunks in order, in linear time."""
    kb = int(max(left.max(initial=0), right.max(initial=0))).bit_length()
    pair = left.astype(np.int64) << kb | right
    order = radix_order(pair, 2 * kb)
    pair, chunks = pair[order], chunks[order]
    new = run_starts(pair)
    new[1:] |= chunks[1:] != chunks[:-1]  # each once
    pair, chunks = pair[new], chunks[new]
    return (pair >> kb) << SHIFT | pair & ((1 << kb) - 1), chunks.astype(np.int64)


class ArrayMerges:
    """Chunks as linked token arrays, where each pair formed, and the pair counts.

    data: (L,) uint8, the chunks' bytes end to end; sizes: (C,) int64, each chunk's length (at
    least 2); counts: (C,) int64, how often each chunk occurs.
    pairs: pair key (left << 21 | right) -> count weighted by the chunks' counts, for the caller:
    the pairs of bytes and those a merge made as many times as its ``floor`` or more.

    The index holds, for each pair of bytes, the positions of its left byte, and for each
    merged token, the pairs made with it at its merge and where each started. A pair forms only
    where the newer of its two tokens is made, so it is looked for there: a superset of where
    it is now, as small as its count was then, checked against the live tokens as it is read.
    """

    def __init__(self, data: np.ndarray, sizes: np.ndarray, counts: np.ndarray):
        # Positions and chunk numbers in int32 (half the memory of int64) while they fit.
        L = data.size
        pos = np.int32 if L + 1 < 1 << 31 else np.int64
        # One more position at the end, a sentinel: a link -1 (no neighbour) reads and writes it
        # there, its token -1 forms no pair, and so a merge needs no masks for the chunks' ends.
        self.tok = np.empty(L + 1, dtype=np.int32)
        self.tok[:L], self.tok[L] = data, -1
        self.chunk = np.repeat(np.arange(sizes.size + 1, dtype=pos), np.append(sizes, 1))  # chunk of a position
        self.chunk[L] = 0  # the sentinel's, never read: in range all the same
        self.counts = counts                                                     # of a chunk
        ends = np.cumsum(sizes) - 1
        self.nxt = np.arange(1, L + 2, dtype=pos)
        self.nxt[ends] = -1
        self.nxt[L] = -1
        self.prv = np.arange(-1, L, dtype=pos)
        self.prv[ends[:-1] + 1] = -1
        self.prv[L] = -1
        self.byte_pairs: dict[int, np.ndarray] = {}  # pair of bytes -> its left positions (increasing)
        # merged token -> the pairs made with it, where they started: (sides, where each side's
        # starts begin, starts) of an array merge; a few-positions merge's sorted list of ints
        # side << POS | start (fewer than FEW of each side, read in Python)
        self.made: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray] | list[int]] = {}
        self.pairs: dict[int, int] = {}
        self.table_keys = self.table_chunks = None  # the pairs at the hand-over (hand_over)
        self._index_bytes(data, sizes)
        self._views = tuple(map(memoryview, (self.tok, self.nxt, self.prv, self.chunk, self.counts)))

    def _index_bytes(self, data: np.ndarray, sizes: np.ndarray) -> None:
        """Count and index every pair of bytes: their 16-bit keys sum by bincount and sort by radix
        (no gather of the chunks' counts through the sorted order). Each temporary here is
        page-faulted in fresh, so as few are made as the steps need."""
        inner = _within(sizes)  # a pair starts at every byte but a chunk's last
        key16 = data[:-1].astype(np.uint16)
        key16 <<= 8
        key16 |= data[1:]
        key16 = key16[inner]
        if key16.size == 0:
            return
        keys = key16.astype(np.intp)  # bincount's type: one conversion for both counts, not one each
        # float64 weights (bincount would cast int64 ones to a copy): the sums of int64 counts
        # are exact below 2**53 occurrences
        weights = np.repeat(self.counts.astype(np.float64), sizes - 1)
        totals = np.bincount(keys, weights=weights, minlength=1 << 16)
        del weights
        ends = np.cumsum(np.bincount(keys, minlength=1 << 16)).tolist()
        del keys
        at = np.arange(inner.size, dtype=self.nxt.dtype)[inner][np.argsort(key16, kind="stable")]
        for k in np.flatnonzero(totals).tolist():
            key = (k >> 8) << SHIFT | (k & 255)
            self.pairs[key] = int(totals[k])
            self.byte_pairs[key] = at[ends[k - 1] if k else 0 : ends[k]]

    def live_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every live pair counted again: int64 keys and counts. Merges leave out of ``pairs`` the
        pairs they make fewer than their ``floor`` times (a pair's count never grows later), so
        that the caller needs this only once it lowers the floor."""
        p = np.flatnonzero(self.tok >= 0)
        q = self.nxt[p]
        paired = q >= 0
        p, q = p[paired], q[paired]
        return _sums(self.tok[p].astype(np.int64) << SHIFT | self.tok[q], self.counts[self.chunk[p]])

    def starts(self, key: int) -> np.ndarray | list[int]:
        """The positions, increasing, where the pair ``key`` starts now (runs of a pair of one
        token included whole): an intp array, or a list when a superset of fewer than FEW was
        read. A pair leaves the index: it is asked for to be merged."""
        a, b = key >> SHIFT, key & MASK
        tok, nxt = self.tok, self.nxt
        if a < 256 and b < 256:
            p = self.byte_pairs.pop(key, EMPTY)
        else:
            p = self._formed(a, b)
        if type(p) is list or p.size < FEW:  # a list of ints, not an array pass
            tok, nxt = self._views[:2]
            return [i for i in (p if type(p) is list else p.tolist()) if tok[i] == a and tok[nxt[i]] == b]
        p = p.astype(np.intp, copy=False)  # an int32 index is converted at each use: once here instead
        return p[(tok[p] == a) & (tok[nxt[p]] == b)]  # no next token (-1): the sentinel's -1

    def _formed(self, a: int, b: int) -> np.ndarray | list[int]:
        """Where the pair (a, b) formed, when its newer token was made (b's if they are equal):
        a superset of where it is now, increasing (a list where a few-positions merge made it)."""
        t, side = (b, a) if b >= a else (a, RIGHT | b)
        made = self.made.get(t)
        if made is None:
            return EMPTY
        if type(made) is list:
            lo, hi = bisect_left(made, side << POS), bisect_left(made, (side + 1) << POS)
            return [g & POS_MASK for g in made[lo:hi]]
        sides, first, where = made
        i = int(sides.searchsorted(side))
        if i == sides.size or sides[i] != side:
            return EMPTY
        return where[first[i] : first[i + 1] if i + 1 < first.size else where.size]

    def merge(self, key: int, c: int, p: np.ndarray | list[int], floor: int = 1) -> tuple[list[int], list[int]]:
        """Merge the pair ``key`` into the new token ``c`` at its starts ``p`` (``starts``).
        Returns the pairs whose count grew (those holding ``c``) counted ``floor`` times or more,
        and their counts, lists of ints for the heap; ``pairs`` of the merged pair is left to the
        caller."""
        a, b = key >> SHIFT, key & MASK
        if len(p) < FEW:
            return self._merge_few(a, b, c, p if type(p) is list else p.tolist(), floor)
        tok, nxt, prv = self.tok, self.nxt, self.prv
        if a == b and p.size > 1:  # in a run a a a a of the pair (a, a) every second one, as str.replace
            chained = np.zeros(p.size, dtype=bool)  # a start is the next token of the one before
            np.equal(nxt[p[:-1]], p[1:], out=chained[1:])
            i = np.arange(p.size)
            p = p[(i - np.maximum.accumulate(np.where(chained, 0, i))) % 2 == 0]
        if p.size == 0:
            return [], []
        n = p.size
        p = p.astype(np.intp, copy=False)  # each array below indexes twice or more: converted once
        q, l = nxt[p].astype(np.intp, copy=False), prv[p].astype(np.intp, copy=False)
        r = nxt[q].astype(np.intp, copy=False)
        # link[i + 1]: occurrence i + 1 starts right after occurrence i (q[i] is l[i + 1], and
        # r[i] is p[i + 1]). after: the previous occurrence ends just before; before: the next
        # one starts just after.
        link = np.zeros(n + 1, dtype=bool)
        np.equal(q[:-1], l[1:], out=link[1:n])
        after, before = link[:n], link[1:]
        # New: (x, c) left of each occurrence (after an adjacent one, (c, c) starting at that one),
        # and (c, y) right of it unless the next occurrence starts there (that pair is the next
        # one's (c, c)). Lost: what each neighbour's new pair was before, see _lost. No neighbour
        # (l or r -1) reads the sentinel's token -1, and a (c, y) left out is given -1 too: such
        # keys are negative, and _index_made drops them. A (c, c) starts where the occurrence
        # before starts, the position before its b (prv[l], read before the links change).
        x = tok[l].astype(np.int64)
        x[after] = c
        y = tok[r].astype(np.int64)
        y[before] = -1
        left_start = np.where(after, prv[l], l)
        tok[p], tok[q] = c, -1
        nxt[p] = r
        prv[r] = p
        sides, grown_n = self._index_made(c, x, left_start, y, p)
        if sides.size < FEW_SIDES:
            return self._account(a, b, c, sides.tolist(), grown_n.tolist(), floor)
        grown, right = _side_pairs(sides, c)
        lost, lost_n = _lost(a, b, c, sides, grown, right, grown_n)
        # The counts read, summed and written back in C (map, NumPy, dict.update), not by a Python
        # loop of pairs[k] += d. The pairs made hold c, which is new: they are not there yet.
        pairs = self.pairs
        lost = lost.tolist()
        old = np.fromiter(map(pairs.get, lost, repeat(-1)), dtype=np.int64, count=len(lost))
        kept = old >= 0  # the others were counted below the floor and dropped
        pairs.update(zip(compress(lost, kept.tolist()), (old + lost_n)[kept].tolist()))
        kept = grown_n >= floor
        grown, grown_n = grown[kept].tolist(), grown_n[kept].tolist()
        pairs.update(zip(grown, grown_n))
        return grown, grown_n

    def _merge_few(self, a: int, b: int, c: int, p: list[int], floor: int) -> tuple[list[int], list[int]]:
        """``merge`` one occurrence at a time, left to right, on the arrays' memoryviews: the same
        links, counts and result, and the same index as one sorted list (``made``). An occurrence
        whose a is gone was taken by the one before (a run of a pair (a, a)); one that the next
        follows at once makes no (c, y), and the next makes (c, c) and loses the (b, a) between
        the two."""
        tok, nxt, prv, chunk, counts = self._views
        gained: list[int] = []  # side << POS | start, as merge's
        made: dict[int, int] = {}  # side -> weight
        for i in p:
            if tok[i] != a:
                continue
            q = nxt[i]
            l, r = prv[i], nxt[q]
            n = counts[chunk[i]]
            x, y = tok[l], tok[r]
            if x >= 0:  # x == c: right after an occurrence merged in this pass
                gained.append(x << POS | l)
                made[x] = made.get(x, 0) + n
            if y >= 0 and not (y == a and tok[nxt[r]] == b):  # else the next occurrence starts at r
                y |= RIGHT
                gained.append(y << POS | i)
                made[y] = made.get(y, 0) + n
            tok[i], tok[q] = c, -1
            nxt[i] = r
            prv[r] = i
        if gained:
            gained.sort()
            self.made[c] = gained
        sides = sorted(made)
        return self._account(a, b, c, sides, list(map(made.__getitem__, sides)), floor)

    def _account(self, a: int, b: int, c: int, sides: list[int], made: list[int], floor: int,
                 ) -> tuple[list[int], list[int]]:
        """``merge``'s counts of a merge of few sides in Python: each side's pair made (``made``, its
        weight) and the pair it lost, as _side_pairs and _lost read them off the arrays."""
        pairs = self.pairs
        pget = pairs.get
        grown, grown_n = [], []
        for side, n in zip(sides, made):
            if side >= RIGHT:  # (c, y) made, (b, y) lost
                k, gone = c << SHIFT | side & MASK, b << SHIFT | side & MASK
            else:  # (x, c) made, (x, a) lost; (c, c): the (b, a) between two occurrences
                k, gone = side << SHIFT | c, (b if side == c else side) << SHIFT | a
            old = pget(gone)
            if old is not None:  # else counted below the floor and dropped
                pairs[gone] = old - n
            if n >= floor:
                grown.append(k)
                grown_n.append(n)
        pairs.update(zip(grown, grown_n))  # they hold c, which is new: none was there
        return grown, grown_n

    def _index_made(self, c: int, x: np.ndarray, left: np.ndarray, y: np.ndarray, p: np.ndarray,
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Index the pairs made with ``c`` by side (the neighbour token, with RIGHT for pairs
        (c, y)), starts increasing within one: (x, c) starting at ``left`` and (c, y) at ``p``, for
        each occurrence (int64 arrays, p increasing; x or y -1: none). Returns the distinct sides,
        increasing, and each one's total weight."""
        n = p.size
        if 2 * n < RADIX_MIN or c >= SIDE16 - 1:
            gained = np.concatenate((x << POS | left, (y | RIGHT) << POS | p))
            gained.sort()  # unique values: starts in order within a side
            gained = gained[int(gained.searchsorted(0)):]
            sides, starts = gained >> POS, gained & POS_MASK
            weights = self.counts[self.chunk[starts].astype(np.intp, copy=False)]
        else:
            # The starts of each half are increasing already, so a stable sort by side alone puts
            # them in order, and sides of 16 bits (RIGHT as the top one) sort by radix, in linear
            # time. None (-1) becomes 0xFFFF, which sorts last.
            key = np.concatenate((x, y | SIDE16)).astype(np.uint16)
            order = np.argsort(key, kind="stable")
            key = key[order]
            m = int(key.searchsorted(0xFFFF))
            order, key = order[:m], key[:m].astype(np.int64)
            sides = (key & (SIDE16 - 1)) | (key >> SIDE_BITS) * RIGHT
            starts = np.concatenate((left, p))[order]
            weights = np.tile(self.counts[self.chunk[p].astype(np.intp, copy=False)], 2)[order]
        if sides.size == 0:
            return EMPTY64, EMPTY64
        first = run_starts(sides).nonzero()[0]
        sides = sides[first]
        self.made[c] = (sides, first, starts.astype(self.nxt.dtype))
        return sides, np.add.reduceat(weights, first)

    # ---- handing over to the Python loop ------------------------------------------------

    def hand_over(self) -> list[str]:
        """Each chunk's live tokens as a str of one character per token, in chunk order, for the
        Python loop; from now on ``chunks_of`` answers from a table of the pairs as they are."""
        live = np.flatnonzero(self.tok >= 0)
        tok, nxt = self.tok[live], self.nxt[live]
        # Every live pair's key beside its chunk, sorted and each once: a lookup is a binary
        # search, not a pass over a token's positions for each merge.
        inner = nxt >= 0
        self.table_keys, self.table_chunks = _distinct_pairs(
            tok[inner], self.tok[nxt[inner]], self.chunk[live[inner]])
        # The chunks end to end with a token id not in use between them, split in one call.
        end = ~inner
        sep = int(tok.max(initial=255)) + 1
        text = np.full(tok.size + self.counts.size, sep, dtype=np.uint32)
        text[np.arange(tok.size) + np.cumsum(end) - end] = tok
        self.tok = self.nxt = self.prv = self.chunk = self._views = None
        self.made, self.byte_pairs = {}, {}
        return text.tobytes().decode("utf-32-le", "surrogatepass").split(chr(sep))[:-1]

    def chunks_of(self, key: int) -> list[int]:
        """The chunks that held the pair ``key`` at the hand-over, each once, in increasing
        order. A pair holding a token made since is not here."""
        lo, hi = self.table_keys.searchsorted((key, key + 1)).tolist()
        return self.table_chunks[lo:hi].tolist()
