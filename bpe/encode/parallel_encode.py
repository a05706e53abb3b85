"""Encoding many texts at once (``Tokenizer.encode_batch``): with the same ids as encoding them one
by one, in one process or split into contiguous shares, one per worker process.

In one process the new pieces of all the texts are merged together (``PieceEncoder.encode_many``),
so a batch of short texts costs what their concatenation would. The merge holds the GIL (it is
Python), so threads would take turns: the workers are processes, forked where the platform can,
so that they inherit the tokenizer and its warm piece cache without pickling, and kept for the
tokenizer's later batches (``_Pool``): a process forked per batch would copy every page that it
or the caller writes afterwards, a large share of its time. The calling process encodes the
first share itself while the others run; a worker gets its texts through a pipe and sends its ids
back as the bytes of one flat NumPy array, cheaper to move than lists of ints. A cost model keeps
small batches in-process: a worker pays for its start and for sending its ids, so it is started
only while the time it saves exceeds that.
"""
from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import threading
import weakref
from itertools import accumulate, chain

import numpy as np

from ..text import repair_surrogates
from ..workers import default_workers
from .special import check_disallowed, special_policy

START_CHARS = 1 << 17  # characters whose encoding takes about as long as starting one worker
RETURN_COST = 1 / 16  # the cost of sending a worker's ids back, as a share of encoding its characters


def free_cores() -> int:
    """The cores this process may run on, less those other processes keep busy (the load average
    over the last minute, this process counted as idle), at least 1."""
    cores = default_workers()
    try:
        busy = int(os.getloadavg()[0])
    except (AttributeError, OSError):  # no load average on this platform
        return cores
    return max(1, min(cores, cores + 1 - busy))


def plan(sizes: list[int], workers: int) -> list[int]:
    """Where the shares of texts of ``sizes`` characters start: ``[0, a, b, ...]`` for contiguous
    shares of about equal characters (the first stays in-process), as many as the cost model finds
    worth it, at most ``workers``; ``[0]`` encodes everything in-process."""
    total = sum(sizes)
    n = min(workers, len(sizes))
    # Another worker pays for itself while the characters it takes off the others (1/(n-1) - 1/n of
    # the total), less the cost of sending its ids back, outweigh its start.
    while n > 1 and total * (1 / (n - 1) - 1 / n) - RETURN_COST * total / n < START_CHARS:
        n -= 1
    if n <= 1:
        return [0]
    bounds, target = [0], total / n
    for i, done in enumerate(accumulate(sizes), 1):
        if done >= target * len(bounds) and i < len(sizes) and len(bounds) < n:
            bounds.append(i)
    # A few long texts may not share out evenly: in-process unless the largest share still gains.
    largest = max(sum(sizes[a:b]) for a, b in zip(bounds, bounds[1:] + [len(sizes)]))
    return bounds if largest + START_CHARS * (len(bounds) - 1) < total else [0]


def _prepare(tok, texts: list, allowed_special, disallowed_special) -> tuple[list[str], set[str]]:
    """The texts as the encoder takes them (surrogates repaired) and the allowed special tokens,
    after every check that ``tok.encode`` makes, in the calling process: an error is raised here,
    for the first text that has one, before any worker starts."""
    for t in texts:
        if not isinstance(t, str):
            tok.encode(t)  # raises its TypeError
    allowed, disallowed = special_policy(tok.special_tokens, allowed_special, disallowed_special)
    finder = tok._special_re(disallowed) if disallowed else None  # noqa: SLF001 - the tokenizer's cached regex
    for t in texts:
        check_disallowed(t, finder)
    return list(map(repair_surrogates, texts)), allowed


def _encode_prepared(tok, texts: list[str], allowed: set[str]) -> list[list[int]]:
    """The ids of ``_prepare``'s texts: the text between allowed special tokens of all the texts
    encoded together, the special tokens' ids put in their places."""
    encoder = tok._ordinary  # noqa: SLF001 - the tokenizer's piece encoder and its cache
    if not allowed:
        return encoder.encode_many(texts)
    special, finditer = tok.special_tokens, tok._special_re(allowed).finditer  # noqa: SLF001
    parts: list[str] = []  # the ordinary text of every text, in order
    layouts: list[list[int | None]] = []  # per text: a special token's id, or None for the next part
    for t in texts:
        layout: list[int | None] = []
        pos = 0
        for m in finditer(t):
            if m.start() > pos:
                parts.append(t[pos:m.start()])
                layout.append(None)
            layout.append(special[m.group()])
            pos = m.end()
        if pos < len(t) or not layout:
            parts.append(t[pos:])
            layout.append(None)
        layouts.append(layout)
    ordinary = iter(encoder.encode_many(parts))
    out = []
    for layout in layouts:
        if layout == [None]:
            out.append(next(ordinary))
            continue
        ids: list[int] = []
        for item in layout:
            if item is None:
                ids += next(ordinary)
            else:
                ids.append(item)
        out.append(ids)
    return out


