"""Byte-pair merging of many pieces at once, in NumPy, with tiktoken's result for each piece.

``PairTable(ranks)`` holds every way of cutting a token into two tokens: the key ``left_id *
width + right_id`` and the rank of the whole token, in a hash table that NumPy reads for a whole
array of pairs at once. Those are exactly the pairs that rank-ordered merging can join: the parts
of a piece are always tokens, and two neighbours are joined when their concatenation is a token.
The cuts are found in NumPy too (tokens of up to 16 bytes as two 64-bit words: a prefix is a
mask, a suffix a shift), so building the table of a 100k vocabulary takes about 0.1 s.

``merge_pieces(table, data, starts)`` runs ``bytepair.merge_small`` on all pieces together: in
each round every piece that still holds a joinable pair joins its lowest-rank pair (the leftmost
of equal ranks), which is the step tiktoken takes next on that piece; a piece is finished when
it holds none. A round is a few array operations over the pieces still merging, so the
interpreter's cost of a round is shared by all of them.
"""
from __future__ import annotations

from itertools import compress, repeat

import numpy as np

INF = (1 << 31) - 1  # "no such token": ranks must stay below it for the packed keys of a round
_EMPTY = -1
_MUL = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: the top bits of key * _MUL pick the place
_LOW32 = (1 << 32) - 1
_INF_KEY = INF << 32
_SHORT = 16  # bytes: tokens up to this long are cut into two in NumPy, as two 64-bit words each
_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


class _Buckets:
    """A static hash table over distinct int64 keys: the keys sorted by their bucket (the top
    bits of ``key * _MUL``), and where each bucket starts. With ``load`` buckets per key almost
    every key is the first of its bucket, so a lookup reads one place; the second place is read
    in NumPy, the rare later ones in Python."""

    def __init__(self, key: np.ndarray, load: int = 4):
        self.bits = max(4, (load * key.size).bit_length())
        home = self._home(key)
        index = np.argsort(home)
        # One place past the end (key -1, never asked for) so that an empty last bucket reads it.
        self.key = np.append(key[index], _EMPTY)
        self.index = np.append(index, _EMPTY)  # position in ``key`` of each sorted key
        # int32 halves the memory that lookups read at random (tables of up to 2**31 keys)
        self.start = np.zeros((1 << self.bits) + 1, dtype=np.int32)
        np.cumsum(np.bincount(home, minlength=1 << self.bits), out=self.start[1:])

    def _home(self, key: np.ndarray) -> np.ndarray:
        return ((key.view(np.uint64) * _MUL) >> np.uint64(64 - self.bits)).view(np.int64)

    def find(self, key: np.ndarray) -> np.ndarray:
        """For each of ``key`` (int64, >= 0), its position in the keys the table was built from, or -1."""
        home = self._home(key)
        first = self.start[home]
        # A key equal to the one at ``first`` has the same home, so it is in that bucket.
        out = np.where(self.key[first] == key, self.index[first], _EMPTY)
        stop = self.start[home + 1]
        more = np.flatnonzero((out == _EMPTY) & (stop - first > 1))
        at = first[more] + 1
        hit = self.key[at] == key[more]
        out[more[hit]] = self.index[at[hit]]
        rest = ~hit & (stop[more] - at > 1)
        for w, a, e in zip(more[rest].tolist(), at[rest].tolist(), stop[more][rest].tolist()):
            same = np.flatnonzero(self.key[a + 1:e] == key[w])
            if same.size:
                out[w] = self.index[a + 1 + same[0]]
        return out


