"""The Tokenizer: train, encode, decode, and the doors to the file formats.

A tokenizer is a split pattern, ``ranks`` (token bytes -> id, the mergeable tokens)
and special tokens (text -> id). Encoding cuts text with the pattern and merges each
piece by rank, lowest first, exactly like tiktoken (``encode/``); the ids are the
ranks, so a tokenizer read from a ``.tiktoken`` file keeps that file's ids.

A trained tokenizer also keeps its merges ``(left_id, right_id)``: ids 0..255 are the
bytes, merge k makes id 256 + k, special tokens follow (unless given explicit ids).
"""
from __future__ import annotations

import operator
import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import AbstractSet

import numpy as np

from .encode.piece_encoder import PieceEncoder
from .encode.special import (Allowed, Disallowed, check_disallowed, check_special_token, encode_with_specials,
                             special_policy)
from .files.schema import id_limit, token_id
from .split.patterns import COVERAGE_PROBE, GPT4_PATTERN, PATTERNS, coverage_error, resolve_pattern
from .text import alternation, repair_surrogates
from .tiktoken_api import TiktokenAPI

DEFAULT_VOCAB_SIZE = 4096  # of the trainers and of `bpe train`
_CONTINUATION = [0x80 <= b < 0xC0 for b in range(256)]


def _check_str(text) -> None:
    if not isinstance(text, str):
        hint = " (for bytes, use encode_bytes)" if isinstance(text, (bytes, bytearray, memoryview)) else ""
        raise TypeError(f"encode expects str, got {type(text).__name__}{hint}")


