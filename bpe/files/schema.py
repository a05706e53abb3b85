"""The types of the fields of parsed JSON files, checked where each file kind is read.

Each reader (``bpe_json``, ``tiktoken_file``'s side file, ``huggingface``) states its file's
shape through these helpers, and a wrong type or value is one ValueError that names the file
and the field by its path::

    tok.json: field 'special_tokens['<x>']' is a string, expected an int id
    tokenizer.json: field 'model.vocab['x']' is 1.5 (a number), expected an int id

``expect`` checks one value, ``member`` one field of an object, ``token_id`` an id. Ids are
bounded twice: by int32 (``MAX_ID``, as every array of ids downstream) and by ``id_limit``, the
largest id a vocabulary of n entries may use (n - 1 plus a slack), so that a 3 KB file cannot
claim id 10^8 and make an embedding of 10^8 rows downstream.
"""
from __future__ import annotations

import base64
import binascii

MAX_ID = (1 << 31) - 1  # ids fit an int32, as in every array of token ids downstream
ID_SLACK = 1024  # unused ids a vocabulary may hold (cl100k leaves 15 below its specials, o200k 18)
_REQUIRED = object()

_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an int", float: "a number",
          bool: "true or false", type(None): "null"}


def describe(v) -> str:
    """The JSON kind of ``v`` in words: 'a string', 'an object', ..."""
    return _NAMES.get(type(v), type(v).__name__)


def shown(v, limit: int = 40) -> str:
    """``repr(v)`` cut to ``limit`` characters (a 5,000-digit number stays short)."""
    r = repr(v)
    return r if len(r) <= limit else r[:limit - 3] + "..."


def at(field: str, key) -> str:
    """The path of an entry of ``field``: ``merges[3]``, ``special_tokens['<x>']``."""
    return f"{field}[{key}]" if isinstance(key, int) else f"{field}[{shown(key)}]"


def dot(field: str, key: str) -> str:
    """The path of a named field inside ``field``: ``model.vocab`` (``vocab`` at the top)."""
    return f"{field}.{key}" if field else key


def expect(v, kinds: type | tuple[type, ...], path, field: str):
    """``v`` if it is one of ``kinds`` (``int`` never takes a bool), else a ValueError naming it."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(v, kinds) and not (isinstance(v, bool) and bool not in kinds):
        return v
    want = " or ".join(_NAMES.get(k, k.__name__) for k in kinds)
    numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
    raise ValueError(f"{path}: field '{field}' is {f'{shown(v)} ({describe(v)})' if numeric else describe(v)}, "
                     f"expected {want}")


def member(d: dict, key: str, kinds, path, parent: str = "", default=_REQUIRED):
    """Field ``key`` of the object ``d`` (at ``parent``), checked by ``expect``; a missing field
    is ``default``, or an error when there is none."""
    if key not in d:
        if default is _REQUIRED:
            raise ValueError(f"{path}: field '{dot(parent, key)}' is missing")
        return default
    return expect(d[key], kinds, path, dot(parent, key))


def id_limit(n_ids: int) -> int:
    """The largest id a vocabulary of ``n_ids`` entries may use: ids are dense up to a slack."""
    return min(MAX_ID, n_ids - 1 + max(ID_SLACK, n_ids // 64))


def token_id(v, where: str, limit: int = MAX_ID) -> int:
    """``v`` checked as a token id, an int from 0 to ``limit``; ``where`` is "<file>: field '...'"."""
    if not isinstance(v, int) or isinstance(v, bool):
        value = f"{shown(v)} ({describe(v)})" if isinstance(v, float) else describe(v)
        raise ValueError(f"{where} is {value}, expected an int id")
    if not 0 <= v <= limit:
        why = "" if limit == MAX_ID else " (ids of a vocabulary stay near its number of entries)"
        raise ValueError(f"{where} is {shown(v)}, outside the ids 0..{limit:,}{why}")
    return v


def base64_token(text: str, where: str) -> bytes:
    """A token's bytes from its base64 text (our JSON's tokens, a .tiktoken line), checked."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):  # ValueError: characters that are not ASCII
        raise ValueError(f"{where}: invalid base64 token {text[:40]!r}") from None
