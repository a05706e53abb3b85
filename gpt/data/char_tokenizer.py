"""A character-level tokenizer, the one nanoGPT's `shakespeare_char` uses: one id per character.

It mirrors the small part of `bpe.Tokenizer` that the data pipeline, the training loop and the
sampler use (`encode`, `encode_ordinary`, `decode`, `vocab_size`, `save`, `load`), so
`gpt prepare --char` writes the same nanoGPT layout as a BPE run. Ids are given to the sorted
distinct characters of the corpus, then to the special tokens.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Sequence

FORMAT = "fromscratch-gpt/char-tokenizer"


class CharTokenizer:
    """`chars[i]` has id i; special tokens follow the characters."""

    def __init__(self, chars: Sequence[str], special_tokens: Sequence[str] = ()):
        chars = list(chars)
        if len(set(chars)) != len(chars) or any(len(c) != 1 for c in chars):
            raise ValueError("CharTokenizer needs distinct single characters")
        self.chars = chars
        self.special_tokens = {s: len(chars) + i for i, s in enumerate(special_tokens)}
        self._stoi = {c: i for i, c in enumerate(chars)}
        self._itos = chars + list(self.special_tokens)

    @classmethod
    def train(cls, texts: Iterable[str], special_tokens: Sequence[str] = ()) -> "CharTokenizer":
        """The sorted set of characters that occur in `texts`."""
        seen: set[str] = set()
        for text in texts:
            seen.update(text)
        return cls(sorted(seen), special_tokens)

    @property
    def vocab_size(self) -> int:
        return len(self._itos)

    def encode_ordinary(self, text: str) -> list[int]:
        try:
            return [self._stoi[c] for c in text]
        except KeyError as exc:
            raise ValueError(
                f"character {exc.args[0]!r} is not in this character-level vocabulary "
                f"of {len(self.chars)} characters"
            ) from None

    def encode(self, text: str, allowed_special="all") -> list[int]:
        specials = self.special_tokens
        if allowed_special != "all":
            specials = {s: i for s, i in specials.items() if s in set(allowed_special)}
        if not specials:
            return self.encode_ordinary(text)
        ids: list[int] = []
        i, n = 0, len(text)
        while i < n:
            # The earliest special token wins; the text before it is ordinary characters.
            hits = [(text.find(s, i), s) for s in specials]
            hits = [(pos, s) for pos, s in hits if pos >= 0]
            if not hits:
                ids.extend(self.encode_ordinary(text[i:]))
                break
            pos, s = min(hits, key=lambda h: (h[0], -len(h[1])))
            ids.extend(self.encode_ordinary(text[i:pos]))
            ids.append(specials[s])
            i = pos + len(s)
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        n = len(self._itos)
        return "".join(self._itos[i] if 0 <= i < n else "\ufffd" for i in map(int, ids))

    def to_dict(self) -> dict:
        return {"format": FORMAT, "chars": self.chars, "special_tokens": list(self.special_tokens)}

    def save(self, path: str | os.PathLike) -> None:
        from bpe.files.atomic import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def from_dict(cls, d: dict, source: str = "<dict>") -> "CharTokenizer":
        if d.get("format") != FORMAT or not isinstance(d.get("chars"), list):
            raise ValueError(f"{source} is not a character-level tokenizer file (format {FORMAT!r})")
        return cls(d["chars"], d.get("special_tokens", []))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CharTokenizer":
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")), str(path))
