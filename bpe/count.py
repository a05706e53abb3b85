"""Counting pre-tokenized chunks: text -> {chunk: count}, once, in bounded memory, in parallel.

Training needs only how often each distinct chunk occurs. ``ChunkCounter`` gets
exactly ``Counter(regex.findall(pattern, text))`` summed over the texts it is fed,
but fast: texts are first cut into segments at provable chunk boundaries
(``patterns.segment_splitter``), identical segments (repeated lines of code, say)
are counted as strings, and only distinct segments go through the regex. Where the first
PROBE_CHARS characters repeat too few segments for that to pay, the rest of the texts go
straight through the regex. The segment table is flushed into the chunk table when it grows
past a limit, so memory stays bounded on any corpus.

Special-token text found in the corpus (``<|endoftext|>`` between documents, say)
separates documents and is not counted, so no merge learns from it.

``count_files`` and ``count_texts`` drive one or several ``ChunkCounter``s: with
``workers > 1`` they start worker processes that each count their share (file byte
ranges, or batches of texts) and send back one table each.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
import warnings
from bisect import bisect_right
from collections import Counter
from itertools import accumulate, compress
from operator import not_
from pathlib import Path
from typing import Callable, Iterable, Iterator

import regex

from .bytepair import repair_surrogates
from .corpus import BLOCK_BYTES, read_blocks
from .nogc import gc_paused
from .patterns import segment_splitter
from .split import chunk_finder, has_astral

PARALLEL_MIN_BYTES = 8 << 20  # below this, starting processes costs more than it saves
MAX_SEGMENTS = 1 << 20  # distinct segments held before flushing into chunk counts
PROBE_CHARS = 4 << 20  # characters counted through segments before choosing whether to go on so
DIRECT_SHARE = 0.85  # ... go on only while the distinct segments hold at most this share of them
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
        specials = sorted(set(special_tokens), key=len, reverse=True)
        # Special-token text in the corpus separates documents and is not learned from.
        self._specials = specials
        self._special_split = regex.compile("|".join(map(regex.escape, specials))).split if specials else None
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
            chunks = self._findall(text)
            if times == 1:
                self.chunks.update(chunks)
            else:
                for c, k in Counter(chunks).items():
                    self.chunks[c] += k * times
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
        """Go on cutting texts into segments only if repeated segments saved enough so far. Cutting
        and counting them costs about a third of pre-tokenizing the text: counting 33 MB of
        translated text (distinct segments: 86% of it) took 3.0 s through segments, 2.1 s without;
        code (76%) 1.8 s against 1.5 s; English prose with its repeated licences (32%) 1.4 s
        against 1.9 s. A prefix of a corpus repeats less than the whole (prose's first 4 MB: 80%),
        hence the high bar."""
        self._probe_at = None
        distinct = sum(map(len, self._segments)) + sum(map(len, self._ends))
        if distinct > DIRECT_SHARE * self._cut_chars:
            self._split = None

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
                if n == 1:
                    counts.update(chunks)
                else:
                    for c, k in Counter(chunks).items():
                        counts[c] += k * n
        for seg, n in self._ends.items():
            for c in findall(seg):
                counts[c] += n
        self._segments = Counter()
        self._ends = Counter()

    def result(self) -> Counter[str]:
        self.flush()
        return self.chunks


def _batches(segs: list[str]) -> Iterator[list[str]]:
    """``segs`` in runs of about BATCH_CHARS characters: the chunks of one run, and the strs
    they are made of, stay in the processor's cache while they are counted (one run of all the
    segments of a 30 MB corpus counted 2.5x slower)."""
    if len(segs) < 2:
        yield segs
        return
    ends = list(accumulate(map(len, segs)))
    lo = 0
    while lo < len(segs):
        hi = max(bisect_right(ends, ends[lo] + BATCH_CHARS, lo), lo + 1)
        yield segs[lo:hi]
        lo = hi


def _merge_into(total: Counter[str], part: dict[str, int]) -> None:
    if not total:
        total.update(part)
        return
    get = total.get
    for k, v in part.items():
        total[k] = get(k, 0) + v


# ---- worker processes -------------------------------------------------------------


def _exit_with_parent(parent: int) -> None:
    """End this worker when its parent dies, even by SIGKILL (which runs no cleanup in it).

    On Linux the kernel sends the signal (PR_SET_PDEATHSIG); elsewhere, and for a parent that
    died before the request, a thread sees the worker re-parented and exits.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


