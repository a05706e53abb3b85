"""Split patterns are the ecosystem's strings, and cutting text into segments is exact."""
import inspect

import pytest
import regex
from hypothesis import given, strategies as st

from bpe import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN
from bpe.patterns import PATTERNS, resolve_pattern, segment_splitter

# Characters that stress the cut rules: newlines, \r, indentation, '/', apostrophes,
# Unicode whitespace, digits, letters, marks, CJK, emoji.
tricky = st.text(alphabet=st.sampled_from(
    list("ab Z1 23\n\n\r\t  :/.'s,") + ["\u00e9", "\x1c", "\x85", "\u3000", "\u2028", "字", "\u0301", "🎉"]),
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


def test_unknown_pattern_has_no_cuts():
    assert segment_splitter(r"\w+|\W") is None


ascii_text = st.text(alphabet=st.characters(max_codepoint=127), max_size=80) | st.text(
    alphabet=st.sampled_from(list("aZ1 \n\r\t\x0b\x0c\x1c's:/.")), max_size=80)


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN])
@given(text=ascii_text)
def test_ascii_twin_patterns_find_the_same_chunks(pattern, text):
    from bpe.patterns import _ASCII, chunk_finder

    import re

    assert re.findall(_ASCII[pattern], text, flags=re.ASCII) == regex.findall(pattern, text)
    assert chunk_finder(pattern)(text) == regex.findall(pattern, text)


@pytest.mark.parametrize("pattern", [GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN])
@given(texts=st.lists(tricky, max_size=8))
def test_chunk_counter_equals_counting_findall(pattern, texts):
    from collections import Counter

    from bpe.count import ChunkCounter

    counter = ChunkCounter(pattern)
    want = Counter()
    for t in texts + texts[:2]:  # repeats exercise the counted-more-than-once path
        counter.add(t)
        want.update(regex.findall(pattern, t))
    assert counter.result() == want
