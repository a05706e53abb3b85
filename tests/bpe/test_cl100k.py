"""A Tokenizer read from cl100k_base.tiktoken encodes exactly like tiktoken's cl100k (offline)."""
import pytest
from hypothesis import given, strategies as st

from bpe import GPT4_PATTERN, Tokenizer

from .conftest import PROSE

tiktoken = pytest.importorskip("tiktoken")
from tiktoken.load import load_tiktoken_bpe  # noqa: E402

SPECIALS = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}

CODE = '''
def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    a, b = 0, 1
    out = []
    for _ in range(n):
        out.append(a)
        a, b = b, a + b
    return out

if __name__ == "__main__":
\tprint(fibonacci(10))   # trailing spaces   
'''


@pytest.fixture(scope="module")
def pair(cl100k_path):
    ours = Tokenizer.from_tiktoken(cl100k_path, pattern=GPT4_PATTERN, special_tokens=SPECIALS)
    ranks = load_tiktoken_bpe(str(cl100k_path))  # a local path: no network
    theirs = tiktoken.Encoding("cl100k_base", pat_str=GPT4_PATTERN, mergeable_ranks=ranks,
                               special_tokens=SPECIALS)
    return ours, theirs


def test_ids_are_the_files_ranks(pair):
    ours, theirs = pair
    assert ours.encode("!") == [0] == theirs.encode("!")  # rank 0 is '!', not byte 0
    assert ours.token_bytes(0) == b"!"
    assert ours.vocab_size == theirs.n_vocab == 100277


@pytest.mark.parametrize("text", [
    PROSE, CODE, PROSE * 3 + CODE * 2, (PROSE + CODE) * 40,
    "1234567890 123 12 1 99999999999999",
    "   leading and trailing   \n\n\n   \t\t\n",
    "ÀÁÂÃÄÅÆÇÈÉ àáâãäåæçèé ĀāĂăĄą",
    "Привет мир! Γειά σου Κόσμε! こんにちは世界 你好世界 안녕하세요 مرحبا بالعالم שלום עולם",
    "emoji: 🎉🔥💯 flags 🇫🇷🇯🇵 family 👨‍👩‍👧‍👦 skin 👍🏽",
    "I'm you're he's we've they'll I'd DON'T It'S",
    "https://example.com/path?q=1&b=two#frag user@example.org",
    "a" * 5000, " " * 3000 + "x", "\r\n\r\n" * 100,
])
def test_encodes_like_tiktoken_cl100k(pair, text):
    ours, theirs = pair
    assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


def test_special_tokens_like_tiktoken(pair):
    ours, theirs = pair
    text = "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>  return 1<|endoftext|>"
    assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")
    assert ours.encode(text, disallowed_special=()) == theirs.encode(text, disallowed_special=())
    with pytest.raises(ValueError):
        ours.encode(text)
    with pytest.raises(ValueError):
        theirs.encode(text)


@given(text=st.text(max_size=300))
def test_arbitrary_text_like_tiktoken(pair, text):
    ours, theirs = pair
    assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)
    assert ours.decode(ours.encode_ordinary(text)) == text


def test_huggingface_export_of_cl100k_encodes_like_tiktoken(pair, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    ours, theirs = pair
    p = tmp_path / "cl100k.json"
    ours.save_huggingface(p)
    hf = tokenizers.Tokenizer.from_file(str(p))
    for text in [PROSE, CODE * 3, "1234567 0x0010  \n\n  y\r\n", "a" * 2000]:
        assert hf.encode(text).ids == theirs.encode_ordinary(text)


def test_tiktokens_other_names_give_tiktokens_answers(pair):
    """Code written for tiktoken.Encoding runs on a Tokenizer: the same values, types and errors."""
    import re

    import numpy as np

    ours, theirs = pair
    assert ours.n_vocab == theirs.n_vocab and ours.eot_token == theirs.eot_token == 100257
    assert ours.special_tokens_set == theirs.special_tokens_set
    for i in (0, 100256, 100257, 100276):
        assert ours.is_special_token(i) == theirs.is_special_token(i)
    for s in ("hello", b"hello", " world", b"\xe4\xbd", "<|endoftext|>", b"<|fim_prefix|>"):
        assert ours.encode_single_token(s) == theirs.encode_single_token(s)
    for s in ("hello world", b"\xff<|endoftext|>", "<|endoftext|>x"):
        with pytest.raises(KeyError):
            theirs.encode_single_token(s)
        with pytest.raises(KeyError):
            ours.encode_single_token(s)
    text = CODE + "<|endoftext|>" + PROSE
    got, want = ours.encode_to_numpy(text, allowed_special="all"), theirs.encode_to_numpy(text, allowed_special="all")
    assert got.dtype == want.dtype == np.uint32 and np.array_equal(got, want)
    ids = theirs.encode(text, allowed_special="all")
    assert ours.decode_tokens_bytes(ids) == theirs.decode_tokens_bytes(ids)
    assert ours.decode_single_token_bytes(100257) == theirs.decode_single_token_bytes(100257)
    assert ours.token_byte_values() == theirs.token_byte_values()
    empty = Tokenizer({bytes([b]): b for b in range(256)})
    with pytest.raises(KeyError, match=re.escape("no <|endoftext|>")):
        empty.eot_token
