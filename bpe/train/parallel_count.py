"""Training, counting in parallel: files or texts -> {chunk: count}.

``count_files`` and ``count_texts`` drive one or several ``chunk_counter.ChunkCounter``s (which
count one process's share exactly and in bounded memory): with ``workers > 1`` they start
worker processes that each count their share (file byte ranges, or batches of texts) and send
back one table each.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

from ..files import corpus
from ..files.corpus import block_ranges, file_sizes, read_blocks
from ..nogc import gc_paused
from ..workers import default_workers
from .chunk_counter import ChunkCounter, add_counts
from .chunk_table import ChunkTable

PARALLEL_MIN_BYTES = 8 << 20  # below this, starting processes costs more than it saves


def _result(counter: ChunkCounter, table: bool) -> Counter[str] | ChunkTable:
    # ordered for the learner here, in each counting process, not after the join in one
    return ChunkTable.of(counter.result()).by_prefix() if table else counter.result()


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
def _worker(pattern: str, specials: tuple[str, ...], table: bool, tasks, results, parent: int) -> None:
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
                elif task[0] == "shares":  # of the texts the forked worker inherited
                    _count_shares(counter)
                else:
                    for text in task[1]:
                        counter.add(text)
            except BaseException as e:  # report to the parent instead of dying silently
                error = f"{type(e).__name__}: {e}"
    notes = [(str(w.message), w.category) for w in caught]
    if error is None:
        results.put(("ok", _result(counter, table), notes))
    else:
        results.put(("error", error, notes))


class _Pool:
    """N counting processes fed through a queue; each returns one table at the end: a dict, or a
    ChunkTable where ``table`` is true."""

    def __init__(self, pattern: str, specials: tuple[str, ...], workers: int, table: bool = False):
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
        self.tasks = ctx.Queue(maxsize=4 * workers)
        self.results = ctx.Queue()
        self.procs = [ctx.Process(target=_worker, args=(pattern, specials, table, self.tasks, self.results, os.getpid()),
                                 daemon=True) for _ in range(workers)]
        for p in self.procs:
            p.start()
        self.closed = False

    def put(self, task) -> None:
        self.tasks.put(task)

    def close(self) -> None:
        """No more tasks: each worker sends its table once it has done the ones it took."""
        if not self.closed:
            for _ in self.procs:
                self.tasks.put(None)
            self.closed = True

    def finish(self, own: Counter[str] | ChunkTable) -> Counter[str] | ChunkTable:
        """``own`` (what this process counted) with every worker's table added."""
        self.close()
        errors, parts = [], [own]
        for _ in self.procs:
            status, payload, notes = self.results.get()
            for msg, category in notes:  # warnings raised in the worker, re-raised here
                warnings.warn(msg, category, stacklevel=4)
            (parts if status == "ok" else errors).append(payload)
        for p in self.procs:
            p.join()
        if errors:
            raise RuntimeError(f"chunk counting failed in a worker process: {errors[0]}")
        if isinstance(own, ChunkTable):
            return ChunkTable.join(parts)
        for part in parts[1:]:
            add_counts(own, part)
        return own

    def kill(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.terminate()


@gc_paused()
def count_files(
    files: list[Path], pattern: str, workers: int | None = None, progress: Callable[[int], None] | None = None,
    special_tokens: Iterable[str] = (), table: bool = False,
) -> Counter[str] | ChunkTable:
    """Chunk counts of the given files (each file one document), in worker processes when large;
    as a ChunkTable where ``table`` is true (what training reads)."""
    sizes = file_sizes(files)
    total = sum(sizes)
    workers = default_workers() if workers is None else max(1, int(workers))
    if workers == 1 or total < PARALLEL_MIN_BYTES:
        counter = ChunkCounter(pattern, special_tokens)
        for f in files:
            for block in read_blocks(f, pattern=pattern):
                counter.add(block)
            if progress:
                progress(counter.n_bytes)
        return _result(counter, table)
    # Byte ranges of about one block each, so work spreads evenly over the processes.
    pool = _Pool(pattern, tuple(special_tokens), workers, table)
    try:
        for path, start, end in block_ranges(files, sizes):
            pool.put(("file", path, start, end))
        return pool.finish(ChunkTable.of({}) if table else Counter())
    finally:
        pool.kill()


# What forked workers inherit (nothing is pickled on the way in): the texts as (text, times),
# shares of them as index ranges, and the index of the next share to claim.
_SHARED_TEXTS: list[tuple[str, int]] = []
_SHARED_SHARES: list[tuple[int, int]] = []
_SHARED_NEXT = None  # a multiprocessing.Value
SHARES_PER_WORKER = 32  # the smallest share is this many times smaller than a process's part


def _shares(sizes: list[int], workers: int) -> list[tuple[int, int]]:
    """Runs ``(start, end)`` of the texts of these sizes, each about 1 / (2 * workers) of what is
    left and at least 1 / (workers * SHARES_PER_WORKER) of all: big shares while every process is
    busy, small ones at the end, so that the processes end within a small share of each other."""
    least = sum(sizes) / (workers * SHARES_PER_WORKER)
    bounds, acc, left = [0], 0, sum(sizes)
    for i, s in enumerate(sizes[:-1]):
        acc += s
        if acc >= max(left / (2 * workers), least):
            bounds.append(i + 1)
            left, acc = left - acc, 0
    bounds.append(len(sizes))
    return list(zip(bounds[:-1], bounds[1:]))


def _count_shares(counter: ChunkCounter) -> None:
    """Count shares of the inherited texts, claimed one at a time, until none is left."""
    while True:
        with _SHARED_NEXT.get_lock():
            i = _SHARED_NEXT.value
            _SHARED_NEXT.value = i + 1
        if i >= len(_SHARED_SHARES):
            return
        a, b = _SHARED_SHARES[i]
        for text, times in _SHARED_TEXTS[a:b]:
            counter.add(text, times)


def _count_shared(texts: list[tuple[str, int]], pattern: str, workers: int,
                  special_tokens: Iterable[str], table: bool) -> Counter[str] | ChunkTable:
    """Chunk counts of distinct texts ``(text, times)`` in ``workers`` processes: this one and
    forked workers that inherit the list, all claiming contiguous shares (``_shares``) until none
    is left, so that no process waits long for the slowest."""
    global _SHARED_TEXTS, _SHARED_SHARES, _SHARED_NEXT
    _SHARED_TEXTS, _SHARED_SHARES = texts, _shares([len(t) for t, _ in texts], workers)
    _SHARED_NEXT = mp.get_context("fork").Value("q", 0)
    pool = None
    try:
        # The counter first: the workers inherit its compiled pattern (its twin's character
        # classes are probed once per process)
        own = ChunkCounter(pattern, special_tokens)
        pool = _Pool(pattern, tuple(special_tokens), workers - 1, table)
        for _ in range(workers - 1):
            pool.put(("shares",))
        pool.close()  # a worker out of shares makes its table at once, while this one counts
        _count_shares(own)
        mine = _result(own, table)  # made while the workers make theirs
        own = None  # its chunks are freed while the workers send their tables
        out = pool.finish(mine)
    finally:
        _SHARED_TEXTS, _SHARED_SHARES, _SHARED_NEXT = [], [], None
        if pool is not None:
            pool.kill()
    return out


def _check_text(text, i: int) -> None:
    if not isinstance(text, str):
        raise TypeError(f"training texts must be str, got {type(text).__name__} at item {i}")


def _send_rest(pool: _Pool, numbered, seen: int, progress) -> None:
    """Send the texts left in ``numbered`` (``(item, text)`` pairs) to the workers in batches of
    about ``corpus.BLOCK_BYTES`` characters; ``seen``: characters counted before them."""
    batch: list[str] = []
    size = 0
    for i, text in numbered:
        _check_text(text, i)
        batch.append(text)
        size += len(text)
        if size >= corpus.BLOCK_BYTES:
            pool.put(("texts", batch))
            seen += size
            if progress:
                progress(seen)
            batch, size = [], 0
    if batch:
        pool.put(("texts", batch))


@gc_paused()  # texts in memory: no user code runs meanwhile (a stream's generator might make cycles)
def _count_list(texts, pattern: str, workers: int, progress, special_tokens: Iterable[str],
                table: bool) -> Counter[str] | ChunkTable:
    """``count_texts`` of texts in memory already: each distinct text counted once, weighted."""
    for i, text in enumerate(texts):
        _check_text(text, i)
    distinct = list(Counter(texts).items())
    total = sum(len(t) * n for t, n in distinct)
    if workers > 1 and "fork" in mp.get_all_start_methods() and total > PARALLEL_MIN_BYTES:
        out = _count_shared(distinct, pattern, workers, special_tokens, table)
    else:
        counter = ChunkCounter(pattern, special_tokens)
        for text, times in distinct:
            counter.add(text, times)
        out = _result(counter, table)
    if progress:
        progress(total)
    return out


def count_texts(
    texts: Iterable[str], pattern: str, workers: int | None = None, progress: Callable[[int], None] | None = None,
    special_tokens: Iterable[str] = (), table: bool = False,
) -> Counter[str] | ChunkTable:
    """Chunk counts of an iterable of texts (each one document); streams, parallel when large.
    A ChunkTable where ``table`` is true (what training reads).

    A list or tuple is in memory already: each distinct text is counted once, weighted by how
    often it occurs, by forked workers that read the list by index when it is large.

    Counting starts in this process; once more than ``PARALLEL_MIN_BYTES`` characters have
    been seen, the rest is sent to worker processes in batches.
    """
    workers = default_workers() if workers is None else max(1, int(workers))
    if isinstance(texts, (list, tuple)):
        return _count_list(texts, pattern, workers, progress, special_tokens, table)
    counter = ChunkCounter(pattern, special_tokens)
    it = iter(texts)
    pool = None
    try:
        for i, text in enumerate(it):
            _check_text(text, i)
            counter.add(text)
            if progress and i % 64 == 0:
                progress(counter.n_bytes)
            if workers > 1 and counter.n_bytes > PARALLEL_MIN_BYTES:
                pool = _Pool(pattern, tuple(special_tokens), workers, table)
                break
        out = _result(counter, table)
        if pool is not None:
            _send_rest(pool, enumerate(it, i + 1), counter.n_bytes, progress)
            out = pool.finish(out)
    finally:
        if pool is not None:
            pool.kill()
    return out
