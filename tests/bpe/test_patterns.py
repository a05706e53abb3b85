"""Split patterns are the ecosystem's strings, and cutting text into segments is exact."""
import inspect

import pytest
import regex
from hypothesis import example, given, settings, strategies as st

from bpe import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN
from bpe.split.patterns import GLUE_CHAR, PATTERNS, resolve_pattern, segment_splitter, word_splitter

# Characters that stress the cut rules: newlines, \r, indentation, '/', apostrophes,
# Unicode whitespace, digits, letters, marks, CJK, emoji, NUL (word_splitter's stand-in).
tricky = st.text(alphabet=st.sampled_from(
    list("ab Z1 23\n\n\r\t  :/.'s,")
    + ["\u00e9", "\x1c", "\x85", "\u3000", "\u2028", "字", "\u0301", "🎉", "\x00"]),
    max_size=80)


def test_names_resolve():
    assert resolve_pattern("gpt2") == GPT2_PATTERN
    assert resolve_pattern("gpt4") == GPT4_PATTERN == PATTERNS["cl100k_base"]
    assert resolve_pattern("o200k") == O200K_PATTERN
    assert resolve_pattern(r"\w+|\W") == r"\w+|\W"
    with pytest.raises(ValueError, match="neither a known name"):
        resolve_pattern("[unclosed")


def test_patterns_are_tiktokens_strings():
    tiktoken_ext = pytest.importorskip("tiktoken_ext.openai_public")
    src = inspect.getsource(tiktoken_ext)
    assert GPT4_PATTERN in src  # cl100k, possessive quantifiers included
    for part in O200K_PATTERN.split("|")[2:]:
        assert part in src
    # GPT-2's original string splits exactly like tiktoken's r50k string.
    r50k = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
    assert r50k in src
    sample = "Hello, world!  It's 2024...\n\n  indented\tline  \n x"
    assert regex.findall(GPT2_PATTERN, sample) == regex.findall(r50k, sample)


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN])
@given(text=tricky)
def test_segments_preserve_chunks(pattern, text):
    split = segment_splitter(pattern)
    segments = split(text)
    assert "".join(segments) == text
    whole = regex.findall(pattern, text)
    assert [c for s in segments for c in regex.findall(pattern, s)] == whole


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN])
@given(texts=st.lists(tricky.filter(lambda t: GLUE_CHAR not in t), min_size=1, max_size=4), seed=st.randoms())
def test_word_segments_preserve_chunks_in_any_order(pattern, texts, seed):
    """Each text cut at words gives its chunks segment by segment, and its middle segments (all
    texts', shuffled) joined give the chunks that each gives alone."""
    split = word_splitter(pattern)
    middle = []
    for text in texts:
        parts = [p.replace(GLUE_CHAR, " ") for p in split(text)]
        segments = parts[:1] + [" " + p for p in parts[1:]]
        assert "".join(segments) == text
        assert [c for s in segments for c in regex.findall(pattern, s)] == regex.findall(pattern, text)
        middle += segments[1:-1]
    for s in middle:  # each starts with its space and ends before one, beside no whitespace
        assert s[0] == " " and not s[1].isspace() and not s[-1].isspace()
    seed.shuffle(middle)
    assert regex.findall(pattern, "".join(middle)) == [c for s in middle for c in regex.findall(pattern, s)]


@pytest.mark.parametrize("text, parts", [
    ("a b", ["a", "b"]), ("a  b", ["a\x00\x00b"]), (" a\n b ", ["", "a\n\x00b", ""]),
    ("x \ty", ["x\x00\ty"]), ("x\x1c y", ["x\x1c\x00y"]), ("日本 語", ["日本", "語"])])
def test_word_splitter_cuts_only_between_non_whitespace(text, parts):
    assert word_splitter(GPT4_PATTERN)(text) == parts


def test_unknown_pattern_has_no_cuts():
    assert segment_splitter(r"\w+|\W") is None
    assert word_splitter(r"\w+|\W") is None


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN])
@given(texts=st.lists(tricky, max_size=8), times=st.lists(st.integers(1, 3), min_size=8, max_size=8),
       probe=st.sampled_from([None, 0, 30]), share=st.sampled_from([0.0, 0.7, 1.0]),
       word_share=st.sampled_from([0.0, 0.5, 1.0]), batch=st.sampled_from([1 << 16, 1, 7]))
