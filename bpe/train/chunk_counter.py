"""Training, counting in one process: text -> {chunk: count}, in bounded memory.

``ChunkCounter`` gets exactly ``Counter(regex.findall(pattern, text))`` summed over the texts
it is fed, but fast: texts are first cut into segments at provable chunk boundaries, identical
segments are counted as strings, and only distinct segments go through the regex. Segments are
lines first (``split.patterns.segment_splitter``: code repeats whole lines); where the first
PROBE_CHARS characters repeat too few lines for that to pay, words (``word_splitter``: prose
repeats words, and ``str.split`` cuts at their spaces in C); where words do not pay either, the
rest of the texts go straight through the regex. The segment tables are flushed into the chunk
table when they grow past a limit, so memory stays bounded on any corpus.

Special-token text found in the corpus (``<|endoftext|>`` between documents, say) separates
documents and is not counted, so no merge learns from it.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from itertools import accumulate, chain, compress, count
from operator import not_
from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from ..split.patterns import GLUE_CHAR, segment_splitter, word_splitter
from ..split.twins import chunk_finder, has_astral
from ..text import alternation, repair_surrogates

MAX_SEGMENTS = 1 << 20  # distinct segments held before flushing into chunk counts
PROBE_CHARS = 512 << 10  # characters counted through segments before choosing whether to go on so
DIRECT_SHARE = 0.7  # ... go on only while the distinct lines hold at most this share of them
WORD_SHARE = 0.5  # ... or, for words, this share (cutting at words costs more than at lines)
BATCH_CHARS = 1 << 16  # characters of segments pre-tokenized by one regex call when flushing


class ChunkCounter:
    """Accumulates chunk counts of texts under one split pattern.

    Segments between two cuts ("regular" ones) can be concatenated in any order without
    changing their chunks, because each cut rule only looks at the character before the
    cut and the start of the segment after it. So all distinct regular segments that
    occur ``n`` times are joined and pre-tokenized by one regex call; only the first and
    last segment of each text (whose outer ends are not cuts) are handled one by one.
    """

    def __init__(self, pattern: str, special_tokens: Iterable[str] = ()):
        self.pattern = pattern
        # Special-token text in the corpus separates documents and is not learned from.
        self._specials = sorted(set(special_tokens))
        self._special_split = alternation(self._specials).split if self._specials else None
        self._findall = chunk_finder(pattern)
        self._split = segment_splitter(pattern)  # lines; None once they do not pay
        self._words = word_splitter(pattern)
        self._split_words = None  # self._words once lines do not pay and words do
        self._segments: Counter[str] = Counter()  # regular segments (lines)
        self._pieces: Counter[str] = Counter()  # regular word segments, each without its leading space
        self._ends: Counter[str] = Counter()  # first and last segments of texts
        self.chunks: Counter[str] = Counter()
        self.n_bytes = 0  # characters seen, a progress measure
        self._probe_at = PROBE_CHARS if self._split is not None else None
        self._cut_chars = 0  # characters cut into segments (each distinct text once)
        self._probed: list[str] = []  # the texts cut before the choice

    def add(self, text: str, times: int = 1) -> None:
        """Count the chunks of one text (a document: chunks never span two texts), ``times`` over."""
        text = repair_surrogates(text)  # as encoding does, so training sees the same pieces
        self.n_bytes += len(text) * times
        if self._special_split is not None and any(s in text for s in self._specials):
            parts = self._special_split(text)
            if len(parts) > 1:
                for part in parts:
                    self._add(part, times)
                return
        self._add(text, times)

    def _add(self, text: str, times: int) -> None:
        if self._split is None:
            if self._split_words is None or GLUE_CHAR in text:
                _count(self.chunks, self._findall(text), times)
            else:
                self._add_words(text, times)
            return
        segs = self._split(text)
        self._cut_chars += len(text)
        if self._probe_at is not None:
            self._probed.append(text)
        if times > 1:  # a repeated document: its segments counted once, then weighted
            for s, k in Counter(segs[1:-1]).items():
                self._segments[s] += k * times
            self._ends[segs[0]] += times
            if len(segs) > 1:
                self._ends[segs[-1]] += times
        elif len(segs) <= 2:
            self._ends.update(segs)
        else:
            self._ends[segs[0]] += 1
            self._ends[segs[-1]] += 1
            del segs[0], segs[-1]
            self._segments.update(segs)
        if self._probe_at is not None and self._cut_chars >= self._probe_at:
            self._choose()
        if len(self._segments) + len(self._ends) > MAX_SEGMENTS:
            self.flush()

    def _add_words(self, text: str, times: int) -> None:
        parts = self._split_words(text)
        ends = self._ends
        ends[parts[0].replace(GLUE_CHAR, " ")] += times
        if len(parts) > 1:
            ends[" " + parts[-1].replace(GLUE_CHAR, " ")] += times
            del parts[0], parts[-1]
            if times == 1:
                self._pieces.update(parts)
            else:
                for s, k in Counter(parts).items():
                    self._pieces[s] += k * times
        if len(self._pieces) + len(self._ends) > MAX_SEGMENTS:
            self.flush()

    def _choose(self) -> None:
        """Go on cutting texts into lines only if repeated lines saved enough so far: cutting and
        counting them costs about a third of pre-tokenizing the text. Else cut them into words
        from now on if the texts seen so far hold few enough distinct words (cutting and counting
        words costs about half), or pre-tokenize them whole."""
        self._probe_at = None
        probed, self._probed = self._probed, []
        distinct = sum(map(len, self._segments)) + sum(map(len, self._ends))
        if distinct <= DIRECT_SHARE * self._cut_chars:
            return
        self._split = None
        if self._words is not None and _word_share(self._words, probed) <= WORD_SHARE:
            self._split_words = self._words
        self.flush()  # now, not in the serial tail of counting

    def flush(self) -> None:
        """Pre-tokenize the distinct segments seen so far into ``self.chunks``."""
        findall = self._findall
        counts = self.chunks
        items = self._segments.items()
        by_count: dict[int, list[str]] = {1: [s for s, n in items if n == 1]}
        for seg, n in [kv for kv in items if kv[1] != 1]:
            lst = by_count.get(n)
            if lst is None:
                by_count[n] = [seg]
            else:
                lst.append(seg)
        for n, group in by_count.items():
            for segs in _batches(group):
                joined = "".join(segs)
                if not has_astral(joined):
                    chunks = findall(joined)
                else:  # only the segments that hold astral characters take the twin's stand-in path
                    astral = list(map(has_astral, segs))
                    chunks = findall("".join(compress(segs, map(not_, astral))))
                    chunks += findall("".join(compress(segs, astral)))
                _count(counts, chunks, n)
        if self._pieces:
            self._flush_words()
        for seg, n in self._ends.items():
            _count(counts, findall(seg), n)
        self._segments = Counter()
        self._ends = Counter()

    def _flush_words(self) -> None:
        """Pre-tokenize the distinct word segments into ``self.chunks``: those met once in runs
        counted in C (``Counter.update``); the others' chunks numbered by a dict (their first
        place, in C) and their weights, their segments' counts, summed by ``bincount``."""
        pieces = list(self._pieces)
        n = np.fromiter(self._pieces.values(), dtype=np.int64, count=len(pieces))
        self._pieces = Counter()
        once = n == 1
        first: dict[str, int] = {}
        numbers = count()
        places, weights = [], []
        for text, segs, w in self._spaced_runs(list(compress(pieces, (~once).tolist())), n[~once]):
            chunks = self._findall(text)
            size = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
            ends = np.cumsum(np.fromiter(map(len, segs), dtype=np.int64, count=len(segs)) + 1)
            weights.append(w[np.searchsorted(ends, np.cumsum(size) - size, side="right")])
            place = map(first.setdefault, chunks, numbers)  # a chunk's number: where it was first met
            places.append(np.fromiter(place, dtype=np.int64, count=len(chunks)))
        if first:
            sums = np.bincount(np.concatenate(places), weights=np.concatenate(weights))  # exact below 2**53
            add_counts(self.chunks, dict(zip(first, sums[list(first.values())].astype(np.int64).tolist())))
        for text, _, _ in self._spaced_runs(list(compress(pieces, once.tolist())), None):
            self.chunks.update(self._findall(text))

    def _spaced_runs(self, pieces: list[str], n: np.ndarray | None):
        """Runs of word segments (``pieces``, each without its space), each run as (its text, its
        pieces, their counts ``n``, (len(pieces),) int64 or None) as ``_spaced`` joins them;
        segments with astral characters in runs of their own (the twin's stand-in path)."""
        at = 0
        for segs in _batches(pieces) if pieces else ():  # no run: _spaced would make one space
            w = None if n is None else n[at : at + len(segs)]
            at += len(segs)
            text = _spaced(segs)
            if not has_astral(text):
                yield text, segs, w
                continue
            astral = np.fromiter(map(has_astral, segs), dtype=bool, count=len(segs))
            for part in (~astral, astral):
                some = list(compress(segs, part.tolist()))
                if some:
                    yield _spaced(some), some, None if w is None else w[part]

    def result(self) -> Counter[str]:
        self.flush()
        return self.chunks