class Tokenizer(TiktokenAPI):
    """Byte-level BPE tokenizer (tiktoken-compatible encoding)."""

    def __init__(
        self,
        ranks: Mapping[bytes, int],
        pattern: str = GPT4_PATTERN,
        special_tokens: Mapping[str, int] | None = None,
        merges: list[tuple[int, int]] | None = None,
    ):
        self.pattern = resolve_pattern(pattern)
        gap = None if self.pattern in PATTERNS.values() else coverage_error(self.pattern, COVERAGE_PROBE)
        if gap is not None:
            warnings.warn(f"{gap}; encoding a text that holds such a character raises", stacklevel=2)
        self._ranks: dict[bytes, int] = dict(ranks)
        self._special: dict[str, int] = dict(special_tokens or {})
        self._merges = None if merges is None else [tuple(m) for m in merges]
        self._check()
        self._setup()

    def _check(self) -> None:
        limit = id_limit(len(self._ranks) + len(self._special))  # ids about dense: a bounded vocabulary
        ids = set(self._ranks.values())
        if len(ids) != len(self._ranks):
            raise ValueError("two mergeable tokens share an id")
        for t, i in self._ranks.items():
            if not isinstance(t, (bytes, bytearray)) or not t:
                raise ValueError(f"mergeable token {t!r:.40} (id {i!r:.20}) must be non-empty bytes")
        token_id(operator.index(min(ids, default=0)), "the smallest mergeable token id", limit)
        token_id(operator.index(max(ids, default=0)), "the largest mergeable token id", limit)
        missing = [b for b in range(256) if bytes([b]) not in self._ranks]
        if missing:
            raise ValueError(f"the vocabulary lacks {len(missing)} single bytes (e.g. byte {missing[0]}); "
                             "every byte must be a token for byte-level BPE")
        for s, i in self._special.items():
            check_special_token(s)
            token_id(i, f"the id of special token {s[:40]!r}", limit)
            if i in ids:
                raise ValueError(f"special token {s!r} has id {i}, which a mergeable token already uses")
        if len(set(self._special.values())) != len(self._special):
            raise ValueError("two special tokens share an id")

    def _setup(self) -> None:
        """The decoder, the encoder and its caches, made from the pattern, ranks and special tokens."""
        # A list indexed by id (None in a gap): a decode is then one C lookup per id without hashing.
        self._vocab_size = max(max(self._ranks.values()), max(self._special.values(), default=0)) + 1
        self._decoder: list[bytes | None] = [None] * self._vocab_size
        for b, i in self._ranks.items():
            self._decoder[i] = b
        for s, i in self._special.items():
            self._decoder[i] = s.encode("utf-8")
        self._latin: list[str | None] | None = None  # _latin1's
        self._ordinary = PieceEncoder(self._ranks, self.pattern)
        self._special_res: dict[frozenset, object] = {}

    def __getstate__(self):  # pickling for worker processes: caches and compiled regexes stay behind
        return {"pattern": self.pattern, "ranks": self._ranks, "special": self._special, "merges": self._merges}

    def __setstate__(self, state):
        self.pattern = state["pattern"]
        self._ranks = state["ranks"]
        self._special = state["special"]
        self._merges = state["merges"]
        self._setup()

    # ---- properties -------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """One more than the largest id (special tokens included)."""
        return self._vocab_size

    @property
    def n_merges(self) -> int:
        """Number of merges (multi-byte mergeable tokens)."""
        return len(self._merges) if self._merges is not None else len(self._ranks) - 256

    @property
    def merges(self) -> list[tuple[int, int]] | None:
        """The training merges ``(left_id, right_id)``, or None for an imported vocabulary."""
        return None if self._merges is None else list(self._merges)

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self._special)

    @property
    def mergeable_ranks(self) -> dict[bytes, int]:
        """Token bytes -> id for every non-special token (tiktoken's ``mergeable_ranks``)."""
        return dict(self._ranks)

    def token_bytes(self, i: int) -> bytes:
        """The bytes of token ``i`` (a special token gives its UTF-8 text)."""
        b = self._decoder[i] if isinstance(i, (int, np.integer)) and 0 <= i < self._vocab_size else None
        if b is None:
            shown = int(i) if isinstance(i, np.integer) else i
            raise ValueError(f"token id {shown!r} is not in the vocabulary (size {self.vocab_size})")
        return b

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={self.vocab_size}, n_merges={self.n_merges}, "
                f"special_tokens={len(self._special)})")

    # ---- encoding ---------------------------------------------------------------

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token text is encoded as ordinary text.

        Surrogates are repaired over the whole text first, as tiktoken does: a pair becomes
        its code point, a lone surrogate U+FFFD.
        """
        _check_str(text)
        return self._ordinary(repair_surrogates(text))

    def encode_bytes(self, data: bytes) -> list[int]:
        """Token ids of any bytes, exactly: ``decode_bytes(encode_bytes(b)) == b``.

        Valid UTF-8 encodes as ``encode_ordinary`` of its text. A byte that is not part of valid
        UTF-8 is split as a punctuation character would be (it is decoded to a surrogate with
        ``surrogateescape``, which the pattern sees as neither letter, digit nor space) and keeps
        its own byte in the pieces it ends up in. Special-token text is ordinary text here.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"encode_bytes expects bytes, got {type(data).__name__}")
        return self._ordinary(bytes(data).decode("utf-8", "surrogateescape"))

    def _special_re(self, names: AbstractSet[str]):
        key = frozenset(names)
        r = self._special_res.get(key)
        if r is None:
            r = self._special_res[key] = alternation(key)
        return r

    def encode(self, text: str, allowed_special: Allowed = frozenset(),
               disallowed_special: Disallowed = "all") -> list[int]:
        """Token ids of ``text`` with tiktoken's special-token policy (``bpe.encode.special``).

        ``allowed_special``: special tokens whose text becomes their id ("all" or a set; none by
        default). ``disallowed_special``: strings whose presence raises DisallowedSpecialError
        ("all" = every special token not allowed); ``()`` encodes them as ordinary text.
        """
        _check_str(text)
        allowed, disallowed = special_policy(self._special, allowed_special, disallowed_special)
        check_disallowed(text, self._special_re(disallowed) if disallowed else None)
        text = repair_surrogates(text)
        if not allowed:
            return self._ordinary(text)
        return encode_with_specials(self._ordinary.encode_many, [text], self._special_re(allowed).finditer,
                                    self._special)[0]

    def encode_batch(self, texts: Iterable[str], *, num_threads: int | None = None,
                     allowed_special: Allowed = frozenset(), disallowed_special: Disallowed = "all",
                     ) -> list[list[int]]:
        """``[encode(t) for t in texts]`` on up to ``num_threads`` cores (default: the free ones), as
        tiktoken's; they are processes (``bpe.encode.parallel_encode``), kept for this tokenizer's
        later batches and stopped with it; small batches stay in this process."""
        from .encode.parallel_encode import encode_batch

        special_policy(self._special, allowed_special, disallowed_special)  # fail here, not in a worker
        return encode_batch(self, list(texts), num_threads, allowed_special, disallowed_special)

    def encode_ordinary_batch(self, texts: Iterable[str], *, num_threads: int | None = None) -> list[list[int]]:
        """``[encode_ordinary(t) for t in texts]``, as ``encode_batch``."""
        return self.encode_batch(texts, num_threads=num_threads, allowed_special=frozenset(), disallowed_special=())

    # ---- decoding ---------------------------------------------------------------

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes of a token sequence (special tokens as their UTF-8 text)."""
        if isinstance(ids, (str, bytes, bytearray)):  # their items would be read as ids
            raise TypeError(f"decode expects a sequence of int token ids, got {type(ids).__name__}")
        if isinstance(ids, np.ndarray):
            if ids.dtype.kind not in "iu" or ids.ndim != 1:
                raise TypeError(f"decode expects a 1-D array of int token ids, got {ids.ndim}-D {ids.dtype}")
            ids = ids.tolist()  # plain ints: a list lookup of each is then the fastest
        elif not isinstance(ids, (list, tuple)):
            try:
                ids = list(ids)
            except TypeError:
                raise TypeError(f"decode expects a sequence of int token ids, got {type(ids).__name__}") from None
        try:
            # min first: a negative id would index the list from its end
            if ids and min(ids) < 0:
                raise IndexError
            return "".join(map(self._latin1().__getitem__, ids)).encode("latin-1")
        except (IndexError, TypeError):
            pass
        for i in ids:  # the first id to blame
            if not isinstance(i, (int, np.integer)):
                raise TypeError(f"decode expects a sequence of int token ids, got {type(i).__name__} {i!r:.40}")
            self.token_bytes(i)
        raise AssertionError("unreachable: an id failed to decode but none is invalid")

    def _latin1(self) -> list[str | None]:
        """Each token's bytes as a latin-1 str (a character per byte), by id: str.join copies them
        in C, where bytes.join first fills a buffer record per item; encoding the joined text as
        latin-1 gives the bytes back. Made at the first decode."""
        if self._latin is None:
            self._latin = [None if b is None else b.decode("latin-1") for b in self._decoder]
        return self._latin

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Text of a token sequence; bytes that are not valid UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def decode_batch(self, batch: Iterable[Iterable[int]], errors: str = "replace") -> list[str]:
        """``[decode(ids) for ids in batch]``."""
        return [self.decode(ids, errors) for ids in batch]

    def decode_bytes_batch(self, batch: Iterable[Iterable[int]]) -> list[bytes]:
        """``[decode_bytes(ids) for ids in batch]``."""
        return [self.decode_bytes(ids) for ids in batch]

    def decode_with_offsets(self, ids: Iterable[int]) -> tuple[str, list[int]]:
        """The text of ``ids`` and, per token, the index of the character where it starts.

        tiktoken's rule: a token whose first byte continues a character begun by the token
        before it starts at that character. Raises UnicodeDecodeError (a ValueError) when
        the bytes are not valid UTF-8, since offsets into replaced text would mislead.
        """
        parts = [self.token_bytes(i) for i in ids]
        offsets: list[int] = []
        n = 0  # characters so far: bytes that are not UTF-8 continuation bytes (0x80..0xBF)
        for b in parts:
            offsets.append(max(0, n - (0x80 <= b[0] < 0xC0)))
            n += len(b) - sum(map(_CONTINUATION.__getitem__, b))
        return b"".join(parts).decode("utf-8", errors="strict"), offsets

    # ---- training ---------------------------------------------------------------

    @classmethod
    def train(
        cls,
        inputs: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
        vocab_size: int = DEFAULT_VOCAB_SIZE,
        pattern: str = GPT4_PATTERN,
        special_tokens: Iterable[str] | Mapping[str, int] = (),
        min_frequency: int = 1,
        workers: int | None = None,
        verbose: bool = False,
        progress: bool | None = None,
    ) -> "Tokenizer":
        """Train on files, folders and globs (each file one document).

        ``inputs``: a path or a list/tuple of paths; None trains on the default corpus
        (the standard library's sources). Any other iterable (a generator, say) is taken
        as an iterable of texts, as ``train_from_iterator``.

        ``vocab_size`` counts the 256 bytes, the merges and the special tokens (listed
        names get the ids after the merges; a mapping gives explicit ids). Each merge
        takes the most frequent adjacent pair; ties go to the lexicographically smallest
        ``(left_id, right_id)``, so a corpus gives the same tokenizer on every machine.
        Training stops early (with a warning) when no pair occurs ``min_frequency``
        times. ``workers`` processes count chunks of large inputs (default: all cores);
        ``verbose`` prints phase timings; ``progress`` shows merges/s (default: on a TTY).
        """
        from .train.trainer import train_tokenizer

        return train_tokenizer(cls, inputs, None, vocab_size, pattern, special_tokens,
                               min_frequency, workers, verbose, progress)

    @classmethod
    def train_from_iterator(
        cls,
        texts: Iterable[str],
        vocab_size: int = DEFAULT_VOCAB_SIZE,
        pattern: str = GPT4_PATTERN,
        special_tokens: Iterable[str] | Mapping[str, int] = (),
        min_frequency: int = 1,
        workers: int | None = None,
        verbose: bool = False,
        progress: bool | None = None,
    ) -> "Tokenizer":
        """Train on an iterable of texts (each one document); same trainer as ``train``."""
        from .train.trainer import train_tokenizer

        if isinstance(texts, str):
            texts = [texts]
        if texts is None:  # None would mean the default corpus to the trainer
            raise TypeError("train_from_iterator needs an iterable of texts, got None (Tokenizer.train() "
                            "trains on the default corpus)")
        return train_tokenizer(cls, None, texts, vocab_size, pattern, special_tokens,
                               min_frequency, workers, verbose, progress)

    @classmethod
    def train_from_counts(
        cls,
        paths: str | os.PathLike | Iterable[str | os.PathLike],
        vocab_size: int = DEFAULT_VOCAB_SIZE,
        pattern: str | None = None,
        special_tokens: Iterable[str] | Mapping[str, int] | None = None,
        min_frequency: int = 1,
        verbose: bool = False,
        progress: bool | None = None,
    ) -> "Tokenizer":
        """Train on chunk-count files of ``bpe count`` (paths or globs), one per shard: the same
        tokenizer as ``train`` over all the shards. ``pattern`` and ``special_tokens`` default to
        the files' own; others are refused, since the counts depend on them."""
        from .train.trainer import train_from_count_files

        return train_from_count_files(cls, paths, vocab_size, pattern, special_tokens, min_frequency,
                                      verbose, progress)

    @classmethod
    def from_merges(
        cls,
        merges: list[tuple[int, int]],
        pattern: str = GPT4_PATTERN,
        special_tokens: Mapping[str, int] | None = None,
    ) -> "Tokenizer":
        """A tokenizer whose ids 0..255 are the bytes and merge k makes id 256 + k."""
        vocab = [bytes([i]) for i in range(256)]
        for k, m in enumerate(merges):
            try:
                a, b = map(operator.index, m)
            except (TypeError, ValueError):
                raise ValueError(f"merge {k} is {m!r:.40}, not a pair of int ids") from None
            if not (0 <= a < len(vocab) and 0 <= b < len(vocab)):
                raise ValueError(f"merge {k} ({a}, {b}) uses an id not defined before it")
            vocab.append(vocab[a] + vocab[b])
        ranks: dict[bytes, int] = {}
        for i, t in enumerate(vocab):
            if t in ranks:
                raise ValueError(f"merge {i - 256} makes token {t!r}, which id {ranks[t]} already is")
            ranks[t] = i
        return cls(ranks, pattern, special_tokens, merges=merges)

    # ---- files --------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write our JSON format (version, pattern, merges or tokens, special tokens), atomically."""
        from .files.bpe_json import save_json

        save_json(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Tokenizer":
        """Read a file written by ``save``."""
        from .files.bpe_json import load_json

        return load_json(cls, path)

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike,
        pattern: str | None = None,
        special_tokens: Mapping[str, int] | None = None,
    ) -> "Tokenizer":
        """Read a ``.tiktoken`` file (base64 token, space, rank per line); ranks stay ids.

        ``pattern`` and ``special_tokens`` default to those in the side file ``<path>.json`` that
        ``save_tiktoken`` writes, and without one to GPT-4's pattern and no special tokens.
        """
        from .files.tiktoken_file import load_tiktoken

        return load_tiktoken(cls, path, pattern, special_tokens)

    def save_tiktoken(self, path: str | os.PathLike) -> Path:
        """Write the mergeable tokens as a ``.tiktoken`` file, and the split pattern and special
        tokens (which that format cannot hold) to ``<path>.json``; returns the latter's path."""
        from .files.tiktoken_file import save_tiktoken

        return save_tiktoken(self, path)

    @classmethod
    def from_gpt2_files(
        cls,
        encoder_json: str | os.PathLike,
        vocab_bpe: str | os.PathLike,
        pattern: str | None = None,
    ) -> "Tokenizer":
        """Read GPT-2's ``encoder.json`` + ``vocab.bpe`` (ids as in encoder.json)."""
        from .files.huggingface import load_gpt2_files

        return load_gpt2_files(cls, encoder_json, vocab_bpe, pattern)

    def save_gpt2_files(self, encoder_json: str | os.PathLike, vocab_bpe: str | os.PathLike) -> None:
        """Write GPT-2's ``encoder.json`` + ``vocab.bpe`` (trained tokenizers only)."""
        from .files.huggingface import save_gpt2_files

        save_gpt2_files(self, encoder_json, vocab_bpe)

    @classmethod
    def from_huggingface(cls, path: str | os.PathLike) -> "Tokenizer":
        """Read a Hugging Face byte-level BPE ``tokenizer.json`` (GPT-2, LLaMA-3, Qwen2 style); ids
        are the file's, added tokens become special tokens."""
        from .files.huggingface import load_huggingface

        return load_huggingface(cls, path)

    def save_huggingface(self, path: str | os.PathLike) -> None:
        """Write a Hugging Face ``tokenizer.json`` (byte-level BPE) that encodes like this one."""
        from .files.huggingface import save_huggingface

        save_huggingface(self, path)
