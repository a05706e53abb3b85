"""The Tokenizer: train, encode, decode, and the doors to the file formats.

A tokenizer is a split pattern, ``ranks`` (token bytes -> id, the mergeable tokens)
and special tokens (text -> id). Encoding cuts text with the pattern and merges each
piece by rank, lowest first, exactly like tiktoken (``bytepair.py``); the ids are the
ranks, so a tokenizer read from a ``.tiktoken`` file keeps that file's ids.

A trained tokenizer also keeps its merges ``(left_id, right_id)``: ids 0..255 are the
bytes, merge k makes id 256 + k, special tokens follow (unless given explicit ids).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from itertools import chain
from typing import AbstractSet, Collection, Literal

import regex

from .bytepair import byte_pair_encode, utf8
from .patterns import GPT4_PATTERN, chunk_finder, resolve_pattern, segment_cut

CACHE_LIMIT = 1 << 19  # distinct pieces remembered; the cache is cleared when full
ENCODE_BLOCK = 1 << 13  # characters per regex call on long texts (more blocks are pure ASCII)


class Tokenizer:
    """Byte-level BPE tokenizer (tiktoken-compatible encoding)."""

    def __init__(
        self,
        ranks: Mapping[bytes, int],
        pattern: str = GPT4_PATTERN,
        special_tokens: Mapping[str, int] | None = None,
        merges: list[tuple[int, int]] | None = None,
    ):
        self.pattern = resolve_pattern(pattern)
        self._ranks: dict[bytes, int] = dict(ranks)
        self._special: dict[str, int] = dict(special_tokens or {})
        self._merges = None if merges is None else [tuple(m) for m in merges]
        self._check()
        self._decoder: dict[int, bytes] = {i: b for b, i in self._ranks.items()}
        for s, i in self._special.items():
            self._decoder[i] = s.encode("utf-8")
        self._setup()

    def _check(self) -> None:
        ids = set(self._ranks.values())
        if len(ids) != len(self._ranks):
            raise ValueError("two mergeable tokens share an id")
        missing = [b for b in range(256) if bytes([b]) not in self._ranks]
        if missing:
            raise ValueError(f"the vocabulary lacks {len(missing)} single bytes (e.g. byte {missing[0]}); "
                             "every byte must be a token for byte-level BPE")
        for s, i in self._special.items():
            if not s:
                raise ValueError("a special token must be a non-empty string")
            if i in ids:
                raise ValueError(f"special token {s!r} has id {i}, which a mergeable token already uses")
        if len(set(self._special.values())) != len(self._special):
            raise ValueError("two special tokens share an id")

    def _setup(self) -> None:
        self._findall = chunk_finder(self.pattern)
        self._cut = segment_cut(self.pattern)
        self._clear_cache()
        self._special_res: dict[frozenset, object] = {}
        self._vocab_size = max(self._decoder) + 1

    def _clear_cache(self) -> None:
        """Empty the piece cache: ``_one`` (piece -> id, for pieces of one token) and ``_multi``
        (piece -> ids). ``_one`` starts with every token that is whole UTF-8 text, since a
        piece equal to a token encodes to that token (as in tiktoken)."""
        one: dict[str, int] = {}
        for b, i in self._ranks.items():
            try:
                one[b.decode("utf-8")] = i
            except UnicodeDecodeError:
                pass
        self._one = one
        self._multi: dict[str, list[int]] = {}

    def __getstate__(self):  # pickling for worker processes: caches and compiled regexes stay behind
        return {"pattern": self.pattern, "ranks": self._ranks, "special": self._special, "merges": self._merges}

    def __setstate__(self, state):
        self.pattern = state["pattern"]
        self._ranks = state["ranks"]
        self._special = state["special"]
        self._merges = state["merges"]
        self._decoder = {i: b for b, i in self._ranks.items()}
        for s, i in self._special.items():
            self._decoder[i] = s.encode("utf-8")
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
        try:
            return self._decoder[i]
        except (KeyError, TypeError):
            raise ValueError(f"token id {i!r} is not in the vocabulary (size {self.vocab_size})") from None

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={self.vocab_size}, n_merges={self.n_merges}, "
                f"special_tokens={len(self._special)})")

    # ---- encoding ---------------------------------------------------------------

    def _encode_chunks(self, text: str) -> list[int]:
        # Most pieces are one token: one C-level map over the pieces gives their ids, and
        # None marks the rest (pieces of several tokens, and pieces not seen yet), which
        # list.index finds in C; only those run Python code.
        pieces = self._findall(text)
        one = self._one
        ids = list(map(one.get, pieces))
        try:
            i = ids.index(None)
        except ValueError:
            return ids
        multi = self._multi
        if len(one) + len(multi) + len(pieces) > CACHE_LIMIT:
            self._clear_cache()
            one, multi = self._one, self._multi
        ranks = self._ranks
        n = len(ids)
        out = ids[:i]
        while True:
            piece = pieces[i]
            v = one.get(piece)  # it may have been a miss earlier in this text
            if v is not None:
                out.append(v)
            else:
                seq = multi.get(piece)
                if seq is None:
                    seq = byte_pair_encode(ranks, utf8(piece))
                    if len(seq) == 1:
                        one[piece] = seq[0]
                    elif len(piece) <= 256:  # a rare huge piece is not worth its memory
                        multi[piece] = seq
                out += seq
            try:
                j = ids.index(None, i + 1)
            except ValueError:
                out += ids[i + 1 :]
                return out
            out += ids[i + 1 : j]
            i = j

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token text is encoded as ordinary text."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        if len(text) <= ENCODE_BLOCK or self._cut is None:
            return self._encode_chunks(text)
        # Long texts go in blocks cut at chunk boundaries, to bound the memory of the pieces.
        out: list[int] = []
        pos = 0
        n = len(text)
        while pos < n:
            m = self._cut.search(text, pos + ENCODE_BLOCK) if pos + ENCODE_BLOCK < n else None
            end = m.start() if m else n
            out += self._encode_chunks(text[pos:end])
            pos = end
        return out

    def _special_re(self, names: AbstractSet[str]):
        key = frozenset(names)
        r = self._special_res.get(key)
        if r is None:
            alts = sorted(key, key=len, reverse=True)  # longest first, so a prefix never wins
            r = regex.compile("|".join(regex.escape(s) for s in alts))
            self._special_res[key] = r
        return r

    def encode(
        self,
        text: str,
        allowed_special: Literal["all"] | AbstractSet[str] = frozenset(),
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[int]:
        """Token ids of ``text`` with tiktoken's special-token policy.

        ``allowed_special``: special tokens whose text becomes their id ("all" or a set).
        ``disallowed_special``: special tokens whose text raises ValueError when found
        ("all" = every special token not allowed). Pass ``disallowed_special=()`` to encode
        such text as ordinary text instead.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        allowed = set(self._special) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(self._special)
        if unknown:
            raise ValueError(f"allowed_special names unknown special tokens: {sorted(unknown)}; "
                             f"this tokenizer has {sorted(self._special)}")
        if disallowed_special == "all":
            disallowed = set(self._special) - allowed
        else:
            disallowed = set(disallowed_special)
        if disallowed:
            m = self._special_re(disallowed).search(text)
            if m:
                raise ValueError(
                    f"Encountered text corresponding to disallowed special token {m.group()!r} at "
                    f"character {m.start()}. To encode it as the special token, pass "
                    f"allowed_special={{{m.group()!r}}} (or allowed_special='all'); to encode it as "
                    "ordinary text, pass disallowed_special=()."
                )
        if not allowed:
            return self.encode_ordinary(text)
        out: list[int] = []
        pos = 0
        for m in self._special_re(allowed).finditer(text):
            if m.start() > pos:
                out += self.encode_ordinary(text[pos : m.start()])
            out.append(self._special[m.group()])
            pos = m.end()
        if pos < len(text):
            out += self.encode_ordinary(text[pos:])
        return out

    def encode_batch(
        self,
        texts: Iterable[str],
        workers: int | None = None,
        allowed_special: Literal["all"] | AbstractSet[str] = frozenset(),
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[list[int]]:
        """``[encode(t) for t in texts]``, in ``workers`` processes (default: all cores)."""
        from .batch import encode_batch

        return encode_batch(self, list(texts), workers, allowed_special, disallowed_special)

    # ---- decoding ---------------------------------------------------------------

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes of a token sequence (special tokens as their UTF-8 text)."""
        dec = self._decoder
        try:
            return b"".join([dec[i] for i in ids])
        except KeyError as e:
            raise ValueError(f"token id {e.args[0]!r} is not in the vocabulary (size {self.vocab_size})") from None
        except TypeError:
            raise TypeError("decode expects a sequence of int token ids") from None

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Text of a token sequence; bytes that are not valid UTF-8 become U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    # ---- training ---------------------------------------------------------------

    @classmethod
    def train(
        cls,
        inputs: str | os.PathLike | Iterable[str | os.PathLike] | None = None,
        vocab_size: int = 4096,
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
        from .train import train_tokenizer

        return train_tokenizer(cls, inputs, None, vocab_size, pattern, special_tokens,
                               min_frequency, workers, verbose, progress)

    @classmethod
    def train_from_iterator(
        cls,
        texts: Iterable[str],
        vocab_size: int = 4096,
        pattern: str = GPT4_PATTERN,
        special_tokens: Iterable[str] | Mapping[str, int] = (),
        min_frequency: int = 1,
        workers: int | None = None,
        verbose: bool = False,
        progress: bool | None = None,
    ) -> "Tokenizer":
        """Train on an iterable of texts (each one document); same trainer as ``train``."""
        from .train import train_tokenizer

        if isinstance(texts, str):
            texts = [texts]
        return train_tokenizer(cls, None, texts, vocab_size, pattern, special_tokens,
                               min_frequency, workers, verbose, progress)

    @classmethod
    def from_merges(
        cls,
        merges: list[tuple[int, int]],
        pattern: str = GPT4_PATTERN,
        special_tokens: Mapping[str, int] | None = None,
    ) -> "Tokenizer":
        """A tokenizer whose ids 0..255 are the bytes and merge k makes id 256 + k."""
        vocab = [bytes([i]) for i in range(256)]
        for k, (a, b) in enumerate(merges):
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
        from .formats import save_json

        save_json(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Tokenizer":
        """Read a file written by ``save``."""
        from .formats import load_json

        return load_json(cls, path)

    @classmethod
    def from_tiktoken(
        cls,
        path: str | os.PathLike,
        pattern: str = GPT4_PATTERN,
        special_tokens: Mapping[str, int] | None = None,
    ) -> "Tokenizer":
        """Read a ``.tiktoken`` file (base64 token, space, rank per line); ranks stay ids."""
        from .formats import load_tiktoken_ranks

        return cls(load_tiktoken_ranks(path), pattern, special_tokens)

    def save_tiktoken(self, path: str | os.PathLike) -> None:
        """Write the mergeable tokens as a ``.tiktoken`` file (special tokens are not part of it)."""
        from .formats import save_tiktoken

        save_tiktoken(self, path)

    @classmethod
    def from_gpt2_files(
        cls,
        encoder_json: str | os.PathLike,
        vocab_bpe: str | os.PathLike,
        pattern: str | None = None,
    ) -> "Tokenizer":
        """Read GPT-2's ``encoder.json`` + ``vocab.bpe`` (ids as in encoder.json)."""
        from .hf import load_gpt2_files

        return load_gpt2_files(cls, encoder_json, vocab_bpe, pattern)

    def save_gpt2_files(self, encoder_json: str | os.PathLike, vocab_bpe: str | os.PathLike) -> None:
        """Write GPT-2's ``encoder.json`` + ``vocab.bpe`` (trained tokenizers only)."""
        from .hf import save_gpt2_files

        save_gpt2_files(self, encoder_json, vocab_bpe)

    def save_huggingface(self, path: str | os.PathLike) -> None:
        """Write a Hugging Face ``tokenizer.json`` (byte-level BPE) that encodes like this one."""
        from .hf import save_huggingface

        save_huggingface(self, path)