@gc_paused()
def _worker(pattern: str, specials: tuple[str, ...], tasks, results, parent: int) -> None:
    _exit_with_parent(parent)
    counter = ChunkCounter(pattern, specials)
    error = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        while True:
            task = tasks.get()
            if task is None:
                break
            if error is not None:
                continue  # keep draining so the parent never blocks on a full queue
            try:
                if task[0] == "file":
                    _, path, start, end = task
                    for block in read_blocks(path, start, end, pattern=pattern):
                        counter.add(block)
                elif task[0] == "range":  # (text, times) the forked worker inherited (_SHARED_TEXTS)
                    for text, times in _SHARED_TEXTS[task[1] : task[2]]:
                        counter.add(text, times)
                else:
                    for text in task[1]:
                        counter.add(text)
            except BaseException as e:  # report to the parent instead of dying silently
                error = f"{type(e).__name__}: {e}"
    notes = [(str(w.message), w.category) for w in caught]
    if error is None:
        results.put(("ok", dict(counter.result()), notes))
    else:
        results.put(("error", error, notes))


class _Pool:
    """N counting processes fed through a queue; each returns one table at the end."""

    def __init__(self, pattern: str, specials: tuple[str, ...], workers: int):
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
        self.tasks = ctx.Queue(maxsize=4 * workers)
        self.results = ctx.Queue()
        self.procs = [ctx.Process(target=_worker, args=(pattern, specials, self.tasks, self.results, os.getpid()),
                                 daemon=True) for _ in range(workers)]
        for p in self.procs:
            p.start()

    def put(self, task) -> None:
        self.tasks.put(task)

    def finish(self, into: Counter[str]) -> None:
        for _ in self.procs:
            self.tasks.put(None)
        errors = []
        for _ in self.procs:
            status, payload, notes = self.results.get()
            for msg, category in notes:  # warnings raised in the worker, re-raised here
                warnings.warn(msg, category, stacklevel=4)
            if status == "ok":
                _merge_into(into, payload)
            else:
                errors.append(payload)
        for p in self.procs:
            p.join()
        if errors:
            raise RuntimeError(f"chunk counting failed in a worker process: {errors[0]}")

    def kill(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.terminate()


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@gc_paused()
def count_files(
    files: list[Path], pattern: str, workers: int | None = None, progress: Callable[[int], None] | None = None,
    special_tokens: Iterable[str] = (),
) -> Counter[str]:
    """Chunk counts of the given files (each file one document), in worker processes when large."""
    sizes = []
    for f in files:
        try:
            sizes.append(os.path.getsize(f))
        except OSError as e:
            raise OSError(f"cannot read corpus file {str(f)!r}: {e.strerror or e}") from None
    total = sum(sizes)
    workers = default_workers() if workers is None else max(1, int(workers))
    if workers == 1 or total < PARALLEL_MIN_BYTES:
        counter = ChunkCounter(pattern, special_tokens)
        for f in files:
            for block in read_blocks(f, pattern=pattern):
                counter.add(block)
            if progress:
                progress(counter.n_bytes)
        return counter.result()
    # Byte ranges of about one block each, so work spreads evenly over the processes.
    pool = _Pool(pattern, tuple(special_tokens), workers)
    out: Counter[str] = Counter()
    try:
        for f, size in zip(files, sizes):
            for start in range(0, max(size, 1), BLOCK_BYTES):
                pool.put(("file", str(f), start, min(start + BLOCK_BYTES, size)))
        pool.finish(out)
    finally:
        pool.kill()
    return out


_SHARED_TEXTS: list[tuple[str, int]] = []  # (text, times) forked workers read by index


def _count_shared(texts: list[tuple[str, int]], pattern: str, workers: int,
                  special_tokens: Iterable[str]) -> Counter[str]:
    """Chunk counts of distinct texts ``(text, times)`` in ``workers`` processes: this one and
    forked workers that inherit the list (nothing is pickled on the way in), each counting a
    contiguous share of about equal size."""
    global _SHARED_TEXTS
    sizes = [len(t) for t, _ in texts]
    target = sum(sizes) / workers
    bounds, acc = [0], 0
    for i, s in enumerate(sizes):
        acc += s
        if acc >= target * len(bounds) and i + 1 < len(texts):
            bounds.append(i + 1)
    bounds.append(len(texts))
    _SHARED_TEXTS = texts
    pool = None
    try:
        pool = _Pool(pattern, tuple(special_tokens), len(bounds) - 2)
        for a, b in zip(bounds[:-2], bounds[1:-1]):
            pool.put(("range", a, b))
        own = ChunkCounter(pattern, special_tokens)  # the last share is counted here meanwhile
        for text, times in texts[bounds[-2] :]:
            own.add(text, times)
        out = own.result()
        pool.finish(out)
    finally:
        _SHARED_TEXTS = []
        if pool is not None:
            pool.kill()
    return out


@gc_paused()  # texts in memory: no user code runs meanwhile (a stream's generator might make cycles)
def _count_list(texts, pattern: str, workers: int, progress, special_tokens: Iterable[str]) -> Counter[str]:
    """``count_texts`` of texts in memory already: each distinct text counted once, weighted."""
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"training texts must be str, got {type(text).__name__} at item {i}")
    distinct = list(Counter(texts).items())
    total = sum(len(t) * n for t, n in distinct)
    if workers > 1 and "fork" in mp.get_all_start_methods() and total > PARALLEL_MIN_BYTES:
        out = _count_shared(distinct, pattern, workers, special_tokens)
    else:
        counter = ChunkCounter(pattern, special_tokens)
        for text, times in distinct:
            counter.add(text, times)
        out = counter.result()
    if progress:
        progress(total)
    return out


