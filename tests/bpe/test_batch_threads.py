"""encode_batch / encode_ordinary_batch on several cores give the ids of encoding one text at a
time, as tiktoken's num_threads does; small batches stay in the calling process."""
import numpy as np
import pytest

import bpe.encode.parallel_encode as parallel_encode
from bpe import Tokenizer
from bpe.encode.parallel_encode import START_CHARS, free_cores, plan


def test_small_batches_stay_in_process():
    assert plan([100] * 50, 8) == [0]
    assert plan([START_CHARS // 2] * 2, 2) == [0]
    assert plan([], 4) == [0] and plan([10**9], 4) == [0]  # one text: nothing to share
    assert plan([10**7, 10], 2) == [0]  # one text holds nearly everything


def test_large_batches_share_out_evenly_in_order(monkeypatch):
    monkeypatch.setattr(parallel_encode, "CALLER_SHARE", 1)
    assert plan([START_CHARS] * 40, 2) == [0, 20]
    assert plan([START_CHARS] * 40, 4) == [0, 10, 20, 30]
    assert plan([START_CHARS] * 40, 1) == [0]
    monkeypatch.setattr(parallel_encode, "CALLER_SHARE", 0.5)  # the caller's share half a worker's
    assert plan([START_CHARS] * 50, 2) == [0, 17]
    assert plan([START_CHARS] * 35, 3) == [0, 7, 21]
    bounds = plan([START_CHARS * (i % 3 + 1) for i in range(30)], 3)
    assert bounds[0] == 0 and bounds == sorted(set(bounds)) and len(bounds) == 3


def test_a_shares_last_parts_get_smaller():
    from bpe.encode.parallel_encode import PART_CHARS, TAIL_CHARS, parts

    sizes = [1000] * (5 * PART_CHARS // 1000)
    cuts = parts(sizes)
    assert cuts[0][0] == 0 and cuts[-1][1] == len(sizes) and all(a[1] == b[0] for a, b in zip(cuts, cuts[1:]))
    chars = [sum(sizes[a:b]) for a, b in cuts]
    assert all(abs(c - PART_CHARS) < 1000 for c in chars[:3])
    tail = chars[3:]
    assert all(a > b for a, b in zip(tail, tail[1:-1])) and min(tail[:-1]) >= TAIL_CHARS
    assert max(tail) <= PART_CHARS and len(tail) >= 4
    assert parts([10**7]) == [(0, 1)] and parts([]) == [(0, 0)]


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


def test_a_workers_ids_become_lists_per_text(tok4):
    want = [[tok4.vocab_size - 1, 300, 7], [], [258, 258]]
    counts = np.array([len(w) for w in want], dtype=np.int64).tobytes()
    flat = np.array([i for w in want for i in w], dtype=parallel_encode._id_dtype(tok4)).tobytes()
    got = parallel_encode._lists(tok4, counts, flat)
    assert got == want and all(type(i) is int for w in got for i in w)


def test_a_disallowed_special_token_raises_from_a_worker(tok4, monkeypatch):
    monkeypatch.setattr(parallel_encode, "START_CHARS", 0)
    texts = ["plain text"] * 4 + ["x<|endoftext|>y"]
    with pytest.raises(ValueError, match="endoftext"):
        tok4.encode_batch(texts, num_threads=2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_num_threads_must_be_a_positive_int(tok4, bad):
    with pytest.raises(ValueError, match="num_threads must be an int of at least 1"):
        tok4.encode_ordinary_batch(["a"], num_threads=bad)


def test_a_batch_in_one_process_merges_the_new_pieces_of_all_its_texts_together(tok4, corpus_texts, monkeypatch):
    import bpe.encode.piece_encoder as piece_encoder

    monkeypatch.setattr(piece_encoder, "TABLE_COST", 1 << 30)  # the token table from the first piece
    monkeypatch.setattr(piece_encoder, "BATCH_MIN", 1)
    fills = []
    real = piece_encoder.PieceEncoder._fill
    monkeypatch.setattr(piece_encoder.PieceEncoder, "_fill", lambda self, *a: fills.append(1) or real(self, *a))
    texts = [t[:3000] for t in corpus_texts[:30]]
    want = [tok4.encode_ordinary(t) for t in texts]
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)
    fills.clear()
    assert fresh.encode_ordinary_batch(texts, num_threads=1) == want
    assert len(fills) == 1  # one merge for all the texts' new pieces, not one per text


@pytest.mark.parametrize("num_threads", [1, 2])
def test_special_tokens_surrogates_and_long_texts_in_a_batch_equal_one_by_one(tok4, corpus_texts, monkeypatch,
                                                                               num_threads):
    import bpe.encode.piece_encoder as piece_encoder

    monkeypatch.setattr(parallel_encode, "START_CHARS", 0)
    monkeypatch.setattr(piece_encoder, "ENCODE_BLOCK", 64)  # texts of many blocks, cut inside a batch
    monkeypatch.setattr(piece_encoder, "BATCH_TARGET", 30)
    texts = ["<|endoftext|>", "<|endoftext|><|fim|>", "a<|fim|>", "<|fim|>b", "", "\ud83d\ude00 pair \udfff lone",
             "".join(corpus_texts[:3])[:20_000] + "<|endoftext|>" + corpus_texts[5][:500]] + corpus_texts[6:10]
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern, tok4.special_tokens)
    for allowed in ("all", {"<|fim|>"}):
        want = [tok4.encode(t, allowed_special=allowed, disallowed_special=()) for t in texts]
        assert fresh.encode_batch(texts, num_threads=num_threads, allowed_special=allowed,
                                  disallowed_special=()) == want
    want = [tok4.encode_ordinary(t) for t in texts]
    assert fresh.encode_ordinary_batch(texts, num_threads=num_threads) == want


def test_a_text_that_is_not_a_str_is_refused_before_any_worker_starts(tok4, monkeypatch):
    monkeypatch.setattr(parallel_encode, "START_CHARS", 0)
    monkeypatch.setattr(parallel_encode.mp, "get_context", None)  # a worker start would fail otherwise
    with pytest.raises(TypeError, match="encode_bytes"):
        tok4.encode_ordinary_batch(["text"] * 3 + [b"bytes"], num_threads=2)


def test_an_error_in_a_worker_is_raised_in_the_caller(tok4, monkeypatch):
    monkeypatch.setattr(parallel_encode, "START_CHARS", 0)

    def fails(*args):  # only a worker calls it
        raise MemoryError("worker ran out")

    monkeypatch.setattr(parallel_encode, "_packed_ids", fails)
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)  # its workers start now, with the failing encode
    with pytest.raises(MemoryError, match="worker ran out"):
        fresh.encode_ordinary_batch(["some text"] * 8, num_threads=2)
    monkeypatch.undo()
    assert fresh.encode_ordinary_batch(["some text"] * 8, num_threads=1) == [tok4.encode_ordinary("some text")] * 8


def test_a_workers_error_is_sent_without_its_traceback(tok4, monkeypatch):
    # A worker runs no cyclic collections: the traceback's frames would hold the error in a cycle.
    def fails(*args):
        raise ValueError("boom")

    class NoClaims:
        def poll(self):
            return False

    monkeypatch.setattr(parallel_encode, "_packed_ids", fails)
    sent = []
    parallel_encode._work(NoClaims(), sent.append, tok4, ("job", ["some text"], set()), None)
    (kind, error), = sent
    assert kind == "error" and isinstance(error, ValueError) and error.__traceback__ is None


class _Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("not this one")


def test_an_error_that_cannot_be_pickled_still_reaches_the_caller(tok4, monkeypatch):
    monkeypatch.setattr(parallel_encode, "START_CHARS", 0)
    if parallel_encode.default_workers() < 2:
        pytest.skip("one core: no worker is started")

    def fails(*args):
        raise _Unpicklable("worker failed")

    monkeypatch.setattr(parallel_encode, "_packed_ids", fails)
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)
    with pytest.raises(RuntimeError, match="reply could not be sent.*worker failed"):
        fresh.encode_ordinary_batch(["some text"] * 8, num_threads=2)


