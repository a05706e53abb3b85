"""Batch merging in NumPy (bpe.npmerge) gives the ids of the one-by-one merge on every piece,
and encoding through it equals tiktoken's."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import bpe.pieces
from bpe import Tokenizer
from bpe.bytepair import merge_small
from bpe.npmerge import INF, PairTable, merge_pieces

from .conftest import PROSE

tiktoken = pytest.importorskip("tiktoken")

# Pieces from a small alphabet repeat pairs, so merges overlap ('aaa'), chain and tie.
pieces = st.lists(st.binary(min_size=1, max_size=70) | st.text("ab \n", min_size=1, max_size=40).map(str.encode)
                  | st.sampled_from([b"aaa", b"aaaa", b"    ", b"abab", b"\x00\x00", b"a\x00", b"\xff\xfe"]),
                  min_size=1, max_size=40)
unicode_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300) | st.lists(
    st.sampled_from(["a", "aa", " ", "\n", "é", "字", "🎉", "1", "ab", "Ω", "\u0301"]), max_size=100).map("".join)


def cuts_by_lookups(ranks):
    return {(ranks[b[:k]], ranks[b[k:]]): r for b, r in ranks.items() for k in range(1, len(b))
            if b[:k] in ranks and b[k:] in ranks}


def by_batch(table, batch):
    starts = np.concatenate([[0], np.cumsum([len(b) for b in batch])]).astype(np.int64)
    counts, ids = merge_pieces(table, np.frombuffer(b"".join(batch), np.uint8), starts)
    ends = np.cumsum(counts).tolist()
    return [ids[e - c:e].tolist() for c, e in zip(counts.tolist(), ends)]


@pytest.fixture(scope="module")
def odd_ranks():
    """Ids in no particular order, with gaps, tokens holding and ending in zero bytes, and a
    token longer than the 16 bytes cut in NumPy."""
    toks = [bytes([i]) for i in range(256)] + [b"\x00\x00", b"a\x00", b"aa", b"aaa", b"ab", b"abab", b"  ",
                                                 b"    ", b"\xff\xfe", b"ba", b"a" * 20, b"a" * 10, b"aaaaa"]
    ids = np.random.default_rng(0).permutation(len(toks) * 3)[: len(toks)]
    return {t: int(i) for t, i in zip(toks, ids)}


def test_the_pair_table_holds_every_cut_of_every_token_and_nothing_else(tok4, odd_ranks):
    for ranks in (tok4.mergeable_ranks, odd_ranks):
        want = cuts_by_lookups(ranks)
        ids = np.array(sorted(ranks.values()))
        left, right = np.repeat(ids, ids.size), np.tile(ids, ids.size)  # every pair of ids
        expect = [want.get(p, INF) for p in zip(left.tolist(), right.tolist())]
        assert PairTable(ranks).lookup(left, right).tolist() == expect


def test_tokens_whose_hashes_collide_are_cut_by_lookups(tok4, monkeypatch):
    import bpe.npmerge

    monkeypatch.setattr(bpe.npmerge, "_mix", lambda hi, lo, size: np.zeros_like(size))
    ranks = tok4.mergeable_ranks
    table = PairTable(ranks)
    got = dict(zip(zip((table.keys // table.width).tolist(), (table.keys % table.width).tolist()),
                   table.vals[:-1].tolist()))
    assert got == cuts_by_lookups(ranks)


def test_the_pair_table_of_cl100k_holds_every_cut(cl100k_path):
    ranks = Tokenizer.from_tiktoken(cl100k_path).mergeable_ranks
    table = PairTable(ranks)
    want = cuts_by_lookups(ranks)
    got = dict(zip(zip((table.keys // table.width).tolist(), (table.keys % table.width).tolist()),
                   table.vals[:-1].tolist()))
    assert got == want


@settings(max_examples=200, deadline=None)
@given(batch=pieces)
def test_batch_merge_equals_the_one_by_one_merge(tok4, odd_ranks, batch):
    for ranks in (tok4.mergeable_ranks, odd_ranks):
        assert by_batch(PairTable(ranks), batch) == [merge_small(ranks, b) for b in batch]


def test_batch_merge_of_cl100k_equals_the_one_by_one_merge(cl100k_path, corpus_texts):
    tok = Tokenizer.from_tiktoken(cl100k_path)
    ranks = tok.mergeable_ranks
    batch = sorted({p.encode() for t in corpus_texts for p in tok._ordinary.findall(t)} - set(ranks))
    assert len(batch) > 1000
    assert by_batch(PairTable(ranks), batch) == [merge_small(ranks, b) for b in batch]


@pytest.fixture
def always_batch(monkeypatch):
    """Every block waits and every new piece goes through the NumPy merge."""
    monkeypatch.setattr(bpe.pieces, "DENSE", 1)
    monkeypatch.setattr(bpe.pieces, "TABLE_AFTER", 0)
    monkeypatch.setattr(bpe.pieces, "BATCH_MIN", 1)
    monkeypatch.setattr(bpe.pieces, "BATCH_TARGET", 50)
    monkeypatch.setattr(bpe.pieces, "ENCODE_BLOCK", 64)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=unicode_text)
def test_encoding_through_batches_equals_tiktoken(tok4, always_batch, text):
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern, tok4.special_tokens)
    text = (text + " ") * 3 + PROSE
    assert fresh.encode_ordinary(text) == tiktoken.Encoding(
        "t", pat_str=tok4.pattern, mergeable_ranks=tok4.mergeable_ranks, special_tokens={}).encode_ordinary(text)
    assert fresh._ordinary._table not in (None, False)  # the batch path ran


def test_batches_keep_escaped_bytes_long_pieces_and_a_full_cache(tok4, always_batch, monkeypatch, corpus_texts):
    monkeypatch.setattr(bpe.pieces, "CACHE_LIMIT", 30)
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern, tok4.special_tokens)
    data = ("x" * 300 + " " + "é" * 80 + " ").encode() + b"\xff\xfe caf\xe9 " + corpus_texts[2].encode()
    assert fresh.decode_bytes(fresh.encode_bytes(data)) == data
    text = corpus_texts[1] + PROSE + "aaaa" * 40
    assert fresh.encode_ordinary(text) == tiktoken.Encoding(
        "t", pat_str=tok4.pattern, mergeable_ranks=tok4.mergeable_ranks, special_tokens={}).encode_ordinary(text)


@given(keys=st.sets(st.integers(0, 2**40), max_size=300), asked=st.lists(st.integers(0, 2**40), max_size=50))
def test_the_hash_table_finds_every_key_also_in_crowded_buckets(keys, asked):
    from bpe.npmerge import _Buckets

    keys = np.array(sorted(keys), dtype=np.int64)
    table = _Buckets(keys, load=0)  # 16 buckets: many keys share one
    query = np.concatenate([keys, np.array(asked, dtype=np.int64)])
    where = {k: i for i, k in enumerate(keys.tolist())}
    assert table.find(query).tolist() == [where.get(k, -1) for k in query.tolist()]
