"""bpe: a byte-level BPE tokenizer that trains incrementally and encodes like tiktoken.

    from bpe import Tokenizer, GPT4_PATTERN
    tok = Tokenizer.train(["corpus.txt"], vocab_size=8192, pattern=GPT4_PATTERN,
                          special_tokens=["<|endoftext|>"])
    ids = tok.encode("hello world", allowed_special="all")
    assert tok.decode(ids) == "hello world"
"""
from .corpus import default_corpus_files
from .patterns import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN
from .tokenizer import Tokenizer

__all__ = ["Tokenizer", "GPT2_PATTERN", "GPT4_PATTERN", "O200K_PATTERN", "default_corpus_files"]
