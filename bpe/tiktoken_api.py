"""tiktoken's names for what a Tokenizer already does, so that code written for
``tiktoken.Encoding`` runs on a Tokenizer unchanged.

A mixin of ``Tokenizer``: each member is one of its own calls under tiktoken's name, with
tiktoken's return types. Left out: ``encode_with_unstable`` (the completions of a text's last
piece).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

EOT = "<|endoftext|>"


class TiktokenAPI:
    """``n_vocab``, ``eot_token``, ``special_tokens_set``, ``is_special_token``,
    ``encode_single_token``, ``encode_to_numpy``, ``decode_single_token_bytes``,
    ``decode_tokens_bytes`` and ``token_byte_values``, as ``tiktoken.Encoding``'s."""

    @property
    def n_vocab(self) -> int:
        """One more than the largest id: ``vocab_size``."""
        return self.vocab_size

    @property
    def eot_token(self) -> int:
        """The id of ``<|endoftext|>``; KeyError when the tokenizer has no such special token."""
        try:
            return self._special[EOT]
        except KeyError:
            raise KeyError(f"this tokenizer has no {EOT} special token") from None

    @property
    def special_tokens_set(self) -> set[str]:
        return set(self._special)

    def is_special_token(self, token: int) -> bool:
        """Whether id ``token`` is a special token's."""
        return token in self._special.values()

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The id of the one token (mergeable or special) that spells ``text_or_bytes`` exactly;
        KeyError when none does."""
        b = text_or_bytes.encode("utf-8") if isinstance(text_or_bytes, str) else bytes(text_or_bytes)
        i = self._ranks.get(b)
        if i is None:
            try:
                i = self._special.get(b.decode("utf-8"))
            except UnicodeDecodeError:  # no special token's text
                pass
        if i is None:
            raise KeyError(text_or_bytes)
        return i

    def encode_to_numpy(self, text: str, *, allowed_special=frozenset(), disallowed_special="all") -> np.ndarray:
        """``encode``'s ids as a uint32 array (N,)."""
        return np.array(self.encode(text, allowed_special=allowed_special, disallowed_special=disallowed_special),
                        dtype=np.uint32)

    def decode_single_token_bytes(self, token: int) -> bytes:
        """``token_bytes(token)`` (ValueError for an id outside the vocabulary, where tiktoken raises
        KeyError)."""
        return self.token_bytes(token)

    def decode_tokens_bytes(self, tokens: Iterable[int]) -> list[bytes]:
        """The bytes of each token, in a list."""
        return [self.token_bytes(t) for t in tokens]

    def token_byte_values(self) -> list[bytes]:
        """Every mergeable token's bytes, sorted (as bytes)."""
        return sorted(self._ranks)
