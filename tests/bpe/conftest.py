"""Shared fixtures: small tokenizers trained once per session (the cl100k file: tests/conftest.py)."""

import pytest

from bpe import GPT2_PATTERN, GPT4_PATTERN, Tokenizer
from bpe import default_corpus_files


PROSE = (
    "The quick brown fox jumps over the lazy dog. It's 3.14159 o'clock; don't panic!\n"
    "Numbers: 1234567890 12,345.67 -42 0x1F.  Tabs\tand   spaces   \n\n\n"
    "Ünïcödé: naïve café, Straße, Ελληνικά, русский текст, 日本語のテキスト, 中文字符, 한국어, "
    "עברית, العربية, हिन्दी, emoji 🎉👩‍👩‍👧 and combining e\u0301.\r\n"
)


def small_corpus_texts() -> list[str]:
    files = [f for f in default_corpus_files() if f.stat().st_size < 60_000][:60]
    return [f.read_text(encoding="utf-8", errors="replace") for f in files] + [PROSE * 5]


@pytest.fixture(scope="session")
def corpus_texts() -> list[str]:
    return small_corpus_texts()


@pytest.fixture(scope="session")
def tok4(corpus_texts) -> Tokenizer:
    return Tokenizer.train_from_iterator(corpus_texts, vocab_size=1200, pattern=GPT4_PATTERN,
                                         special_tokens=["<|endoftext|>", "<|fim|>"], workers=1)


@pytest.fixture(scope="session")
def tok2(corpus_texts) -> Tokenizer:
    return Tokenizer.train_from_iterator(corpus_texts, vocab_size=1200, pattern=GPT2_PATTERN,
                                         special_tokens=["<|endoftext|>"], workers=1)


@pytest.fixture(scope="session")
def tok_by_pattern(corpus_texts):
    """A small tokenizer per split pattern, trained once."""
    made = {}

    def get(pattern):
        if pattern not in made:
            made[pattern] = Tokenizer.train_from_iterator(corpus_texts[:8], vocab_size=400, pattern=pattern,
                                                          workers=1)
        return made[pattern]

    return get
