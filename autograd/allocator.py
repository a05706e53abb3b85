"""Host allocator tuning: keep freed memory in the process instead of returning it to the OS.

A training step allocates and frees the same large temporaries every step (activations,
gradients, logits). glibc's malloc serves blocks of more than ~128 KiB-32 MiB with a fresh
mmap and unmaps them on free (and trims the top of the heap), so every step page-faults
all of that memory in again, a large share of a step's time. Raising the mmap and trim thresholds keeps
the freed blocks in malloc's free lists, where the next step reuses them (0 faults).
The cost: the process keeps its peak heap after a step instead of giving it back, which a
training loop reaches again on its next step anyway.
"""
from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD = -1   # <malloc.h> mallopt parameters
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 1 << 30     # blocks below 1 GiB come from the heap (and go back to it)
_TRIM_THRESHOLD = 2**31 - 1   # never trim the heap's top

_applied = False


def keep_freed_memory() -> bool:
    """Make glibc keep freed large blocks for reuse (see the module docstring). Process-wide and
    idempotent; returns True when applied, False where it does not apply (not Linux/glibc)."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):  # no mallopt there
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # Both are needed: setting either one turns off glibc's dynamic threshold, and the trim
    # threshold alone would send every large block to mmap.
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    return _applied