def test_chunk_counter_equals_counting_findall(pattern, texts, times, probe, share, word_share, batch):
    from collections import Counter
    from unittest import mock

    from bpe.train import chunk_counter as count
    from bpe.train.chunk_counter import ChunkCounter

    # The choices after ``probe`` characters (None: the default) to go on through lines, words or
    # neither, and the runs of segments the flush pre-tokenizes together, change no count.
    with mock.patch.multiple(count, PROBE_CHARS=probe if probe is not None else count.PROBE_CHARS,
                             DIRECT_SHARE=share, WORD_SHARE=word_share, BATCH_CHARS=batch):
        counter = ChunkCounter(pattern)
        want = Counter()
        for t, k in zip(texts + texts[:2], times + times):  # repeats exercise the counted-more-than-once path
            counter.add(t, k)  # a document that occurs k times
            for c in regex.findall(pattern, t):
                want[c] += k
        assert counter.result() == want


words = st.lists(st.sampled_from(["a", "ab", "b'", "s", "Z1", "23", ".", ":/", "\u00e9", "字", "🎉", "\x00",
                                  "\u0301"]), min_size=1, max_size=3).map("".join)
gaps = st.sampled_from([" "] * 8 + ["  ", "\n", " \n", "\n ", "\t ", "\x1c ", "\u3000", "\r\n  "])
prose = st.lists(st.tuples(words, gaps), max_size=24).map(lambda ws: "".join(w + g for w, g in ws))


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN])
@given(texts=st.lists(prose | tricky, min_size=1, max_size=8),
       times=st.lists(st.integers(1, 3), min_size=8, max_size=8),
       limit=st.sampled_from([1 << 20, 4]), batch=st.sampled_from([1 << 16, 1, 7]), data=st.data())
def test_chunk_counter_by_words_equals_counting_findall(pattern, texts, times, limit, batch, data):
    """Texts counted through word segments from the second on (the first goes through lines, and
    the probe then turns to words for good), flushed at every few segments or once."""
    from collections import Counter
    from unittest import mock

    from bpe.train import chunk_counter as count

    with mock.patch.multiple(count, PROBE_CHARS=0, DIRECT_SHARE=-1.0, WORD_SHARE=float("inf"),
                             MAX_SEGMENTS=limit, BATCH_CHARS=batch):
        counter = count.ChunkCounter(pattern)
        want = Counter()
        for t, k in zip(["x y"] + texts, [1] + times):
            counter.add(t, k)
            for c in regex.findall(pattern, t):
                want[c] += k
        assert counter._split is None and counter._split_words is not None
        assert counter.result() == want


def test_the_probe_turns_to_words_where_lines_do_not_repeat_but_words_do():
    from unittest import mock

    from bpe.train import chunk_counter as count

    prose = " ".join(["the cat sat on the mat", "a dog and the cat", "the mat was red"] * 40)
    lines = "x = 1\n" * 400  # repeated lines: they stay
    unique = "".join(f"{i:x}" + "\u4e00" * (i % 7) for i in range(2000))  # no word repeats
    for text, mode in [(prose, "words"), (lines, "lines"), (unique, "direct")]:
        with mock.patch.object(count, "PROBE_CHARS", 1000):
            counter = count.ChunkCounter(GPT4_PATTERN)
            counter.add(text)
        assert mode == ("lines" if counter._split else "words" if counter._split_words else "direct")
    assert count._word_share(word_splitter(GPT4_PATTERN), ["a b a b", "b a"]) == (1 + 1 + 2) / 10


# ---- safe cuts and coverage -------------------------------------------------------

CUT_TEXTS = ["x = a!\n/b\n" * 40, "def f(x):\n    return x  \n\n\tclass A:\n  pass\r\n" * 6,
             "word's 123456 \u3000字\n\n  /x\n!\n\n/é\u0301 🎉\n" * 8]


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_safe_cut_at_every_offset_keeps_the_ids_of_the_whole_text(tok_by_pattern, name):
    """Encoding the two sides of a safe cut gives the ids of the whole text, for every pattern
    (o200k: '!\\n/' is one pre-token, so no cut falls inside it)."""
    from bpe.split.patterns import safe_cut

    tok = tok_by_pattern(PATTERNS[name])
    for text in CUT_TEXTS:
        whole = tok.encode_ordinary(text)
        cuts = set()
        for at in range(len(text) + 1):
            p = safe_cut(text, at, tok.pattern)
            assert at <= p <= len(text) or (at == 0 and p == 0)
            cuts.add(p)
        assert len(cuts) > 3  # the rule does cut
        for p in cuts:
            assert tok.encode_ordinary(text[:p]) + tok.encode_ordinary(text[p:]) == whole, (name, p)
        pieces, pos = [], 0
        while pos < len(text):  # cut everywhere at once, in pieces of about 7 characters
            end = safe_cut(text, pos + 7, tok.pattern)
            pieces.append(text[pos:end])
            pos = end
        assert sum((tok.encode_ordinary(x) for x in pieces), []) == whole


