"""Lists of ids made of shared int objects.

``ndarray.tolist()`` makes a new Python int for every id above the interpreter's small ints.
``id_lists(ids, ends, size)`` instead reads each id's int off an object array of the ints
0..size - 1, made once, and cuts the references into lists: the batch encoder makes the lists of
the ids its workers send back this way, one list per text. (Lists that are copied again right
away gain nothing: the fresh ints of ``tolist`` lie in memory in order, the shared ones wherever
their values send the copy.)
"""
from __future__ import annotations

import numpy as np

MAX_SIZE = 1 << 19  # the largest vocabulary whose ints are kept (about 20 MB with their objects)
_INTS = np.zeros(0, dtype=object)  # the ints 0, 1, ... as Python objects


def id_lists(ids: np.ndarray, ends: list[int], size: int) -> list[list[int]]:
    """``ids`` (an integer array, each in 0..size - 1) cut into lists at ``ends`` (where each list
    ends, increasing, the last ``len(ids)``): ``[ids[a:b].tolist() ...]``, the ints shared when
    ``size`` is at most MAX_SIZE."""
    global _INTS
    if _INTS.size < size <= MAX_SIZE:
        _INTS = np.arange(size).astype(object)
    if size <= _INTS.size:
        ids = _INTS[ids]  # each run's tolist() then copies references: no list of all of them first
    return [ids[a:b].tolist() for a, b in zip([0] + ends[:-1], ends)]
