"""The types of config.json's fields, checked in one place before any is used.

A schema maps a field name to its `Kind` (or to a nested schema, for an object such as
`rope_parameters`); `checked(hf, schema, where)` refuses the first field of the wrong type with
its path: `config.json: field 'num_attention_heads' is 0, expected a positive int`. A field the
schema does not name is not read, so its type does not matter; a missing field is left to the
reader (its default, or `need`'s error).
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Union

from gpt.pretrained.families.family import UnsupportedModel


class Kind(NamedTuple):
    """What a field must be: `ok(value)` says whether it is, `expected` says so in words."""

    expected: str
    ok: Callable[[Any], bool]


Schema = dict[str, Union[Kind, "Nested"]]


class Nested(NamedTuple):
    """An object (or null) whose own fields follow `schema`."""

    schema: Schema


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    return (_int(v) or isinstance(v, float)) and math.isfinite(v)


POSITIVE_INT = Kind("a positive int", lambda v: _int(v) and v > 0)
POSITIVE_INT_OR_NULL = Kind("a positive int or null", lambda v: v is None or _int(v) and v > 0)
POSITIVE = Kind("a finite number > 0", lambda v: _finite(v) and v > 0)
NUMBER = Kind("a finite number", _finite)
FLAG = Kind("true or false", lambda v: isinstance(v, bool))
FLAG_OR_NULL = Kind("true, false or null", lambda v: v is None or isinstance(v, bool))
TEXT = Kind("a string", lambda v: isinstance(v, str))
TEXT_OR_NULL = Kind("a string or null", lambda v: v is None or isinstance(v, str))
TEXTS_OR_NULL = Kind("a list of strings or null",
                     lambda v: v is None or isinstance(v, list) and all(isinstance(s, str) for s in v))

# The fields every family's reader looks at before its own.
COMMON: Schema = {
    "architectures": TEXTS_OR_NULL, "model_type": TEXT, "vocab_size": POSITIVE_INT, "tie_word_embeddings": FLAG,
    "sliding_window": POSITIVE_INT_OR_NULL, "use_sliding_window": FLAG,
}


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def checked(obj: dict, schema: Schema, where: str, path: str = "") -> dict:
    """`obj` itself once every field the schema names has its type; UnsupportedModel naming
    the first that does not (by its dotted path)."""
    for key, kind in schema.items():
        if key not in obj:
            continue
        value, name = obj[key], path + key
        if isinstance(kind, Nested):
            if value is not None and not isinstance(value, dict):
                raise UnsupportedModel(f"{where}: field {name!r} is {_shown(value)}, expected an object or null")
            checked(value or {}, kind.schema, where, name + ".")
        elif not kind.ok(value):
            raise UnsupportedModel(f"{where}: field {name!r} is {_shown(value)}, expected {kind.expected}")
    return obj
