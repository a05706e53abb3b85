"""OpenBLAS's thread count for a block of work, through autograd.parallel's BLAS control.

The translator's matrices are small ((B*T, 64) @ (64, 256)); on a shared 2-core machine OpenBLAS's
threads spin against each other, and one thread trains faster than the default.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from autograd import parallel


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[bool]:
    """Within the block OpenBLAS uses n threads (None: leave it); yields whether that was possible."""
    before = parallel.blas_threads() if n else None
    ok = bool(n) and parallel.set_blas_threads(int(n))
    try:
        yield ok
    finally:
        if ok and before is not None:
            parallel.set_blas_threads(before)
