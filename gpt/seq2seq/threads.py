"""How many threads NumPy's OpenBLAS uses, set at run time (what threadpoolctl does, for OpenBLAS only).

The translator's matrices are small ((B*T, 64) @ (64, 256)); on a shared 2-core machine OpenBLAS's
threads spin against each other and one thread trains ~15x faster than the default. The variable
OPENBLAS_NUM_THREADS works only before NumPy loads, so the commands call `blas_threads` instead.
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import Iterator

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")


def _openblas():
    """(set, get) functions of the OpenBLAS NumPy has loaded, or None (another BLAS, or not Linux)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        for name in _SETTERS:
            if hasattr(lib, name):
                getter = getattr(lib, name.replace("set_num", "get_num"), None)
                return getattr(lib, name), getter
    return None


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[bool]:
    """Within the block OpenBLAS uses n threads (None: leave it); yields whether that was possible."""
    found = _openblas() if n else None
    if found is None:
        yield False
        return
    setter, getter = found
    before = getter() if getter is not None else None
    setter(int(n))
    try:
        yield True
    finally:
        if before is not None:
            setter(int(before))
