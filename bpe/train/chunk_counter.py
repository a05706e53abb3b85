"""Training, counting in one process: text -> {chunk: count}, in bounded memory.

``ChunkCounter`` gets exactly ``Counter(regex.findall(pattern, text))`` summed over the texts
it is fed, but fast: texts are first cut into segments at provable chunk boundaries
(``split.patterns.segment_splitter``), identical segments (repeated lines of code, say) are counted
as strings, and only distinct segments go through the regex. Where the first PROBE_CHARS
characters repeat too few segments for that to pay, the rest of the texts go straight through
the regex. The segment table is flushed into the chunk table when it grows past a limit, so
memory stays bounded on any corpus.

Special-token text found in the corpus (``<|endoftext|>`` between documents, say) separates
documents and is not counted, so no merge learns from it.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from itertools import accumulate, compress
from operator import not_
from typing import Iterable, Iterator, Mapping

from ..split.patterns import segment_splitter
from ..split.twins import chunk_finder, has_astral
from ..text import alternation, repair_surrogates

MAX_SEGMENTS = 1 << 20  # distinct segments held before flushing into chunk counts
PROBE_CHARS = 512 << 10  # characters counted through segments before choosing whether to go on so
DIRECT_SHARE = 0.7  # ... go on only while the distinct segments hold at most this share of them
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
        self._split = segment_splitter(pattern)
        self._segments: Counter[str] = Counter()  # regular segments
        self._ends: Counter[str] = Counter()  # first and last segments of texts
        self.chunks: Counter[str] = Counter()
        self.n_bytes = 0  # characters seen, a progress measure
        self._probe_at = PROBE_CHARS if self._split is not None else None
        self._cut_chars = 0  # characters cut into segments (each distinct text once)

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
            _count(self.chunks, self._findall(text), times)
            return
        segs = self._split(text)
        self._cut_chars += len(text)
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

    def _choose(self) -> None:
        """Go on cutting texts into segments only if repeated segments saved enough so far: cutting
        and counting them costs about a third of pre-tokenizing the text."""
        self._probe_at = None
        distinct = sum(map(len, self._segments)) + sum(map(len, self._ends))
        if distinct > DIRECT_SHARE * self._cut_chars:
            self._split = None
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
        for seg, n in self._ends.items():
            _count(counts, findall(seg), n)
        self._segments = Counter()
        self._ends = Counter()

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