def test_a_pattern_without_known_cuts_is_never_cut():
    from bpe.split.patterns import has_safe_cuts, safe_cut

    assert not has_safe_cuts(r"\S+|\s+") and all(has_safe_cuts(p) for p in PATTERNS.values())
    assert safe_cut("a\nb\nc", 1, r"\S+|\s+") == 5 and safe_cut("a\nb", 0, r"\S+|\s+") == 0


def test_a_pattern_that_skips_characters_is_refused(tmp_path):
    import warnings

    from bpe import Tokenizer
    from bpe.split.patterns import PatternCoverageError

    with pytest.raises(PatternCoverageError, match=r"'H' at character 0 would be dropped"):
        Tokenizer.train_from_iterator(["Hello, World 123"], vocab_size=260, pattern="[a-z]+")
    with pytest.warns(UserWarning, match="does not match every character"):
        tok = Tokenizer.train_from_iterator(["hello world"], vocab_size=260, pattern=r"[a-z]+|\s")
    with pytest.raises(PatternCoverageError, match=r"',' at character 5"):
        tok.encode("hello, world")
    assert tok.decode(tok.encode("hello world")) == "hello world"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a pattern that covers everything loads silently
        Tokenizer.train_from_iterator(["hello, world"], vocab_size=260, pattern=r"\w+|\s+|[^\w\s]+")


def test_empty_and_capturing_patterns_are_refused(tok4, tmp_path):
    import json

    from bpe import Tokenizer

    with pytest.raises(ValueError, match="pattern is empty"):
        resolve_pattern("")
    with pytest.raises(ValueError, match=r"capturing groups; write them as \(\?:"):
        resolve_pattern(r"(\w)+|\s")
    p = tmp_path / "t.json"
    tok4.save(p)
    d = json.loads(p.read_text())
    d["pattern"] = ""
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=r"t.json: .*pattern is empty"):
        Tokenizer.load(p)


# Characters near the cut rules' edges: spaces of every kind, controls that one regex engine
# calls whitespace and another not, contractions, digits, marks, letters of two planes, CJK
# letters, numbers, marks and punctuation (fullwidth too).
EDGE = (" \t\r\x0b\x0c\x1c\x1f\x85\xa0\u2028\u3000'sdtlvmrLLVE1234567890.,!/-_aZé\u0301字🎉\U000324f3"
        "中ひカ한々〇\u3021\u302a\u3099，。、「」！＇：\uff0e\uff21\uff41\uff10～")


@settings(max_examples=300)
@given(st.text(alphabet=EDGE, max_size=80))
@example("中's 字'LL，ひ\u3099。")  # o200k's letters take a contraction; a mark joins its letter
def test_every_encoding_cut_is_a_chunk_boundary(text):
    """segment_cut (lines, a space between words, a CJK word before punctuation) only falls where
    the pattern's chunks meet."""
    from bpe.split.twins import segment_cut

    for pattern in PATTERNS.values():
        ends, pos = {0}, 0
        for chunk in regex.findall(pattern, text):
            pos += len(chunk)
            ends.add(pos)
        cuts = {m.start() for m in segment_cut(pattern).finditer(text)}
        assert cuts <= ends, (pattern, text, sorted(cuts - ends))


def test_a_long_text_without_newlines_is_cut_into_blocks_and_keeps_its_ids(tok_by_pattern):
    from bpe.encode.piece_encoder import ENCODE_BLOCK

    spaced = " ".join(f"w{i % 97}x{i}'s  \u3000{i}.é" for i in range(3 * ENCODE_BLOCK // 10))
    unspaced = "".join(f"中文{chr(0x4E00 + i % 500)}字{i}，ひらがな。「カタ」" for i in range(ENCODE_BLOCK // 5))
    for text in (spaced, unspaced):
        assert "\n" not in text and len(text) > 2 * ENCODE_BLOCK
        for name, pattern in PATTERNS.items():
            tok = tok_by_pattern(pattern)
            blocks = list(tok._ordinary._blocks(text))  # noqa: SLF001 - the cut is what is tested
            assert len(blocks) > 2 and "".join(blocks) == text, name
            assert tok.encode_ordinary(text) == sum((tok.encode_ordinary(b) for b in blocks), []), name