def count_texts(
    texts: Iterable[str], pattern: str, workers: int | None = None, progress: Callable[[int], None] | None = None,
    special_tokens: Iterable[str] = (),
) -> Counter[str]:
    """Chunk counts of an iterable of texts (each one document); streams, parallel when large.

    A list or tuple is in memory already: each distinct text is counted once, weighted by how
    often it occurs, by forked workers that read the list by index when it is large.

    Counting starts in this process; once more than ``PARALLEL_MIN_BYTES`` characters have
    been seen, the rest is sent to worker processes in batches.
    """
    workers = default_workers() if workers is None else max(1, int(workers))
    if isinstance(texts, (list, tuple)):
        return _count_list(texts, pattern, workers, progress, special_tokens)
    counter = ChunkCounter(pattern, special_tokens)
    it = iter(texts)
    pool = None
    try:
        for i, text in enumerate(it):
            if not isinstance(text, str):
                raise TypeError(f"training texts must be str, got {type(text).__name__} at item {i}")
            counter.add(text)
            if progress and i % 64 == 0:
                progress(counter.n_bytes)
            if workers > 1 and counter.n_bytes > PARALLEL_MIN_BYTES:
                pool = _Pool(pattern, tuple(special_tokens), workers)
                break
        out = counter.result()
        if pool is not None:
            batch: list[str] = []
            size = 0
            seen = counter.n_bytes
            for text in it:
                if not isinstance(text, str):
                    raise TypeError(f"training texts must be str, got {type(text).__name__}")
                batch.append(text)
                size += len(text)
                if size >= BLOCK_BYTES:
                    pool.put(("texts", batch))
                    seen += size
                    if progress:
                        progress(seen)
                    batch, size = [], 0
            if batch:
                pool.put(("texts", batch))
            pool.finish(out)
    finally:
        if pool is not None:
            pool.kill()
    return out
