"""encode_batch / encode_ordinary_batch on several cores give the ids of encoding one text at a
time, as tiktoken's num_threads does; small batches stay in the calling process."""
import pytest

import bpe.encode.parallel_encode as parallel_encode
from bpe.encode.parallel_encode import START_CHARS, free_cores, plan


def test_small_batches_stay_in_process():
    assert plan([100] * 50, 8) == [0]
    assert plan([START_CHARS // 2] * 2, 2) == [0]
    assert plan([], 4) == [0] and plan([10**9], 4) == [0]  # one text: nothing to share
    assert plan([10**7, 10], 2) == [0]  # one text holds nearly everything


def test_large_batches_share_out_evenly_in_order():
    assert plan([START_CHARS] * 40, 2) == [0, 20]
    assert plan([START_CHARS] * 40, 4) == [0, 10, 20, 30]
    assert plan([START_CHARS] * 40, 1) == [0]
    bounds = plan([START_CHARS * (i % 3 + 1) for i in range(30)], 3)
    assert bounds[0] == 0 and bounds == sorted(set(bounds)) and len(bounds) == 3


def test_the_default_is_the_free_cores():
    assert 1 <= free_cores() <= parallel_encode.default_workers()


@pytest.mark.parametrize("num_threads", [1, 2, 3])
def test_a_batch_on_several_workers_equals_one_by_one(tok4, corpus_texts, monkeypatch, num_threads):
    monkeypatch.setattr(parallel_encode, "START_CHARS", 0)  # workers even for a small batch
    texts = corpus_texts[:12] + ["", "x<|endoftext|>y", "a" * 5_000, "\ud800 lone"]
    want = [tok4.encode(t, allowed_special="all") for t in texts]
    assert tok4.encode_batch(texts, num_threads=num_threads, allowed_special="all") == want
    want = [tok4.encode_ordinary(t) for t in texts]
    assert tok4.encode_ordinary_batch(texts, num_threads=num_threads) == want


def test_a_disallowed_special_token_raises_from_a_worker(tok4, monkeypatch):
    monkeypatch.setattr(parallel_encode, "START_CHARS", 0)
    texts = ["plain text"] * 4 + ["x<|endoftext|>y"]
    with pytest.raises(ValueError, match="endoftext"):
        tok4.encode_batch(texts, num_threads=2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_num_threads_must_be_a_positive_int(tok4, bad):
    with pytest.raises(ValueError, match="num_threads must be an int of at least 1"):
        tok4.encode_ordinary_batch(["a"], num_threads=bad)
