"""A batch worker's encoder into int32 bytes gives the ids of the list encoder, one by one and in
batches, and packs the pieces its list encoder met instead of merging them again."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import bpe.encode.piece_encoder as piece_encoder
from bpe import Tokenizer
from bpe.encode.packed_encoder import ID_TYPE, PackedEncoder
from bpe.encode.parallel_encode import _packed_ids


def _ids(packed: bytes) -> list[int]:
    return np.frombuffer(packed, dtype=ID_TYPE).tolist()


def _no_table(ranks):
    raise ValueError("no token table")


@pytest.fixture(params=["one by one", "batched"])
def mode(request, monkeypatch):
    if request.param == "one by one":
        monkeypatch.setattr(piece_encoder, "TokenTable", _no_table)
    else:  # the token table from the first piece, and every batch merged in NumPy
        monkeypatch.setattr(piece_encoder, "TABLE_COST", 1 << 30)
        monkeypatch.setattr(piece_encoder, "BATCH_MIN", 1)
    return request.param


def test_packed_ids_equal_the_lists(tok4, corpus_texts, mode):
    texts = corpus_texts[:20] + ["", "a" * 3_000, "x" * 300 + " y"]
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)
    packed = PackedEncoder(fresh._ordinary)
    assert list(map(_ids, packed.encode_many(texts))) == [tok4.encode_ordinary(t) for t in texts]
    assert (packed._table is False) == (mode == "one by one")
    assert _ids(packed(texts[3])) == tok4.encode_ordinary(texts[3])
    assert fresh._ordinary.cache == {}  # the list encoder's cache is read, never written


@given(data=st.lists(st.binary(max_size=60), max_size=8))
def test_escaped_bytes_pack_as_they_encode(tok4, data):
    texts = [b.decode("utf-8", "surrogateescape") for b in data]
    packed = PackedEncoder(Tokenizer(tok4.mergeable_ranks, tok4.pattern)._ordinary)
    assert list(map(_ids, packed.encode_many(texts))) == [tok4.encode_bytes(b) for b in data]


def test_pieces_the_list_encoder_met_are_packed_not_merged_again(tok4, corpus_texts, monkeypatch, mode):
    texts = corpus_texts[:10]
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)
    want = [fresh.encode_ordinary(t) for t in texts]
    merged = []
    one, batch = piece_encoder.PieceEncoder._merge_one, piece_encoder.merge_pieces
    monkeypatch.setattr(piece_encoder.PieceEncoder, "_merge_one", lambda self, p: merged.append(p) or one(self, p))
    monkeypatch.setattr(piece_encoder, "merge_pieces", lambda *a: merged.append(a) or batch(*a))
    packed = PackedEncoder(fresh._ordinary)
    assert list(map(_ids, packed.encode_many(texts))) == want
    assert merged == []
    assert _ids(packed(texts[0] + " zqxjkv")) == tok4.encode_ordinary(texts[0] + " zqxjkv")
    assert merged  # a piece it had not met is merged


@pytest.mark.parametrize("allowed", [set(), {"<|endoftext|>"}])
def test_a_workers_ids_are_the_same_bytes_packed_or_from_lists(tok4, corpus_texts, allowed):
    texts = corpus_texts[:5] + ["a<|endoftext|>b", ""]
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern, tok4.special_tokens)
    lists = _packed_ids(fresh, texts, allowed, None)
    assert _packed_ids(fresh, texts, allowed, PackedEncoder(fresh._ordinary)) == lists
    counts = np.frombuffer(lists[0], dtype=np.int64).tolist()
    want = [fresh.encode(t, allowed_special=allowed, disallowed_special=()) for t in texts]
    assert counts == list(map(len, want)) and _ids(lists[1]) == [i for w in want for i in w]


def test_a_piece_still_waiting_in_the_list_encoders_cache_is_merged(tok4, mode):
    text = "zqxjkv wvutsr zqxjkv"
    listed = Tokenizer(tok4.mergeable_ranks, tok4.pattern)._ordinary
    for piece in listed.findall(text):
        dict.__setitem__(listed.cache, piece, [])  # as a batch leaves a piece before it is merged
    assert _ids(PackedEncoder(listed)(text)) == tok4.encode_ordinary(text)
    assert _ids(PackedEncoder(listed).encode_many([text])[0]) == tok4.encode_ordinary(text)
