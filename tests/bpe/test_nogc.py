"""The collector pauses inside gc_paused blocks and comes back after them, errors included."""
import gc

import pytest

from bpe.train.merge_learner import train_merges
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


def test_what_a_block_keeps_goes_to_the_oldest_generation():
    # not left young, where the first allocation after the block would scan all of it
    with gc_paused():
        kept = [[i] for i in range(20_000)]
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(kept) in oldest and id(kept[-1]) in oldest


def test_cycles_made_in_a_block_are_still_collected():
    import weakref

    class Node:
        pass

    with gc_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        del a, b
    assert alive() is not None       # a cycle: only the collector frees it
    gc.collect()
    assert alive() is None


def test_objects_the_program_froze_stay_frozen():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            [[i] for i in range(100)]
        assert gc.get_freeze_count() == frozen > 0
    finally:
        gc.unfreeze()