def _id_dtype(tok) -> type:
    """The NumPy type that holds every id of ``tok``: 4 bytes where they fit."""
    return np.int32 if tok.vocab_size <= 1 << 31 else np.int64


def _serve(conn, theirs, tok) -> None:
    """A worker's loop: encode each ``(texts, allowed)`` that comes, send back ("ok", the number of
    ids of each text, all the ids end to end), both as array bytes, or ("error", the exception);
    stop at None, or once the process that started it is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's: it stops the workers
    for pool in list(_POOLS.values()):  # forked: the callers' ends of every pipe, this one's too
        for _, end in pool.workers:
            end.close()
    theirs.close()
    gc.freeze()  # what it inherits stays out of its collections, whose scans would copy those pages
    parent = os.getppid()
    while True:
        if not conn.poll(1.0):
            if os.getppid() != parent:
                return
            continue
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            ids = _encode_prepared(tok, *job)
            counts = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            flat = np.fromiter(chain.from_iterable(ids), dtype=_id_dtype(tok), count=int(counts.sum()))
            reply = ("ok", counts.tobytes(), flat.tobytes())
        except BaseException as e:  # noqa: BLE001 - sent to the caller, who raises it
            reply = ("error", e)
        conn.send(reply)


class _Pool:
    """The worker processes of one tokenizer, kept for its later batches: a worker forked once keeps
    its own warm piece cache and its own pages, where one forked per batch would copy every page
    that it or the caller writes. Closed when the tokenizer is collected, and at exit (daemons)."""

    def __init__(self):
        self.pid = os.getpid()
        self.workers: list = []  # (process, the caller's end of its pipe)
        self.lock = threading.Lock()

    def take(self, tok, n: int) -> list:
        """``n`` running workers, started where there are fewer."""
        for p, end in [w for w in self.workers if not w[0].is_alive()]:  # ended (killed, say): replaced
            end.close()
            self.workers.remove((p, end))
        # Forked, a worker's arguments are inherited, not pickled; spawned, the tokenizer is pickled
        # without its caches (Tokenizer.__getstate__).
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        if len(self.workers) < n:
            tok._ordinary.share_table()  # noqa: SLF001 - its piece encoder, for the workers to inherit
        while len(self.workers) < n:
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(theirs, mine, tok), daemon=True)
            p.start()
            theirs.close()
            self.workers.append((p, mine))
        return self.workers[:n]

    def close(self) -> None:
        if os.getpid() != self.pid:  # a forked copy: the workers are its parent's
            return
        workers, self.workers = self.workers, []
        for p, end in workers:
            try:
                end.send(None)
            except OSError:
                pass
            end.close()
        for p, _ in workers:
            p.join(timeout=1)
            if p.is_alive():
                p.terminate()
                p.join()


_POOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> its _Pool


def _pool_of(tok) -> _Pool:
    pool = _POOLS.get(tok)
    if pool is None or pool.pid != os.getpid():  # none yet, or a forked copy of another process's
        pool = _POOLS[tok] = _Pool()
        weakref.finalize(tok, pool.close)
    return pool


def _unpack(tok, message) -> list[list[int]]:
    kind, *payload = message
    if kind == "error":
        raise payload[0]
    ends = np.cumsum(np.frombuffer(payload[0], dtype=np.int64)).tolist()
    ids = np.frombuffer(payload[1], dtype=_id_dtype(tok)).tolist()
    return list(map(ids.__getitem__, map(slice, [0] + ends[:-1], ends)))


def encode_batch(tok, texts: list[str], num_threads: int | None, allowed_special, disallowed_special,
                 ) -> list[list[int]]:
    """``[tok.encode(t, ...) for t in texts]``, in up to ``num_threads`` processes (default: the
    free cores; never more than the cores this process may run on), the calling one included."""
    if num_threads is None:
        num_threads = free_cores()
    elif not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be an int of at least 1, got {num_threads!r}")
    texts, allowed = _prepare(tok, texts, allowed_special, disallowed_special)
    bounds = plan([len(t) for t in texts], min(num_threads, default_workers()))
    if len(bounds) == 1:
        return _encode_prepared(tok, texts, allowed)
    shares = [texts[a:b] for a, b in zip(bounds, bounds[1:] + [len(texts)])]
    pool = _pool_of(tok)
    with pool.lock:
        replies = []
        try:
            workers = pool.take(tok, len(shares) - 1)
            for (_, end), share in zip(workers, shares[1:]):
                end.send((share, allowed))
            out = _encode_prepared(tok, shares[0], allowed)
            for p, end in workers:
                try:
                    replies.append(end.recv())
                except EOFError:
                    raise RuntimeError(f"an encoding worker process ended without its ids "
                                       f"(exit code {p.exitcode})") from None
        except BaseException:  # an interrupt, or a worker gone: replies may be left in the pipes
            pool.close()
            raise
    for message in replies:  # every reply read first, so that the pipes stay in step
        out += _unpack(tok, message)
    return out
