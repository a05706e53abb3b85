"""The `tokenizer.ggml.*` metadata of a GGUF file: what llama.cpp tokenizes with.

llama.cpp does not read a split regex from the file: it picks one of its own by the name in
`tokenizer.ggml.pre` (llama-vocab.cpp), so every pattern we write must have its name here, and a
pattern without one is refused rather than written as "default" (another regex):

    GPT2_PATTERN                                   gpt-2
    GPT4_PATTERN (cl100k), LLaMA-3's tokenizer.json llama-bpe
    Qwen2's tokenizer.json                         qwen2
    O200K_PATTERN                                  gpt-4o

A byte-level BPE is written as llama.cpp's "gpt2" model (tokens as GPT-2's printable strings,
the Hugging Face export's merges). A character-level tokenizer is a "gpt2" model too: its
characters are the tokens and each multi-byte character is built by merges of its bytes (no
merge crosses a character, as no UTF-8 continuation byte starts one). No tokenizer: model
"none", which llama.cpp loads with `{arch}.vocab_size` ids and no text.

llama.cpp refuses a vocabulary whose token strings repeat, so a special token spelled like another
token is refused here, and the ids no token uses get filler names ("[PAD300]") that no token has.
"""
from __future__ import annotations

import warnings
from typing import Any

from bpe import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN

# metadata value types
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_UNUSED = 1, 3, 5
# llama.cpp's BOS and EOS of a "gpt2" vocabulary whose file names none (llama-vocab.cpp)
LLAMA_CPP_DEFAULT_EOS = 11

# The Split regexes of LLaMA-3's and Qwen2's tokenizer.json, as Tokenizer.from_huggingface keeps them.
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
PRE_TOKENIZERS = {GPT2_PATTERN: "gpt-2", GPT4_PATTERN: "llama-bpe", LLAMA3_SPLIT: "llama-bpe",
                  QWEN2_SPLIT: "qwen2", O200K_PATTERN: "gpt-4o"}


def pre_tokenizer(pattern: str) -> str:
    """llama.cpp's `tokenizer.ggml.pre` name for a split pattern; ValueError naming it if none."""
    if pattern not in PRE_TOKENIZERS:
        shown = pattern if len(pattern) <= 120 else pattern[:117] + "..."
        raise ValueError(f"the tokenizer's split pattern {shown!r} has no llama.cpp pre-tokenizer name, so "
                         "llama.cpp would split text with another regex; patterns with a name: GPT2_PATTERN, "
                         "GPT4_PATTERN, O200K_PATTERN, LLaMA-3's and Qwen2's (export without the tokenizer, "
                         "or train one with one of these)")
    return PRE_TOKENIZERS[pattern]


def _bpe_vocab(tokenizer, vocab_size: int) -> tuple[list[str | None], list[int], list[str], str]:
    """(tokens (None where no token is), token types, merges, pre name) of a byte-level BPE Tokenizer."""
    from bpe.files.huggingface import huggingface_dict, token_to_str

    pre = pre_tokenizer(tokenizer.pattern)
    tokens, types = [None] * vocab_size, [TOKEN_UNUSED] * vocab_size
    for b, i in tokenizer.mergeable_ranks.items():
        tokens[i], types[i] = token_to_str(b), TOKEN_NORMAL
    return tokens, types, huggingface_dict(tokenizer)["model"]["merges"], pre


def _char_vocab(tokenizer, vocab_size: int) -> tuple[list[str | None], list[int], list[str], str]:
    """(tokens (None where no token is), token types, merges, pre name) of a CharTokenizer: one
    token per character."""
    from bpe.files.huggingface import token_to_str

    tokens, types = [None] * vocab_size, [TOKEN_UNUSED] * vocab_size
    merges: dict[str, None] = {}
    for i, c in enumerate(tokenizer.chars):
        raw = c.encode("utf-8")
        tokens[i], types[i] = token_to_str(raw), TOKEN_NORMAL
        for k in range(1, len(raw)):  # the character's bytes joined left to right
            merges[f"{token_to_str(raw[:k])} {token_to_str(raw[k:k + 1])}"] = None
    return tokens, types, list(merges), PRE_TOKENIZERS[GPT2_PATTERN]


def _check_distinct(tokens: list[str | None]) -> None:
    """ValueError naming a token string that two ids share: llama.cpp aborts loading such a file."""
    first: dict[str, int] = {}
    for i, t in enumerate(tokens):
        if t is not None and first.setdefault(t, i) != i:
            raise ValueError(f"save_gguf: token {t!r} is both id {first[t]} and id {i} (a special token spelled "
                             "like another token?); llama.cpp refuses a vocabulary whose token strings repeat, "
                             "so rename the special token")


def _fill_gaps(tokens: list[str | None]) -> list[str]:
    """`tokens` with each id no token uses named "[PAD<id>]", or that with "_"s added where a token
    is already so named."""
    taken = {t for t in tokens if t is not None}
    out = []
    for i, t in enumerate(tokens):
        if t is None:
            t = f"[PAD{i}]"
            while t in taken:
                t = t[:-1] + "_]"
            taken.add(t)
        out.append(t)
    return out


def _warn_default_eos(tokens: list[str], eot_names: tuple[str, ...]) -> None:
    """Say which token llama.cpp ends generation at when the file names no EOS."""
    i = LLAMA_CPP_DEFAULT_EOS
    which = f"id {i} ({tokens[i]!r})" if i < len(tokens) else f"id {i}, which this vocabulary of {len(tokens)} lacks,"
    names = eot_names or ("<|endoftext|>",)
    warnings.warn(f"the tokenizer has no {' or '.join(map(repr, names))} special token, so the GGUF file names "
                  f"no BOS/EOS and llama.cpp takes its default {which} as both: it stops generating at that "
                  f"token; train the tokenizer with special token {names[0]!r} to give it one", stacklevel=4)


def tokenizer_metadata(tokenizer, vocab_size: int, eot: int | None,
                       eot_names: tuple[str, ...] = ()) -> list[tuple[str, int, Any]]:
    """tokenizer.ggml.* for `tokenizer` (a bpe Tokenizer, a CharTokenizer or None) in a model of
    `vocab_size` ids; eot: the end-of-text id (bos and eos), or None (a warning then names the token
    llama.cpp takes instead; eot_names: the names looked for, for that warning)."""
    from gpt.pretrained.folder import check_vocab

    check_vocab(tokenizer, vocab_size, "save_gguf")
    if hasattr(tokenizer, "mergeable_ranks"):
        tokens, types, merges, pre = _bpe_vocab(tokenizer, vocab_size)
    elif hasattr(tokenizer, "chars"):
        tokens, types, merges, pre = _char_vocab(tokenizer, vocab_size)
    else:
        if tokenizer is not None:
            warnings.warn(f"a {type(tokenizer).__name__} has no GGUF form: the file holds no tokenizer", stacklevel=3)
        return [("tokenizer.ggml.model", STR, "none")]
    for s, i in tokenizer.special_tokens.items():
        tokens[i], types[i] = s, TOKEN_CONTROL
    _check_distinct(tokens)
    tokens = _fill_gaps(tokens)
    kv = [("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, pre),
          ("tokenizer.ggml.tokens", ARR, (STR, tokens)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
          ("tokenizer.ggml.merges", ARR, (STR, merges)),
          ("tokenizer.ggml.add_bos_token", BOOL, False)]  # our encoders add none; llama-bpe would
    if eot is None:
        _warn_default_eos(tokens, eot_names)
    else:
        kv += [("tokenizer.ggml.bos_token_id", U32, eot), ("tokenizer.ggml.eos_token_id", U32, eot)]
    return kv