def _words(toks: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokens of at most _SHORT bytes as (first 8 bytes, next 8 bytes, length): uint64, uint64,
    int64, each (N,); the bytes zero-padded and read big-endian, so a prefix is a mask and a
    suffix a shift."""
    w = np.frombuffer(b"".join(map(bytes.ljust, toks, repeat(_SHORT), repeat(b"\0"))), dtype=">u8")
    w = w.astype(np.uint64).reshape(-1, 2)
    return w[:, 0].copy(), w[:, 1].copy(), np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))


def _head(hi: np.ndarray, lo: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` (1..15) bytes of each 16-byte string, zero-padded."""
    if k <= 8:
        return hi & (_ONES << np.uint64(64 - 8 * k)), np.zeros_like(lo)
    return hi, lo & (_ONES << np.uint64(128 - 8 * k))


def _tail(hi: np.ndarray, lo: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each 16-byte string without its first ``k`` (1..15) bytes, zero-padded."""
    if k < 8:
        s = np.uint64(8 * k)
        return hi << s | lo >> np.uint64(64 - 8 * k), lo << s
    if k == 8:
        return lo.copy(), np.zeros_like(lo)
    return lo << np.uint64(8 * k - 64), np.zeros_like(lo)


def _mix(hi: np.ndarray, lo: np.ndarray, size: np.ndarray) -> np.ndarray:
    """An int64 hash of 16 zero-padded bytes and their length (equal strings, equal hashes)."""
    return (hi * _MUL ^ lo).view(np.int64) ^ size


def _cuts(ranks: dict[bytes, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(left ids, right ids, ranks of the whole), int64, of every cut of a token into two tokens:
    in NumPy for the tokens of at most _SHORT bytes, by dict lookups for the few longer ones."""
    toks = list(ranks)
    ids = np.fromiter(ranks.values(), dtype=np.int64, count=len(toks))
    size = np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))
    short = size <= _SHORT
    hi, lo, n = _words(list(compress(toks, short.tolist())))
    ids_s = ids[short]
    by_len = np.argsort(-n, kind="stable")  # longest first: the tokens longer than k are a prefix
    hi, lo, n, ids_s = hi[by_len], lo[by_len], n[by_len], ids_s[by_len]
    mixed = _mix(hi, lo, n)
    if np.unique(mixed).size < mixed.size:  # two tokens share a hash: cut them all by lookups
        short[:] = False
        hi, lo, n, mixed = hi[:0], lo[:0], n[:0], mixed[:0]
    table = _Buckets(mixed)

    def find(h, l, m):
        got = table.find(_mix(h, l, m))
        g = np.maximum(got, 0)
        same = (got >= 0) & (hi[g] == h) & (lo[g] == l) & (n[g] == m)  # the hash could be another string's
        return np.where(same, ids_s[g], _EMPTY)

    cuts = []
    for k in range(1, int(n[0]) if n.size else 1):
        m = int(np.searchsorted(-n, -k))  # [:m]: longer than k bytes
        left = find(*_head(hi[:m], lo[:m], k), np.full(m, k))
        right = find(*_tail(hi[:m], lo[:m], k), n[:m] - k)
        ok = (left != _EMPTY) & (right != _EMPTY)
        cuts.append((left[ok], right[ok], ids_s[:m][ok]))
    get = ranks.get
    long = [(get(b[:k]), get(b[k:]), ranks[b]) for b in compress(toks, (~short).tolist()) for k in range(1, len(b))]
    long = [c for c in long if c[0] is not None and c[1] is not None]
    cuts.append(tuple(np.array([c[i] for c in long], dtype=np.int64) for i in range(3)))
    return tuple(np.concatenate(x) for x in zip(*cuts))


