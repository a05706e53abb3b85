"""One long chunk (DNA, minified code, base64) trains and encodes exactly.

How the time grows with the chunk's length is measured, beside minbpe's loop and tiktoken, by
benchmarks/bench_bpe_long.py: tests assert values, never times.
"""
import random

import pytest

from bpe import GPT4_PATTERN, Tokenizer

from .reference import naive_train


def acgt(n, seed=0):
    rng = random.Random(seed)
    return "".join(rng.choice("ACGT") for _ in range(n))


def test_training_on_one_long_chunk_is_exact():
    small = acgt(3_000)
    tok = Tokenizer.train_from_iterator([small], vocab_size=300, pattern=GPT4_PATTERN, workers=1)
    assert tok.merges == naive_train([small], 44, GPT4_PATTERN)
    text = acgt(200_000)
    tok = Tokenizer.train_from_iterator([text], vocab_size=356, pattern=GPT4_PATTERN, workers=1)
    assert tok.n_merges == 100 and tok.decode(tok.encode(text)) == text


def test_encoding_one_long_chunk_round_trips_and_equals_tiktoken():
    tiktoken = pytest.importorskip("tiktoken")
    tok = Tokenizer.train_from_iterator(["^^^^ ^^ ^^^^^^^^ aaaa aaa"] * 3, vocab_size=265, workers=1)
    enc = tiktoken.Encoding("tiny", pat_str=tok.pattern, mergeable_ranks=tok.mergeable_ranks, special_tokens={})
    for text in ["^" * 200_000, "a" * 200_000, acgt(200_000)]:
        ids = tok.encode_ordinary(text)
        assert tok.decode(ids) == text
        assert ids == enc.encode_ordinary(text)
