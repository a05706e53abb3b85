"""A long piece (one regex chunk of thousands to a million bytes) merges exactly as tiktoken does:
``rank_merge.merge_long`` (the priority queue) gives the ids of ``merge_small`` (the plain loop)
and of tiktoken, on repeated characters, DNA, letters without spaces, CJK and punctuation runs,
and on random pieces over a tiny alphabet whose rank tables make overlaps, ties and ranks below
their parts' common. Times are benchmarks/bench_bpe_long.py's, never asserted here."""
import random

import pytest
from hypothesis import example, given, settings, strategies as st

from bpe import GPT4_PATTERN, Tokenizer
from bpe.encode.rank_merge import merge_long, merge_small

tiktoken = pytest.importorskip("tiktoken")
from tiktoken.load import load_tiktoken_bpe  # noqa: E402


def long_piece(kind: str, n: int, seed: int = 0) -> str:
    """A text of ``n`` characters that the GPT-4 pattern keeps as one chunk."""
    rng = random.Random(seed)
    alphabet = {"dna": "ACGT", "letters": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                "cjk": "".join(map(chr, range(0x4E00, 0x4E40))), "punct": "{}();,.=<>+-*/&|!?"}
    if kind in alphabet:
        return "".join(rng.choices(alphabet[kind], k=n))
    return kind * n  # a repeated character


KINDS = ["a", "^", " ", "dna", "letters", "cjk", "punct"]


@pytest.fixture(scope="module")
def cl100k(cl100k_path):
    ours = Tokenizer.from_tiktoken(cl100k_path, pattern=GPT4_PATTERN)
    theirs = tiktoken.Encoding("cl100k", pat_str=GPT4_PATTERN, mergeable_ranks=load_tiktoken_bpe(str(cl100k_path)),
                               special_tokens={})
    return ours, theirs


@pytest.mark.parametrize("kind", KINDS)
def test_a_long_piece_encodes_like_tiktoken(cl100k, kind):
    ours, theirs = cl100k
    for n in (300, 10_000, 100_000):
        text = long_piece(kind, n, seed=n) + ("x" if kind == " " else "")  # spaces before a letter: one chunk
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text), (kind, n)


def test_a_million_equal_bytes_encode_like_tiktoken(cl100k):
    ours, theirs = cl100k
    text = "a" * 1_000_000
    assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


@pytest.mark.parametrize("kind", KINDS)
def test_the_long_merge_equals_the_small_one_on_cl100k(cl100k, kind):
    ranks = cl100k[0].mergeable_ranks
    for n in (2, 3, 257, 3_000):
        b = long_piece(kind, n, seed=n).encode("utf-8")
        assert merge_long(ranks, b) == merge_small(ranks, b), (kind, n)


@st.composite
def tiny_vocabulary_and_piece(draw):
    """Ranks over two or three letters (the single bytes and up to 12 tokens of 2 to 4 bytes, in any
    order of rank: a token may rank below its own parts, as in no trained vocabulary) and a piece
    over the same letters."""
    letters = draw(st.sampled_from(["ab", "abc"]))
    longer = draw(st.lists(st.text(letters, min_size=2, max_size=4).map(str.encode), min_size=1, max_size=12,
                           unique=True))
    tokens = [c.encode() for c in letters] + longer
    ranks = dict(zip(tokens, draw(st.permutations(range(len(tokens))))))
    piece = draw(st.text(letters, min_size=2, max_size=60) | st.text(letters, min_size=200, max_size=400))
    return ranks, piece.encode()


@settings(max_examples=400, deadline=None)
@given(case=tiny_vocabulary_and_piece())
@example(case=({b"a": 9, b"b": 6, b"aa": 7, b"aaa": 3, b"aaaa": 8, b"aab": 5, b"aba": 0, b"ba": 4, b"bab": 2,
                b"bb": 1, b"bbb": 10}, b"ababababababbbabaabab"))  # a pair below the level being taken
def test_the_long_merge_equals_the_small_one_on_tiny_vocabularies(case):
    ranks, piece = case
    assert merge_long(ranks, piece) == merge_small(ranks, piece)


def test_equal_ranks_that_overlap_join_leftmost_first():
    ranks = {b"a": 0, b"aa": 1}
    assert merge_long(ranks, b"aaa") == merge_small(ranks, b"aaa") == [1, 0]
    assert merge_long(ranks, b"a" * 5) == [1, 1, 0]
    ranks[b"aaa"] = 2  # then 'aa' + 'a' joins again
    assert merge_long(ranks, b"aaa") == merge_small(ranks, b"aaa") == [2]
    ranks = {b"a": 3, b"b": 4, b"ab": 0, b"ba": 1, b"aba": 2}  # 'aba' ranks below 'ba': taken first
    for piece in (b"aba", b"abab", b"babab", b"ab" * 50):
        assert merge_long(ranks, piece) == merge_small(ranks, piece)
