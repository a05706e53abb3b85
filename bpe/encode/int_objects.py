"""Lists of ids made of shared int objects.

``ndarray.tolist()`` makes a new Python int for every id above the interpreter's small ints.
``id_list(ids, size)`` instead reads each id's int off an object array of the ints 0..size - 1,
made once: one copied reference per id. The batch encoder makes the lists of the ids its workers
send back this way. (Lists that are copied again right away gain nothing: the fresh ints of
``tolist`` lie in memory in order, the shared ones wherever their values send the copy.)
"""
from __future__ import annotations

import numpy as np

MAX_SIZE = 1 << 19  # the largest vocabulary whose ints are kept (about 20 MB with their objects)
_INTS = np.zeros(0, dtype=object)  # the ints 0, 1, ... as Python objects


def id_list(ids: np.ndarray, size: int) -> list[int]:
    """``ids.tolist()`` (ids: an integer array, each in 0..size - 1), its ints shared when ``size``
    is at most MAX_SIZE."""
    global _INTS
    if _INTS.size < size <= MAX_SIZE:
        _INTS = np.arange(size).astype(object)
    return _INTS[ids].tolist() if size <= _INTS.size else ids.tolist()