def test_workers_are_kept_for_the_next_batch_replaced_when_gone_and_stopped_with_their_tokenizer(
        tok4, corpus_texts, monkeypatch):
    import gc

    monkeypatch.setattr(parallel_encode, "START_CHARS", 0)
    if parallel_encode.default_workers() < 2:
        pytest.skip("one core: no worker is started")
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)
    texts = corpus_texts[:10]
    want = [tok4.encode_ordinary(t) for t in texts]
    assert fresh.encode_ordinary_batch(texts, num_threads=2) == want
    (worker, _), = parallel_encode._POOLS[fresh].workers
    assert fresh.encode_ordinary_batch(texts, num_threads=2) == want
    assert parallel_encode._POOLS[fresh].workers[0][0] is worker and worker.is_alive()  # the same process
    worker.kill()
    worker.join()
    assert fresh.encode_ordinary_batch(texts, num_threads=2) == want  # a new one in its place
    (again, _), = parallel_encode._POOLS[fresh].workers
    assert again is not worker
    del fresh
    gc.collect()
    again.join(timeout=10)
    assert not again.is_alive()


def test_an_interrupt_in_the_caller_stops_its_workers_and_the_next_batch_is_right(tok4, corpus_texts, monkeypatch):
    import os

    monkeypatch.setattr(parallel_encode, "START_CHARS", 0)
    if parallel_encode.default_workers() < 2:
        pytest.skip("one core: no worker is started")
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)
    texts = corpus_texts[:10]
    caller, real = os.getpid(), parallel_encode._encode_prepared

    def interrupted_in_the_caller(tok, share, allowed):
        if os.getpid() == caller:
            raise KeyboardInterrupt
        return real(tok, share, allowed)

    monkeypatch.setattr(parallel_encode, "_encode_prepared", interrupted_in_the_caller)
    with pytest.raises(KeyboardInterrupt):
        fresh.encode_ordinary_batch(texts, num_threads=2)  # its worker's reply stays unread
    assert parallel_encode._POOLS[fresh].workers == []  # so the pool was closed
    monkeypatch.setattr(parallel_encode, "_encode_prepared", real)
    assert fresh.encode_ordinary_batch(texts, num_threads=2) == [tok4.encode_ordinary(t) for t in texts]


