"""Pausing Python's cyclic garbage collector while a loop makes many containers without cycles
(training, counting and encoding all do).

Encoding a long text makes a tuple or list per new piece, training a list per pair and counting
a list of chunks per text: none of them can form a cycle, yet every few hundred of them start a
collection, and the full ones scan the whole heap (the trainer's pair index holds a million
lists) again and again. Mercurial's parsers pause the collector for the same reason.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside the block (nested blocks leave it to the outermost); also a
    decorator (``@gc_paused()``)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        _age_survivors()
        gc.enable()


def _age_survivors() -> None:
    """Move every tracked object to the oldest generation, where a full collection still sees it.

    What a paused block keeps is long-lived (a tokenizer's cache holds a list per new piece).
    Left in the youngest generation, the first allocation after enable() scans all of it only
    to promote it, and the middle generation's next collection scans it again. freeze() and unfreeze() splice the
    generations' lists into the oldest one instead, in constant time. Not where the program has
    frozen objects of its own (a server before fork): unfreeze() would let them go.
    """
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
