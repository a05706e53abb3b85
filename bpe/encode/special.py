"""Encoding, special tokens: tiktoken's policy (which special-token text becomes its id, which is
refused), and texts that hold them.

``allowed_special``: the special tokens whose text in the input becomes their id: ``"all"``
or a set of their strings (default: none). ``disallowed_special``: strings whose presence in
the input raises ``DisallowedSpecialError``: ``"all"`` (every special token not allowed, the
default) or a collection of strings (``()`` encodes special-token text as ordinary text).
Any other string is refused: ``"none"`` is not read as the set of its characters.

``encode_with_specials`` encodes texts that hold allowed special tokens: the ordinary text between
them all together, each special token's id in its place (``Tokenizer.encode`` and ``encode_batch``).
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import AbstractSet, Literal

import regex

from .piece_encoder import extend_all

Allowed = Literal["all"] | AbstractSet[str]
Disallowed = Literal["all"] | Collection[str]


class DisallowedSpecialError(ValueError):
    """Special-token text found in text that is not allowed to hold it."""

    def __init__(self, token: str, position: int):
        self.token = token
        self.position = position
        super().__init__(
            f"Encountered text corresponding to disallowed special token {token!r} at character "
            f"{position}. To encode it as the special token, pass allowed_special={{{token!r}}} (or "
            "allowed_special='all'); to encode it as ordinary text, pass disallowed_special=()."
        )

    def __reduce__(self):  # pickled by its fields, so that it crosses from a worker process
        return type(self), (self.token, self.position)


def check_special_token(s) -> None:
    """A special token is a non-empty str that is text: ValueError otherwise (a lone surrogate
    has no UTF-8, so the token could be neither decoded nor written)."""
    if not isinstance(s, str) or not s:
        raise ValueError(f"special tokens must be non-empty strings, got {s!r}")
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"special token {s!r} holds a lone surrogate, which is no text (not UTF-8)") from None


def _as_set(value, name: str) -> set[str]:
    if isinstance(value, str):
        hint = " (the default)" if name == "allowed_special" else ""
        raise ValueError(f"{name} must be 'all' or a collection of special-token strings, got the string "
                         f"{value!r}; for none, pass set(){hint}")
    try:
        out = set(value)
    except TypeError:
        raise TypeError(f"{name} must be 'all' or a collection of strings, got {type(value).__name__}") from None
    bad = [s for s in out if not isinstance(s, str)]
    if bad:
        raise TypeError(f"{name} must hold strings, got {bad[0]!r}")
    return out


def special_policy(specials: Mapping[str, int], allowed_special: Allowed,
                   disallowed_special: Disallowed) -> tuple[set[str], set[str]]:
    """(allowed, disallowed) as sets of strings, checked as tiktoken defines them."""
    allowed = set(specials) if allowed_special == "all" else _as_set(allowed_special, "allowed_special")
    unknown = allowed - set(specials)
    if unknown:
        raise ValueError(f"allowed_special names unknown special tokens: {sorted(unknown)}; "
                         f"this tokenizer has {sorted(specials)}")
    if disallowed_special == "all":
        disallowed = set(specials) - allowed
    else:
        disallowed = _as_set(disallowed_special, "disallowed_special")
    return allowed, disallowed


def check_disallowed(text: str, finder: regex.Pattern | None) -> None:
    """Raise DisallowedSpecialError at the first match of ``finder`` in ``text``."""
    if finder is not None:
        m = finder.search(text)
        if m:
            raise DisallowedSpecialError(m.group(), m.start())


def _join_lists(seqs: list) -> list[int]:
    out: list[int] = []
    extend_all(out, seqs)
    return out


def encode_with_specials(encode_many: Callable[[list[str]], list], texts: list[str],
                         finditer: Callable[[str], Iterator[regex.Match]], special: Mapping[str, int],
                         single: Callable[[int], Sequence] = lambda i: (i,),
                         join: Callable[[list], Sequence] = _join_lists) -> list:
    """The ids of each of ``texts``: the text between the special tokens that ``finditer`` finds (the
    allowed ones) encoded by ``encode_many`` all together, so that the new pieces of every part are
    merged together (a text of many documents between special tokens costs what one would); each
    special token's id (``special``) in its place. The ids are lists; or, with ``single`` (an id as
    a sequence of one) and ``join`` (sequences end to end), whatever ``encode_many`` gives."""
    parts: list[str] = []  # the ordinary text of every text, in order
    layouts: list[list[int | None]] = []  # per text: a special token's id, or None for the next part
    for t in texts:
        layout: list[int | None] = []
        pos = 0
        for m in finditer(t):
            if m.start() > pos:
                parts.append(t[pos:m.start()])
                layout.append(None)
            layout.append(special[m.group()])
            pos = m.end()
        if pos < len(t) or not layout:
            parts.append(t[pos:])
            layout.append(None)
        layouts.append(layout)
    ordinary = iter(encode_many(parts))
    return [next(ordinary) if layout == [None] else
            join([next(ordinary) if item is None else single(item) for item in layout]) for layout in layouts]