def add_counts(total: Counter[str], part: Mapping[str, int]) -> None:
    """Add the counts ``part`` into ``total`` (into an empty one: one update in C)."""
    if not total:
        total.update(part)
        return
    get = total.get
    for k, v in part.items():
        total[k] = get(k, 0) + v


def _count(counts: Counter[str], chunks: list[str], times: int) -> None:
    """Add each of ``chunks`` ``times`` times to ``counts`` (once: one update in C)."""
    if times == 1:
        counts.update(chunks)
    else:
        for c, k in Counter(chunks).items():
            counts[c] += k * times


def _word_share(split: Callable[[str], list[str]], texts: list[str]) -> float:
    """The characters of the distinct word segments of ``texts`` (``split``: a ``word_splitter``)
    as a share of the texts' characters."""
    words = set(chain.from_iterable(map(split, texts)))
    return (sum(map(len, words)) + len(words)) / max(sum(map(len, texts)), 1)


def _spaced(pieces: list[str]) -> str:
    """Word segments end to end: each piece after its space, the glued spaces put back."""
    return (" " + " ".join(pieces)).replace(GLUE_CHAR, " ")


def _batches(segs: list[str]) -> Iterator[list[str]]:
    """``segs`` in runs of about BATCH_CHARS characters: the chunks of one run, and the strs
    they are made of, stay in the processor's cache while they are counted."""
    if len(segs) < 2:
        yield segs
        return
    ends = list(accumulate(map(len, segs)))
    lo = 0
    while lo < len(segs):
        hi = max(bisect_right(ends, ends[lo] + BATCH_CHARS, lo), lo + 1)
        yield segs[lo:hi]
        lo = hi
