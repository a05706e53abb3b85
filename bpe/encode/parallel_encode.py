"""Encoding many texts in worker processes (``Tokenizer.encode_batch``)."""
from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

from ..workers import default_workers

_TOK = None


def _init(tok) -> None:
    global _TOK
    _TOK = tok


def _encode_many(args) -> list[list[int]]:
    texts, allowed, disallowed = args
    return [_TOK.encode(t, allowed_special=allowed, disallowed_special=disallowed) for t in texts]


def encode_batch(tok, texts: list[str], workers, allowed_special, disallowed_special) -> list[list[int]]:
    """Encode ``texts`` in order; one process when small or ``workers == 1``."""
    workers = default_workers() if workers is None else max(1, int(workers))
    total = sum(len(t) for t in texts)
    if workers == 1 or len(texts) < 2 or total < (1 << 20):
        return [tok.encode(t, allowed_special=allowed_special, disallowed_special=disallowed_special)
                for t in texts]
    # Contiguous batches of about equal size, several per worker to balance the load.
    n_batches = min(len(texts), workers * 4)
    target = total / n_batches
    batches, cur, size = [], [], 0
    for t in texts:
        cur.append(t)
        size += len(t)
        if size >= target:
            batches.append(cur)
            cur, size = [], 0
    if cur:
        batches.append(cur)
    allowed = allowed_special if allowed_special == "all" else frozenset(allowed_special)
    disallowed = disallowed_special if disallowed_special == "all" else tuple(disallowed_special)
    global _TOK
    if "fork" in mp.get_all_start_methods():
        # Forked workers inherit the tokenizer, its piece cache included, without pickling.
        _TOK = tok
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork"))
    else:
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_init, initargs=(tok,))
    try:
        with pool as ex:
            out: list[list[int]] = []
            for part in ex.map(_encode_many, [(b, allowed, disallowed) for b in batches]):
                out.extend(part)
    finally:
        _TOK = None
    return out
