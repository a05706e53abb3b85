"""Encoding many texts at once (``Tokenizer.encode_batch``): split into contiguous shares, one per
worker, with the same ids as encoding them one by one.

The merge holds the GIL (it is Python), so threads would take turns: the workers are processes,
forked where the platform can (they inherit the tokenizer and its warm piece cache without
pickling). The calling process encodes the first share itself while the others run, and each
worker sends its ids back as one flat array of machine ints (cheaper to move than lists of ints).
A cost model keeps small batches in-process: a worker pays for its start and for sending its ids,
so it is started only while the time it saves exceeds that.
"""
from __future__ import annotations

import multiprocessing as mp
import os
from array import array
from concurrent.futures import ProcessPoolExecutor
from itertools import accumulate

from ..workers import default_workers

START_CHARS = 1 << 17  # characters whose encoding takes about as long as starting one worker
RETURN_COST = 1 / 16  # the cost of sending a worker's ids back, as a share of encoding its characters
_IDS = "q"  # array type of the ids sent back (signed 64-bit)

_TOK = None  # the tokenizer a forked worker encodes with


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


def _init(tok) -> None:
    global _TOK
    _TOK = tok


def _encode_share(args) -> tuple[bytes, list[int]]:
    """In a worker: the ids of the texts end to end (as bytes of an array of ``_IDS``) and how many
    each text has."""
    texts, allowed, disallowed = args
    flat, counts = array(_IDS), []
    for t in texts:
        ids = _TOK.encode(t, allowed_special=allowed, disallowed_special=disallowed)
        flat.extend(ids)
        counts.append(len(ids))
    return flat.tobytes(), counts


def _unpack(packed: tuple[bytes, list[int]]) -> list[list[int]]:
    data, counts = packed
    flat = array(_IDS)
    flat.frombytes(data)
    ids = flat.tolist()
    ends = list(accumulate(counts))
    return [ids[e - c:e] for c, e in zip(counts, ends)]


def encode_batch(tok, texts: list[str], num_threads: int | None, allowed_special, disallowed_special,
                 ) -> list[list[int]]:
    """``[tok.encode(t, ...) for t in texts]``, in up to ``num_threads`` processes (default: the
    free cores; never more than the cores this process may run on), the calling one included."""
    if num_threads is None:
        num_threads = free_cores()
    elif not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be an int of at least 1, got {num_threads!r}")
    bounds = plan([len(t) for t in texts], min(num_threads, default_workers()))
    if len(bounds) == 1:
        return [tok.encode(t, allowed_special=allowed_special, disallowed_special=disallowed_special)
                for t in texts]
    allowed = allowed_special if allowed_special == "all" else frozenset(allowed_special)
    disallowed = disallowed_special if disallowed_special == "all" else tuple(disallowed_special)
    shares = [texts[a:b] for a, b in zip(bounds, bounds[1:] + [len(texts)])]
    global _TOK
    if "fork" in mp.get_all_start_methods():
        _TOK = tok
        pool = ProcessPoolExecutor(max_workers=len(shares) - 1, mp_context=mp.get_context("fork"))
    else:
        pool = ProcessPoolExecutor(max_workers=len(shares) - 1, initializer=_init, initargs=(tok,))
    try:
        with pool as ex:
            futures = [ex.submit(_encode_share, (s, allowed, disallowed)) for s in shares[1:]]
            out = [tok.encode(t, allowed_special=allowed, disallowed_special=disallowed) for t in shares[0]]
            for f in futures:
                out += _unpack(f.result())
    finally:
        _TOK = None
    return out
