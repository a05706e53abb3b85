"""Time grows about linearly with the length of one chunk, in training and in encoding.

Long chunks are normal in DNA, minified code and base64. The bounds are loose (a shared
2-core machine) but far below what the quadratic versions took: 37.6 s to train on the
200,000-character run below, minutes to encode a million repeated characters.
"""
import random
import time

from bpe import GPT4_PATTERN, Tokenizer

from .reference import naive_train


def acgt(n, seed=0):
    rng = random.Random(seed)
    return "".join(rng.choice("ACGT") for _ in range(n))


def test_training_on_one_long_chunk_is_fast_and_exact():
    small = acgt(3_000)
    tok = Tokenizer.train_from_iterator([small], vocab_size=300, pattern=GPT4_PATTERN, workers=1)
    assert tok.merges == naive_train([small], 44, GPT4_PATTERN)
    text = acgt(200_000)
    t = time.perf_counter()
    tok = Tokenizer.train_from_iterator([text], vocab_size=356, pattern=GPT4_PATTERN, workers=1)
    assert time.perf_counter() - t < 5.0
    assert tok.n_merges == 100 and tok.decode(tok.encode(text)) == text


def test_encoding_one_long_chunk_is_fast():
    tok = Tokenizer.train_from_iterator(["^^^^ ^^ ^^^^^^^^ aaaa aaa"] * 3, vocab_size=270, workers=1)
    for text in ["^" * 200_000, "a" * 200_000, acgt(200_000)]:
        t = time.perf_counter()
        ids = tok.encode_ordinary(text)
        assert time.perf_counter() - t < 5.0
        assert tok.decode(ids) == text