def test_the_caller_takes_a_slow_workers_last_parts_and_the_ids_stay_in_order(tok4, corpus_texts, monkeypatch):
    import time

    monkeypatch.setattr(parallel_encode, "START_CHARS", 0)
    monkeypatch.setattr(parallel_encode, "PART_CHARS", 400)  # parts of a text or two
    if parallel_encode.default_workers() < 2:
        pytest.skip("one core: no worker is started")
    real, real_packed, by_caller = parallel_encode._encode_prepared, parallel_encode._packed_ids, []

    def in_the_caller(tok, texts, allowed):
        by_caller.extend(texts)
        return real(tok, texts, allowed)

    def slow_in_the_worker(*args):
        time.sleep(0.02)
        return real_packed(*args)

    monkeypatch.setattr(parallel_encode, "_encode_prepared", in_the_caller)
    monkeypatch.setattr(parallel_encode, "_packed_ids", slow_in_the_worker)
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)  # its worker starts now, slowed
    texts = [t[:300] for t in corpus_texts[:40]]
    bounds = parallel_encode.plan([len(t) for t in texts], 2)
    assert len(bounds) == 2
    want = [tok4.encode_ordinary(t) for t in texts]
    for _ in range(3):  # a claim that comes after the worker's last part waits in its pipe: the next batch skips it
        by_caller.clear()
        assert fresh.encode_ordinary_batch(texts, num_threads=2) == want
        assert texts[-1] in by_caller  # the worker's last part was the caller's
        assert texts[bounds[1]] not in by_caller  # its first was the worker's
