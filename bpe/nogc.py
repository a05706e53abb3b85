"""Pausing Python's cyclic garbage collector while a loop makes many containers without cycles.

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
        gc.enable()
