"""Identical to tiktoken where tiktoken users look: surrogates repaired over the whole text,
any bytes encoded exactly, the batch and offset APIs, and the special-token arguments."""
import pytest
from hypothesis import given, strategies as st

from bpe import GPT4_PATTERN, Tokenizer
from bpe.encode.special import DisallowedSpecialError

tiktoken = pytest.importorskip("tiktoken")
from tiktoken.load import load_tiktoken_bpe  # noqa: E402

SPECIALS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258}

# Text with lone and paired surrogates among letters, digits, spaces and punctuation: a pair
# that spells a letter or digit (U+1D7CE, U+1D400) must split as that character.
surrogate_text = st.lists(st.sampled_from(
    ["\ud835", "\udfce", "\ud835\udfce", "\ud835\udc00", "\ud83c\udf89", "\udfff", "\ud800", " ", "a", "1",
     "!", "\n", "x y", "é", "<|endoftext|>", "字"]), max_size=30).map("".join)


@pytest.fixture(scope="module")
def pair(cl100k_path):
    ours = Tokenizer.from_tiktoken(cl100k_path, pattern=GPT4_PATTERN, special_tokens=SPECIALS)
    theirs = tiktoken.Encoding("cl100k_base", pat_str=GPT4_PATTERN,
                               mergeable_ranks=load_tiktoken_bpe(str(cl100k_path)), special_tokens=SPECIALS)
    return ours, theirs


def test_a_surrogate_pair_encodes_as_its_code_point(pair):
    ours, theirs = pair
    assert ours.encode(" \ud835\udfce") == theirs.encode(" \ud835\udfce") == [220, 57352, 253, 236]
    assert ours.encode(" \ud835\udfce") == ours.encode(" \U0001d7ce")


@given(text=surrogate_text)
def test_surrogates_like_tiktoken(pair, text):
    ours, theirs = pair
    assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)
    assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")
    assert ours.encode_batch([text, text], num_threads=1, disallowed_special=()) == \
        theirs.encode_batch([text, text], disallowed_special=())


@given(data=st.binary(max_size=80) | surrogate_text.map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_encode_bytes_is_exact_for_any_bytes(pair, data):
    ours, theirs = pair
    ids = ours.encode_bytes(data)
    assert ours.decode_bytes(ids) == data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    assert ids == ours.encode_ordinary(text) == theirs.encode_ordinary(text)


def test_encode_bytes_keeps_invalid_bytes_and_refuses_text(pair):
    ours, _ = pair
    assert ours.decode_bytes(ours.encode_bytes(b"caf\xe9 \xff\xfe<|endoftext|>")) == b"caf\xe9 \xff\xfe<|endoftext|>"
    with pytest.raises(TypeError, match="bytes"):
        ours.encode_bytes("text")
    with pytest.raises(TypeError, match="encode_bytes"):
        ours.encode(b"bytes")


# tiktoken's test_offsets, on the same cl100k ranks.
@pytest.mark.parametrize("prompt, offsets", [
    ("hello world", [0, 5]),
    ("hello world<|endoftext|> green cow", [0, 5, 11, 24, 30]),
    ("我非常渴望与人工智能一起工作", [0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 8, 8, 9, 10, 11, 12, 13]),
    ("நடிகர் சூர்யா", [0, 0, 1, 1, 2, 3, 4, 4, 5, 6, 7, 8, 8, 9, 9, 10, 11, 12, 12]),
    (" Ġ除", [0, 1]),
])
def test_offsets_like_tiktokens_test(pair, prompt, offsets):
    ours, theirs = pair
    ids = ours.encode(prompt, allowed_special="all")
    assert ours.decode_with_offsets(ids) == (prompt, offsets) == theirs.decode_with_offsets(ids)


@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_offsets_point_at_each_tokens_first_character(pair, text):
    ours, theirs = pair
    ids = ours.encode(text)
    got, offsets = ours.decode_with_offsets(ids)
    assert (got, offsets) == theirs.decode_with_offsets(ids)
    assert got == text and offsets == sorted(offsets) and all(0 <= o <= max(len(text) - 1, 0) for o in offsets)


def test_batches(pair):
    ours, theirs = pair
    texts = ["hello world", "<|endoftext|> is text here", "", "字 \ud835\udfce"]
    assert ours.encode_ordinary_batch(texts, num_threads=1) == theirs.encode_ordinary_batch(texts)
    batch = ours.encode_ordinary_batch(texts, num_threads=1)
    assert ours.decode_batch(batch) == theirs.decode_batch(batch)
    assert ours.decode_bytes_batch(batch) == theirs.decode_bytes_batch(batch)


def test_special_arguments_are_understood_or_refused(pair):
    ours, theirs = pair
    text = "a<|endoftext|>b"
    with pytest.raises(DisallowedSpecialError, match="disallowed special token '<\\|endoftext\\|>'"):
        ours.encode(text)  # the default, as in tiktoken
    with pytest.raises(ValueError, match="got the string 'none'; for none, pass set()"):
        ours.encode(text, allowed_special="none")
    with pytest.raises(ValueError, match="disallowed_special must be 'all' or a collection"):
        ours.encode(text, disallowed_special="none")
    with pytest.raises(ValueError, match="unknown special tokens"):
        ours.encode(text, allowed_special={"<|nope|>"})
    for kw in [dict(allowed_special="all"), dict(allowed_special={"<|endoftext|>"}), dict(disallowed_special=()),
               dict(allowed_special=set(), disallowed_special=set())]:
        assert ours.encode(text, **kw) == theirs.encode(text, **kw), kw
    with pytest.raises(ValueError):  # tiktoken also checks strings that are not special tokens
        ours.encode("a<|mine|>", disallowed_special={"<|mine|>"})


@given(data=st.lists(st.sampled_from([b"^", b"a", b"A", b" ", b"1", b"\n", b"ab", b"\xe5\xad\x97"]),
                     max_size=120).map(b"".join))
def test_long_piece_merging_equals_short_piece_merging_on_cl100k(pair, data):
    from bpe.encode.rank_merge import merge_long, merge_small

    ranks = pair[0].mergeable_ranks
    assert merge_long(ranks, data) == merge_small(ranks, data)
