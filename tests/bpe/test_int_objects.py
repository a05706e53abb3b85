"""id_list: ``ndarray.tolist()`` with the ints shared between calls, up to a vocabulary size."""
import numpy as np
import pytest

import bpe.encode.int_objects as int_objects
from bpe.encode.int_objects import id_list


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16])
@pytest.mark.parametrize("shared", [True, False])
def test_id_lists_equal_tolist_and_share_their_ints_up_to_the_size(monkeypatch, dtype, shared):
    if not shared:
        monkeypatch.setattr(int_objects, "MAX_SIZE", 1000)
    monkeypatch.setattr(int_objects, "_INTS", np.zeros(0, dtype=object))
    ids = np.array([1999, 300, 7, 0, 300, 258, 1999], dtype=dtype)
    got, again = id_list(ids, 2000), id_list(ids[:2], 2000)
    assert got == ids.tolist() and all(type(i) is int for i in got)
    # above the interpreter's small ints: one object per value, or a new one each time
    assert (got[0] is got[6] is again[0]) is shared and (got[1] is got[4] is again[1]) is shared
    assert id_list(ids[:0], 2000) == []
    assert id_list(ids, 5000) == ids.tolist()  # a larger vocabulary later: its ints are made then
