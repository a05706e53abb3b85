"""Encoding: lossless, identical to tiktoken on the same ranks, linear on long pieces,
tiktoken's special-token policy."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from bpe import Tokenizer
from bpe.encode.rank_merge import merge_long, merge_small

from .conftest import PROSE

tiktoken = pytest.importorskip("tiktoken")

unicode_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200
) | st.text(alphabet=st.sampled_from(list(" \t\n\r\x0b\x0c\u00a0\u2028\u3000") + ["a", "🎉", "\u0301", "字", "1"]),
            max_size=200)


def tiktoken_of(tok):
    return tiktoken.Encoding("ours", pat_str=tok.pattern, mergeable_ranks=tok.mergeable_ranks,
                             special_tokens=tok.special_tokens)


@given(text=unicode_text)
def test_decode_encode_roundtrip(tok4, text):
    assert tok4.decode(tok4.encode_ordinary(text)) == text
    assert tok4.decode_bytes(tok4.encode_ordinary(text)) == text.encode("utf-8")


@given(text=unicode_text)
def test_matches_tiktoken_built_from_our_ranks(tok4, tok2, text):
    for tok in (tok4, tok2):
        assert tok.encode_ordinary(text) == tiktoken_of(tok).encode_ordinary(text)


def test_matches_tiktoken_on_real_text(tok4, tok2, corpus_texts):
    text = "".join(corpus_texts[-8:]) + PROSE
    for tok in (tok4, tok2):
        enc = tiktoken_of(tok)
        assert tok.encode(text) == enc.encode(text)
        t = text + "<|endoftext|>" + text[:500]
        assert tok.encode(t, allowed_special="all") == enc.encode(t, allowed_special="all")


def test_cache_does_not_change_results(tok4, corpus_texts):
    text = corpus_texts[3]
    copy = Tokenizer(tok4.mergeable_ranks, tok4.pattern, tok4.special_tokens)
    first = copy.encode(text)
    assert copy.encode(text) == first == tok4.encode(text)
    # a prefix through the warm cache encodes as through a cold one (a cut at 100 characters
    # may split a chunk, so it need not be a prefix of `first`)
    cold = Tokenizer(tok4.mergeable_ranks, tok4.pattern, tok4.special_tokens)
    assert copy.encode(text[:100]) == cold.encode(text[:100])


@given(data=st.binary(min_size=0, max_size=300))
def test_long_piece_algorithm_equals_short_piece_algorithm(tok4, data):
    ranks = tok4.mergeable_ranks
    assert merge_long(ranks, data) == merge_small(ranks, data)


def test_long_runs_are_not_quadratic(tok4):
    # 100,000 copies of one letter are one piece under the GPT-4 pattern.
    text = "a" * 100_000
    ids = tok4.encode(text)
    assert tok4.decode(ids) == text
    assert ids == tiktoken_of(tok4).encode(text)
    spaces = " " * 50_000 + "x"
    assert tok4.encode(spaces) == tiktoken_of(tok4).encode(spaces)


def test_special_tokens_policy(tok4):
    text = "hello <|endoftext|> world"
    with pytest.raises(ValueError, match="disallowed special token '<\\|endoftext\\|>'"):
        tok4.encode(text)
    eot = tok4.special_tokens["<|endoftext|>"]
    assert eot in tok4.encode(text, allowed_special="all")
    assert eot in tok4.encode(text, allowed_special={"<|endoftext|>"})
    ordinary = tok4.encode(text, disallowed_special=())
    assert eot not in ordinary and ordinary == tok4.encode_ordinary(text)
    # Allowing one special does not allow the other.
    with pytest.raises(ValueError, match="<\\|fim\\|>"):
        tok4.encode("<|fim|><|endoftext|>", allowed_special={"<|endoftext|>"})
    assert tok4.encode("<|fim|><|endoftext|>", allowed_special={"<|endoftext|>"}, disallowed_special=()) \
        == tok4.encode_ordinary("<|fim|>") + [eot]
    with pytest.raises(ValueError, match="unknown special tokens"):
        tok4.encode("x", allowed_special={"<|nope|>"})
    assert tok4.decode(tok4.encode(text, allowed_special="all")) == text


def test_decode_never_raises_on_partial_utf8(tok4):
    ids = tok4.encode("日本")
    b = tok4.decode_bytes(ids)
    single = [i for i in range(256) if tok4.token_bytes(i) == b[:1]]
    assert tok4.decode(single) == "\ufffd"
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok4.decode([tok4.vocab_size + 5])


def test_decode_takes_any_int_sequence_and_names_a_bad_id():
    """The decoder is a list indexed by id: a negative id must not index it from its end, a gap in
    the ids must not decode, and a float must not pass for the int it equals."""
    ranks = {bytes([b]): b for b in range(256)} | {b"ab": 300}
    tok = Tokenizer(ranks, special_tokens={"<|s|>": 310})
    want = b"ab" + b"<|s|>" + b"z"
    ids = [300, 310, ord("z")]
    for given in (ids, tuple(ids), iter(ids), np.array(ids), np.array(ids, dtype=np.uint16),
                  [np.int64(i) for i in ids]):
        assert tok.decode_bytes(given) == want
    assert tok.decode_bytes([]) == tok.decode_bytes(np.array([], dtype=np.int64)) == b""
    for bad in ([300, -1], [-311], [300, 256], [311], [10**30], [np.int64(-5)]):
        with pytest.raises(ValueError, match=f"token id {int(bad[-1])} is not in the vocabulary"):
            tok.decode(bad)
    for bad in ([300, 1.0], [300, None], [300, "a"], np.array([1.0]), np.array([[300]]), 5):
        with pytest.raises(TypeError, match="int token ids"):
            tok.decode(bad)
    for bad in (-1, 256, 311, 1.0, None):
        with pytest.raises(ValueError, match="not in the vocabulary"):
            tok.token_bytes(bad)


def test_token_bytes_and_sizes(tok4):
    assert tok4.vocab_size == 1200 and tok4.n_merges == 1200 - 256 - 2
    assert tok4.token_bytes(tok4.special_tokens["<|fim|>"]) == b"<|fim|>"
    assert sorted(len(tok4.token_bytes(i)) for i in range(256)) == [1] * 256
    with pytest.raises(ValueError):
        tok4.token_bytes(10**9)


def test_encode_batch_equals_encode(tok4, corpus_texts):
    texts = corpus_texts[:20] + ["", "x<|endoftext|>y"]
    want = [tok4.encode(t, allowed_special="all") for t in texts]
    assert tok4.encode_batch(texts, num_threads=1, allowed_special="all") == want
    big = texts * 6  # over the size where processes are used
    assert tok4.encode_batch(big, num_threads=2, allowed_special="all") == want * 6


def test_encode_rejects_bytes(tok4):
    with pytest.raises(TypeError, match="expects str"):
        tok4.encode(b"abc")


def test_lone_surrogates_become_replacement_characters_like_tiktoken(tok4):
    text = "a\ud800b \udfff"
    assert tok4.encode(text) == tiktoken_of(tok4).encode(text) == tok4.encode("a\ufffdb \ufffd")
    trained = Tokenizer.train_from_iterator(["x\ud800y" * 5], vocab_size=260)
    assert trained.decode(trained.encode("x\ud800y")) == "x\ufffdy"


def test_a_full_cache_is_cleared_without_changing_results(tok4, corpus_texts, monkeypatch):
    import bpe.encode.piece_encoder

    monkeypatch.setattr(bpe.encode.piece_encoder, "CACHE_LIMIT", 50)
    small = Tokenizer(tok4.mergeable_ranks, tok4.pattern, tok4.special_tokens)
    text = corpus_texts[1] + PROSE
    assert small.encode(text) == tiktoken_of(tok4).encode(text)


def test_encoding_a_long_text_pauses_the_collector_and_restores_it(tok4, corpus_texts):
    import gc

    fresh = Tokenizer(tok4.mergeable_ranks, tok4.pattern)
    text = "".join(corpus_texts[:6])
    seen = []
    real = fresh._ordinary.findall

    def find(block):
        seen.append(gc.isenabled())
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real(block)

    fresh._ordinary.findall = find
    with pytest.raises(KeyboardInterrupt):
        fresh.encode_ordinary(text)
    assert seen == [False, False] and gc.isenabled()  # paused while encoding, back after an error
    fresh._ordinary.findall = real
    gc.disable()
    try:
        assert fresh.encode_ordinary(text) == tiktoken_of(tok4).encode_ordinary(text)
        assert not gc.isenabled()  # a collector the caller turned off stays off
    finally:
        gc.enable()
