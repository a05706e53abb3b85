"""A long piece (one regex chunk of thousands to a million bytes) merges exactly as tiktoken does:
``rank_merge.merge_long`` (the priority queue) gives the ids of ``merge_small`` (the plain loop)
and of tiktoken, on repeated characters, DNA, letters without spaces, CJK and punctuation runs,
and on random pieces over a tiny alphabet whose rank tables make overlaps, ties and ranks below
their parts' common. Times are benchmarks/bench_bpe_long.py's, never asserted here."""
import random
from collections import Counter
from contextlib import contextmanager

import pytest
from hypothesis import example, given, settings, strategies as st

from bpe import GPT4_PATTERN, Tokenizer
from bpe.encode import rank_merge
from bpe.encode.batch_merge import TokenTable
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


# ---- the levels merge_long takes in NumPy (rank_merge._take_level) ---------------------------

@contextmanager
def levels_in_numpy(block=rank_merge.LEVEL_BLOCK):
    """merge_long offering its levels to _take_level however short the piece (BULK_PIECE 0), their
    candidates ``block`` at a time; yields a Counter of _take_level's answers (True: taken in NumPy,
    False: left to the loop) and of the blocks joined."""
    answers = Counter()
    real, real_block = rank_merge._take_level, rank_merge._take_block

    def spy(*args):
        taken = real(*args)
        answers[taken] += 1
        return taken

    def spy_block(*args):
        made = real_block(*args)
        answers["blocks joined"] += made is not None
        return made

    saved = rank_merge.BULK_PIECE, rank_merge._take_level, rank_merge._take_block, rank_merge.LEVEL_BLOCK
    rank_merge.BULK_PIECE, rank_merge._take_level, rank_merge._take_block, rank_merge.LEVEL_BLOCK = (
        0, spy, spy_block, block)
    try:
        yield answers
    finally:
        rank_merge.BULK_PIECE, rank_merge._take_level, rank_merge._take_block, rank_merge.LEVEL_BLOCK = saved


@settings(max_examples=400, deadline=None)
@given(case=tiny_vocabulary_and_piece())
@example(case=({b"a": 9, b"b": 6, b"aa": 7, b"aaa": 3, b"aaaa": 8, b"aab": 5, b"aba": 0, b"ba": 4, b"bab": 2,
                b"bb": 1, b"bbb": 10}, b"ababababababbbabaabab"))
def test_levels_taken_in_numpy_merge_as_the_loop_does_on_tiny_vocabularies(case):
    ranks, piece = case
    for block in (rank_merge.LEVEL_BLOCK, 3):  # a level's candidates together, or a few at a time
        with levels_in_numpy(block):
            assert merge_long(ranks, piece, bulk_min=1) == merge_small(ranks, piece)


def test_a_level_whose_joins_make_a_pair_below_it_is_left_to_the_loop():
    # 'aba' ranks below 'ab' and 'ba': joining the level of 'ab' makes ('ab', 'a') pairs that
    # the loop must take between the level's own joins
    ranks = {b"a": 3, b"b": 4, b"ab": 1, b"ba": 2, b"aba": 0}
    piece = b"ab" * 40 + b"a"
    with levels_in_numpy() as answers:
        assert merge_long(ranks, piece, bulk_min=1) == merge_small(ranks, piece)
    assert answers[False] >= 1
    # a level left to the loop after some of its blocks were joined in NumPy: only the last 'ab'
    # makes 'aba' (rank 0), so the blocks before its own are joined first
    ranks = {b"a": 3, b"b": 4, b"c": 6, b"ab": 1, b"aba": 0, b"abc": 5}
    piece = b"abc" * 30 + b"aba"   # and the joins before make 'abc' pairs, which the loop takes later
    with levels_in_numpy(block=8) as answers:
        assert merge_long(ranks, piece, bulk_min=1) == merge_small(ranks, piece) == [5] * 30 + [0]
    assert answers[False] == 1 and answers["blocks joined"] == 3 + 4   # 'ab': 3 of 4 blocks; 'abc': 4
    ranks = {b"a": 0, b"aa": 1, b"aaaa": 2}  # every pair a join makes ranks above its level
    with levels_in_numpy() as answers:
        assert merge_long(ranks, b"a" * 1001, bulk_min=1) == merge_small(ranks, b"a" * 1001) == [2] * 250 + [0]
    assert answers[True] >= 2 and answers[False] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_levels_taken_in_numpy_with_the_token_table_merge_as_the_loop_does(cl100k, kind):
    ranks = cl100k[0].mergeable_ranks
    table = TokenTable(ranks)
    for n in (257, 3_000, 30_000):
        b = long_piece(kind, n, seed=n).encode("utf-8")
        loop = merge_long(ranks, b, bulk_min=len(b) + 1)   # no level is large enough
        if n <= 3_000:
            assert loop == merge_small(ranks, b)
        with levels_in_numpy() as answers:
            assert merge_long(ranks, b, table.reader(b), bulk_min=1) == loop, (kind, n)
            assert merge_long(ranks, b, bulk_min=1) == loop, (kind, n)
        assert answers[True], (kind, n)