class PairTable:
    """(left_id, right_id) -> rank of the token they spell, for arrays of pairs.

    ``byte_id`` (int64, (256,)) is each byte's id, ``byte_pair`` (int64, (65536,)) the rank of each
    two-byte token by ``first * 256 + second`` (INF where none); ``lookup`` covers every cut of
    every token into two tokens, keyed ``left * width + right``.
    """

    def __init__(self, ranks: dict[bytes, int]):
        self.width = max(ranks.values()) + 1
        if self.width >= INF or self.width * self.width >= 1 << 62:
            raise ValueError(f"ids up to {self.width - 1} do not fit the packed keys of the NumPy merge")
        self.byte_id = np.array([ranks[bytes([i])] for i in range(256)], dtype=np.int64)
        self.byte_pair = np.full(1 << 16, INF, dtype=np.int64)
        for b, r in ranks.items():
            if len(b) == 2:
                self.byte_pair[b[0] << 8 | b[1]] = r
        left, right, whole = _cuts(ranks)
        self.keys = left * self.width + right
        self.vals = np.append(whole, INF)  # vals[-1]: what a key that is not there finds
        self._table = _Buckets(self.keys)

    def lookup(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """Ranks (int64, like ``left``) of the tokens ``left[i] + right[i]`` spell, INF where none."""
        key = left * self.width + right
        return self.vals[self._table.find(key)]


def merge_pieces(table: PairTable, data: np.ndarray, starts: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of many pieces: piece i is ``data[starts[i]:starts[i + 1]]`` (``data``: uint8, (n,);
    ``starts``: int64, (P + 1,), increasing, so no piece is empty). The pieces should come longest
    first: the ones that take the most rounds then stay at the front, and a round only reads the
    front up to the last piece still merging.

    Returns ``(counts, ids)``: each piece's number of tokens (int64, (P,)) and the ids of all
    pieces end to end (int64, (sum(counts),)); each piece's ids are ``merge_small``'s.
    """
    n = data.size
    data = data.astype(np.int64)
    place = np.arange(n, dtype=np.int64)
    last = starts[1:] - 1
    # Parts keep their place in these arrays; a part absorbed by its left neighbour leaves a
    # hole. key[e] = rank of joining part e with the next one << 32 | e, so the minimum over a
    # piece is its lowest rank, leftmost first; a hole or a piece's last part has rank INF.
    tok = table.byte_id[data]
    key = np.empty(n, dtype=np.int64)
    key[:-1] = table.byte_pair[data[:-1] << 8 | data[1:]] << 32 | place[:-1]
    key[last] = _INF_KEY | last
    nxt = place + 1  # the next part of the piece, -1 after its last
    nxt[last] = -1
    prv = place - 1  # the part before, -1 before its first
    prv[starts[:-1]] = -1
    alive = np.ones(n, dtype=bool)
    seg = starts[:-1]
    live_end = seg.size  # pieces past this one are finished
    while live_end:
        stop = starts[live_end]
        best = np.minimum.reduceat(key[:stop], seg[:live_end])
        rank = best >> 32
        live = np.flatnonzero(rank != INF)
        if not live.size:
            break
        live_end = int(live[-1]) + 1
        at = best[live] & _LOW32
        _join(table, rank[live], at, tok, key, nxt, prv)
        alive[nxt[at]] = False
        nxt[at] = nxt[nxt[at]]
    counts = np.add.reduceat(alive, starts[:-1]).astype(np.int64) if seg.size else np.zeros(0, np.int64)
    return counts, tok[alive]


def _join(table: PairTable, rank, at, tok, key, nxt, prv) -> None:
    """Join each part ``at`` with the next one (``nxt[at]``) into token ``rank``, in place: the
    new part's rank with its neighbours on both sides is looked up (the caller unlinks ``nxt[at]``)."""
    gone = nxt[at]
    after = nxt[gone]
    before = prv[at]
    tok[at] = rank
    key[gone] = _INF_KEY | gone
    right = after >= 0
    left = before >= 0
    a_r, after = at[right], after[right]
    prv[after] = a_r
    b_l = before[left]
    new = table.lookup(np.concatenate([rank[right], tok[b_l]]), np.concatenate([tok[after], rank[left]]))
    key[at] = _INF_KEY | at
    key[a_r] = new[: a_r.size] << 32 | a_r
    key[b_l] = new[a_r.size:] << 32 | b_l
