"""Reading and writing the text and JSON files of bpe, with errors that name the file and field.

``read_text`` and ``read_json`` turn every failure (a missing file, bytes that are not UTF-8, a
JSON syntax error, a 5,000-digit number, nesting deeper than the stack) into one OSError or
ValueError that names the file; ``token_id`` checks an id field and ``write_json`` writes a
value atomically.
"""
from __future__ import annotations

import json
import os

from .atomic import atomic_write_text

MAX_ID = (1 << 31) - 1  # ids fit an int32, as in every array of token ids downstream


def read_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of ``path``, ``what`` naming the kind of file in errors."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise type(e)(e.errno, f"cannot read {what} {str(path)!r}: {e.strerror}") if e.errno else e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: {what} is not UTF-8 text (bad byte at offset {e.start})") from None


def read_json(path: str | os.PathLike, what: str):
    """A JSON file's value; every failure is one OSError or ValueError that names the file."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}"
                         " - is the file truncated?") from None
    except (ValueError, RecursionError) as e:  # int() digit limit, nesting deeper than the stack
        raise ValueError(f"{path}: {what} cannot be read as JSON: {str(e)[:120] or type(e).__name__}") from None


def write_json(path: str | os.PathLike, value) -> None:
    """Write ``value`` as JSON (indented by one, non-ASCII text as it is, a newline at the end),
    atomically."""
    atomic_write_text(path, json.dumps(value, ensure_ascii=False, indent=1) + "\n")


def token_id(v, where: str) -> int:
    """``v`` checked as a token id (an int from 0 to MAX_ID); ``where`` names the field in errors."""
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_ID:
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
        raise ValueError(f"{where} must be an int id from 0 to {MAX_ID}, got {shown}")
    return v
