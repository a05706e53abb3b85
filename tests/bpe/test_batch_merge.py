"""Batch merging in NumPy (bpe.encode.batch_merge) gives the ids of the one-by-one merge on every piece,
and encoding through it equals tiktoken's."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import bpe.encode.batch_merge as batch_merge
import bpe.encode.piece_encoder as piece_encoder
from bpe import Tokenizer
from bpe.split.patterns import PATTERNS
from bpe.encode.rank_merge import merge_small
from bpe.encode.batch_merge import INF, TokenTable, merge_pieces
from bpe.text import span_words

from .conftest import PROSE

tiktoken = pytest.importorskip("tiktoken")

# Pieces from a small alphabet repeat pairs, so merges overlap ('aaa'), chain and tie; long ones
# up to the longest that encoding batches (piece_encoder.BATCH_MAX_BYTES).
pieces = st.lists(st.binary(min_size=1, max_size=70) | st.text("ab \n", min_size=1, max_size=40).map(str.encode)
                  | st.text("ab a\0", min_size=64, max_size=piece_encoder.BATCH_MAX_BYTES - 1).map(str.encode)
                  | st.sampled_from([b"aaa", b"aaaa", b"    ", b"abab", b"\x00\x00", b"a\x00", b"\xff\xfe"]),
                  min_size=1, max_size=40)
unicode_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300) | st.lists(
    st.sampled_from(["a", "aa", " ", "\n", "é", "字", "🎉", "1", "ab", "Ω", "\u0301"]), max_size=100).map("".join)


def by_batch(table, batch):
    starts = np.concatenate([[0], np.cumsum([len(b) for b in batch])]).astype(np.int64)
    counts, ids = merge_pieces(table, np.frombuffer(b"".join(batch), np.uint8), starts)
    ends = np.cumsum(counts).tolist()
    return [ids[e - c:e].tolist() for c, e in zip(counts.tolist(), ends)]


@pytest.fixture(scope="module")
def odd_ranks():
    """Ids in no particular order, with gaps, tokens holding and ending in zero bytes, tokens
    longer than the 16 bytes compared in NumPy, one longer than a byte can count."""
    toks = [bytes([i]) for i in range(256)] + [b"\x00\x00", b"a\x00", b"aa", b"aaa", b"ab", b"abab", b"  ",
                                                 b"    ", b"\xff\xfe", b"ba", b"a" * 20, b"a" * 10, b"aaaaa",
                                                 b"ab" * 150]
    ids = np.random.default_rng(0).permutation(len(toks) * 3)[: len(toks)]
    return {t: int(i) for t, i in zip(toks, ids)}


def spans_of(table, data, start, end):
    buf = np.frombuffer(data, np.uint8)
    return table.spans(data, span_words(buf), np.array(start, dtype=np.int64), np.array(end, dtype=np.int64)).tolist()


@settings(max_examples=100, deadline=None)
@given(data=st.binary(min_size=1, max_size=60) | st.text("ab \n\0", min_size=1, max_size=60).map(str.encode),
       cuts=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 40)), min_size=1, max_size=30))
def test_the_token_table_finds_the_rank_of_every_span_that_is_a_token(tok4, odd_ranks, data, cuts):
    for ranks in (tok4.mergeable_ranks, odd_ranks):
        spans = [(s, min(s + k, len(data))) for s, k in cuts if s < len(data)]
        toks = list(ranks)  # spans that are tokens, of every length, at the buffer's end (zero padding)
        buf = data + b"".join(toks[-40:])
        pos = np.cumsum([len(data)] + [len(t) for t in toks[-40:]]).tolist()
        spans += list(zip(pos[:-1], pos[1:]))
        start, end = zip(*spans)
        want = [ranks.get(buf[s:e], INF) for s, e in spans]
        assert spans_of(TokenTable(ranks), buf, start, end) == want


def test_the_token_table_of_cl100k_finds_every_token(cl100k_path):
    ranks = Tokenizer.from_tiktoken(cl100k_path).mergeable_ranks
    toks = list(ranks)
    pos = np.cumsum([0] + [len(t) for t in toks]).tolist()
    data = b"".join(toks)
    got = spans_of(TokenTable(ranks), data, pos[:-1], pos[1:])
    assert got == [ranks[t] for t in toks]
    assert any(len(t) > 16 for t in toks)  # the longer ones are looked up by their bytes
    odd = spans_of(TokenTable(ranks), data, [p + 1 for p in pos[:-2]], pos[1:-1])  # a byte short
    assert odd == [ranks.get(t[1:], INF) for t in toks[:-1]]


@settings(max_examples=200, deadline=None)
@given(batch=pieces, tail=st.sampled_from([0, 3, 1 << 30]))
def test_batch_merge_equals_the_one_by_one_merge(tok4, odd_ranks, batch, tail):
    """In NumPy to the end (tail 0), the last few pieces in Python, or all of them in Python."""
    import bpe.encode.batch_merge as batch_merge

    old, batch_merge.TAIL = batch_merge.TAIL, tail
    try:
        for ranks in (tok4.mergeable_ranks, odd_ranks):
            assert by_batch(TokenTable(ranks), batch) == [merge_small(ranks, b) for b in batch]
    finally:
        batch_merge.TAIL = old


@pytest.mark.parametrize("tail", [0, 32])
def test_batch_merge_of_cl100k_equals_the_one_by_one_merge(cl100k_path, corpus_texts, monkeypatch, tail):
    monkeypatch.setattr("bpe.encode.batch_merge.TAIL", tail)
    tok = Tokenizer.from_tiktoken(cl100k_path)
    ranks = tok.mergeable_ranks
    batch = sorted({p.encode() for t in corpus_texts for p in tok._ordinary.findall(t)} - set(ranks))
    assert len(batch) > 1000
    assert by_batch(TokenTable(ranks), batch) == [merge_small(ranks, b) for b in batch]


@pytest.fixture
def always_batch(monkeypatch):
    """Every block waits and every new piece goes through the NumPy merge."""
    monkeypatch.setattr(piece_encoder, "TABLE_COST", 1 << 30)
    monkeypatch.setattr(piece_encoder, "BATCH_MIN", 1)
    monkeypatch.setattr(piece_encoder, "BATCH_TARGET", 50)
    monkeypatch.setattr(piece_encoder, "ENCODE_BLOCK", 64)


def test_tokens_whose_hashes_collide_share_a_bucket_and_are_still_found(tok4, monkeypatch, always_batch, corpus_texts):
    # 16 hash values for all the tokens: long buckets of tokens that differ but hash alike
    monkeypatch.setattr(batch_merge, "_mix", lambda hi, lo, size: (hi >> np.uint64(60)).view(np.int64))
    ranks = tok4.mergeable_ranks
    toks = list(ranks)
    pos = np.cumsum([0] + [len(t) for t in toks]).tolist()
    assert spans_of(TokenTable(ranks), b"".join(toks), pos[:-1], pos[1:]) == [ranks[t] for t in toks]
    fresh = Tokenizer(ranks, tok4.pattern)
    text = corpus_texts[3][:3000] + PROSE
    assert fresh.encode_ordinary(text) == tiktoken.Encoding(
        "t", pat_str=tok4.pattern, mergeable_ranks=ranks, special_tokens={}).encode_ordinary(text)
    assert isinstance(fresh._ordinary._table, TokenTable)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=unicode_text)
def test_encoding_through_batches_equals_tiktoken(tok4, always_batch, text):
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern, tok4.special_tokens)
    text = (text + " ") * 3 + PROSE
    assert fresh.encode_ordinary(text) == tiktoken.Encoding(
        "t", pat_str=tok4.pattern, mergeable_ranks=tok4.mergeable_ranks, special_tokens={}).encode_ordinary(text)
    assert fresh._ordinary._table not in (None, False)  # the batch path ran


any_text = st.text(max_size=200) | st.lists(st.sampled_from(
    ["a", "aa", " ", "\n", "é", "e\u0301", "字", "🎉", "\U0001d7ce", "\ud835\udfce", "\udfff", "1", "ab", "'s",
     "Ω", "\t", "/"]), max_size=80).map("".join)  # combining marks, astral characters, surrogates


@pytest.mark.parametrize("name", ["gpt2", "gpt4", "o200k"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=any_text)
def test_batching_from_the_middle_of_a_call_equals_tiktoken_for_every_pattern(
        tok_by_pattern, monkeypatch, name, text):
    monkeypatch.setattr(piece_encoder, "TABLE_COST", 40)  # 10 pieces merged one by one, then batches
    monkeypatch.setattr(piece_encoder, "BATCH_MIN", 1)
    monkeypatch.setattr(piece_encoder, "BATCH_TARGET", 7)
    monkeypatch.setattr(piece_encoder, "ENCODE_BLOCK", 16)
    tok = tok_by_pattern(PATTERNS[name])
    fresh = Tokenizer(tok.mergeable_ranks, tok.pattern)
    assert fresh._ordinary.table_after == 10
    theirs = tiktoken.Encoding("t", pat_str=tok.pattern, mergeable_ranks=tok.mergeable_ranks, special_tokens={})
    text = PROSE + text + " " + text + PROSE
    for _ in range(2):  # the second call batches from its first block
        assert fresh.encode_ordinary(text) == theirs.encode_ordinary(text)
    assert fresh._ordinary._table not in (None, False)


def test_batches_keep_escaped_bytes_long_pieces_and_a_full_cache(tok4, always_batch, monkeypatch, corpus_texts):
    monkeypatch.setattr(piece_encoder, "CACHE_LIMIT", 30)
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern, tok4.special_tokens)
    data = ("x" * 300 + " " + "é" * 80 + " ").encode() + b"\xff\xfe caf\xe9 " + corpus_texts[2].encode()
    assert fresh.decode_bytes(fresh.encode_bytes(data)) == data
    assert max(map(len, fresh._ordinary.cache)) <= piece_encoder.MAX_CACHED_PIECE  # "x" * 300 is not kept
    text = corpus_texts[1] + PROSE + "aaaa" * 40
    assert fresh.encode_ordinary(text) == tiktoken.Encoding(
        "t", pat_str=tok4.pattern, mergeable_ranks=tok4.mergeable_ranks, special_tokens={}).encode_ordinary(text)


def test_an_error_while_batching_leaves_no_unfilled_list_in_the_cache(tok4, always_batch, corpus_texts):
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)
    enc, real = fresh._ordinary, fresh._ordinary.findall
    blocks = []

    def fails_on_the_third_block(block):
        blocks.append(block)
        if len(blocks) == 3:
            raise KeyboardInterrupt
        return real(block)

    text = corpus_texts[4][:2000]
    enc.findall = fails_on_the_third_block
    with pytest.raises(KeyboardInterrupt):
        fresh.encode_ordinary(text)
    enc.findall = real
    assert len(enc.cache) > 0  # blocks were encoded before the error
    assert not [p for p, ids in enc.cache.items() if not ids] and not enc.cache.pending  # none left unfilled
    assert fresh.encode_ordinary(text) == tiktoken.Encoding(
        "t", pat_str=tok4.pattern, mergeable_ranks=tok4.mergeable_ranks, special_tokens={}).encode_ordinary(text)


@pytest.mark.parametrize("load", [0, 2])
@pytest.mark.parametrize("few", [0, 1 << 30])
def test_the_token_table_reads_every_row_of_a_crowded_bucket(tok4, odd_ranks, monkeypatch, load, few):
    monkeypatch.setattr(batch_merge, "LOAD", load)  # 0: 16 buckets, dozens of tokens in each
    monkeypatch.setattr(batch_merge, "FEW_MORE", few)  # the rows after the first: in NumPy, or from the dict
    for ranks in (tok4.mergeable_ranks, odd_ranks):
        table = TokenTable(ranks)
        assert load or table._head.size == 16
        toks = list(ranks)
        pos = np.cumsum([0] + [len(t) for t in toks]).tolist()
        data = b"".join(toks)
        assert spans_of(table, data, pos[:-1], pos[1:]) == [ranks[t] for t in toks]
        # each token and the next one's first byte, and each token but its first byte: mostly none
        after = spans_of(table, data, pos[:-2], [p + 1 for p in pos[1:-1]])
        assert after == [ranks.get(data[s:e + 1], INF) for s, e in zip(pos[:-2], pos[1:-1])]
        short = spans_of(table, data, [p + 1 for p in pos[:-1]], pos[1:])
        assert short == [ranks.get(t[1:], INF) for t in toks]


@pytest.mark.parametrize("batched", [False, True, "few"])
def test_a_piece_that_spells_a_token_is_that_token_even_where_merging_cannot_reach_it(
        tok4, monkeypatch, request, batched):
    # Tokens that no merge makes (no pair of their parts is a token): tiktoken looks a piece up
    # whole before merging it, and so must both of our paths.
    ranks = dict(tok4.mergeable_ranks)
    odd = [b"\x01\x02\x03", b" \x01\x02\x03\x04", "\u0111\u0127\u0167".encode()]
    for t in odd:
        ranks[t] = len(ranks)
        assert merge_small(ranks, t) != [ranks[t]]
    if batched:  # "few": a batch's pieces fewer than BATCH_MIN, so merged one by one
        request.getfixturevalue("always_batch")
        if batched == "few":
            monkeypatch.setattr(piece_encoder, "BATCH_MIN", 1 << 30)
    else:  # the table never pays: every piece merged one by one
        monkeypatch.setattr(piece_encoder, "TABLE_COST", 1)
    odd_text = "\x01\x02\x03x \x01\x02\x03\x04\n\u0111\u0127\u0167 \x01\x02\x03\x04 "
    text = PROSE + "x" * 1024 + odd_text  # batched: past the first block (PROBE_BLOCK), which goes one by one
    fresh = Tokenizer(ranks, tok4.pattern)
    theirs = tiktoken.Encoding("t", pat_str=tok4.pattern, mergeable_ranks=ranks, special_tokens={})
    ids = fresh.encode_ordinary(text)
    assert ids == theirs.encode_ordinary(text)
    assert all(ranks[t] in ids for t in odd)
    assert (fresh._ordinary._table not in (None, False)) == bool(batched)


def test_the_token_table_is_built_once_the_merges_of_all_calls_would_pay_for_it(tok4, monkeypatch):
    # table_after = 1199 mergeable tokens // 100 = 11 pieces merged one by one
    monkeypatch.setattr(piece_encoder, "TABLE_COST", 100)
    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)
    enc = fresh._ordinary
    assert enc.table_after == 11
    fresh.encode_ordinary("")
    assert enc._table is None  # no text, no merge: nothing to pay for
    words = ["qzx" + chr(0x430 + i) * 2 for i in range(20)]  # new pieces, none a token
    text = "".join(" " + w for w in words[:5])
    fresh.encode_ordinary(text)
    merged = enc.merged
    assert 0 < merged < enc.table_after and enc._table is None
    fresh.encode_ordinary(text * 40)  # longer, but no new piece: still none
    assert enc.merged == merged and enc._table is None
    more = words[5:5 + enc.table_after - merged]  # too few alone; with the earlier calls', enough
    fresh.encode_ordinary("".join(" " + w for w in more))
    assert enc.merged == enc.table_after and enc._table not in (None, False)


@pytest.mark.parametrize("batched", [False, True])
def test_a_text_of_many_documents_between_special_tokens_equals_tiktoken(tok4, corpus_texts, monkeypatch,
                                                                          request, batched):
    # Its ordinary parts are encoded together (their new pieces merged in common batches).
    if batched:
        request.getfixturevalue("always_batch")
    eot, fim = "<|endoftext|>", "<|fim|>"
    docs = [t[:400] for t in corpus_texts[:12]] + ["", "x", PROSE[:300]]
    text = eot + eot.join(docs) + fim + eot + eot + "é 字" + fim
    theirs = tiktoken.Encoding("t", pat_str=tok4.pattern, mergeable_ranks=tok4.mergeable_ranks,
                               special_tokens=tok4.special_tokens)
    for allowed, disallowed in [("all", "all"), ({eot}, ()), (set(), ())]:
        fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern, tok4.special_tokens)
        ids = fresh.encode(text, allowed_special=allowed, disallowed_special=disallowed)
        assert ids == theirs.encode(text, allowed_special=allowed, disallowed_special=disallowed)
    assert ids == fresh.encode_ordinary(text)
