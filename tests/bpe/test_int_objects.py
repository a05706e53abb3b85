"""id_lists: ``ndarray.tolist()`` of each run of ids, the ints shared between calls up to a vocabulary size."""
import numpy as np
import pytest

import bpe.encode.int_objects as int_objects
from bpe.encode.int_objects import id_lists


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16])
@pytest.mark.parametrize("shared", [True, False])
def test_id_lists_equal_tolist_and_share_their_ints_up_to_the_size(monkeypatch, dtype, shared):
    if not shared:
        monkeypatch.setattr(int_objects, "MAX_SIZE", 1000)
    monkeypatch.setattr(int_objects, "_INTS", np.zeros(0, dtype=object))
    ids = np.array([1999, 300, 7, 0, 300, 258, 1999], dtype=dtype)
    runs, again = id_lists(ids, [2, 2, 5, 7], 2000), id_lists(ids[:2], [2], 2000)
    assert runs == [ids[:2].tolist(), [], ids[2:5].tolist(), ids[5:].tolist()]
    got = [i for run in runs for i in run]
    assert all(type(i) is int for i in got) and all(type(r) is list for r in runs)
    # above the interpreter's small ints: one object per value, or a new one each time
    assert (got[0] is got[6] is again[0][0]) is shared and (got[1] is got[4] is again[0][1]) is shared
    assert id_lists(ids[:0], [0], 2000) == [[]]
    assert id_lists(ids, [7], 5000) == [ids.tolist()]  # a larger vocabulary later: its ints are made then
