"""The collector pauses inside gc_paused blocks and comes back after them, errors included."""
import gc

import pytest

from bpe.merges import train_merges
from bpe.nogc import gc_paused


def test_paused_inside_and_back_after_an_error_and_nesting():
    assert gc.isenabled()
    with pytest.raises(KeyError):
        with gc_paused():
            assert not gc.isenabled()
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the inner block leaves it to the outer one
            raise KeyError
    assert gc.isenabled()


def test_a_paused_collector_stays_paused():
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_training_runs_paused_and_restores_the_collector():
    seen = []
    train_merges({"abab": 3, "ab": 1}, 2, progress=lambda n: seen.append(gc.isenabled()))
    assert seen == [False, False] and gc.isenabled()
