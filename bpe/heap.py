"""The process's heap for loops that make and free large arrays over and over (training a
tokenizer, a training step of the GPT): freed blocks kept for reuse; and, while a tokenizer
trains, no huge pages asked for.

glibc's malloc serves blocks of more than ~128 KiB-32 MiB with a fresh mmap and unmaps them on
free (and trims the top of the heap), so a loop that frees and re-allocates the same large
temporaries page-faults all of that memory in again each time. Raising the mmap and trim
thresholds keeps the freed blocks in malloc's free lists, where the next allocation reuses them
(``keep_freed_memory``). The cost: the process keeps its peak heap, which a training loop reaches
again on its next step anyway, and which tokenizer training gives back when done (``training_heap``).

NumPy asks the kernel for transparent huge pages (madvise) for every array of 4 MiB or more. Where
the kernel's THP defrag setting is ``madvise`` (a common default), each fault in such an array may
compact memory first to find a free 2 MiB page: on a virtual machine that stalls far longer than
the TLB saves (the first merges of tokenizer training make and free arrays of millions of
positions at every merge). ``training_heap`` turns the advice off while it runs.
"""
from __future__ import annotations

import ctypes
import sys
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator

_M_TRIM_THRESHOLD = -1   # <malloc.h> mallopt parameters
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 1 << 30     # blocks below 1 GiB come from the heap (and go back to it)
_TRIM_THRESHOLD = 2**31 - 1   # never trim the heap's top

_applied = False


@lru_cache(maxsize=1)
def _libc():
    """The C library the interpreter runs on, where it has glibc's mallopt; else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):  # no mallopt there (musl, say)
        return None
    return libc


def _thresholds(mmap: int, trim: int) -> bool:
    # Both are needed: setting either one turns off glibc's dynamic threshold, and the trim
    # threshold alone would send every large block to mmap.
    libc = _libc()
    return (libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, mmap))
            and bool(libc.mallopt(_M_TRIM_THRESHOLD, trim)))


def keep_freed_memory() -> bool:
    """Make glibc keep freed large blocks for reuse (see the module docstring). Process-wide and
    idempotent; returns True when applied, False where it does not apply (not Linux/glibc)."""
    global _applied
    if not _applied:
        _applied = _thresholds(_MMAP_THRESHOLD, _TRIM_THRESHOLD)
    return _applied


def freed_memory_kept() -> bool:
    """Whether ``keep_freed_memory`` is in force now."""
    return _applied


def _huge_page_advice(on: bool) -> bool | None:
    """Set whether NumPy advises huge pages for its large arrays; the setting before (None where
    this NumPy has no such switch)."""
    try:
        from numpy._core import multiarray
    except ImportError:  # NumPy 1.x
        from numpy.core import multiarray
    switch = getattr(multiarray, "_set_madvise_hugepage", None)
    return None if switch is None else bool(switch(on))


@contextmanager
def training_heap() -> Iterator[None]:
    """Inside the block: no huge-page advice from NumPy, and freed large blocks kept for reuse. After
    it, the advice as it was, and the free blocks given back to the system (``malloc_trim``): the
    thresholds stay as ``keep_freed_memory`` set them (glibc cannot go back to its dynamic ones),
    so later loops in the process keep their freed blocks too."""
    advice = _huge_page_advice(False)
    keep_freed_memory()
    try:
        yield
    finally:
        if advice is not None:
            _huge_page_advice(advice)
        if _applied:
            _libc().malloc_trim(0)
