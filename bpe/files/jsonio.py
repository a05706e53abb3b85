"""Reading and writing the text and JSON files of bpe, with errors that name the file and field.

``read_text`` and ``read_json`` turn every failure (a missing file, a folder or a device given
as a file, bytes that are not UTF-8, a JSON syntax error, a key given twice, a 5,000-digit
number, nesting deeper than the stack) into one OSError or ValueError that names the file;
``json_text`` is how bpe writes JSON and ``write_json`` writes it atomically. The fields' types
are checked by the readers, through ``schema``.
"""
from __future__ import annotations

import json
import os
import stat

from .atomic import atomic_write_text


def _regular(path, what: str) -> None:
    """Refuse a folder or a device (``/dev/zero`` would be read forever) where a file belongs."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # open() says why, naming the file
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{str(path)!r} is a folder, not a {what}")
    if not stat.S_ISREG(mode):
        raise ValueError(f"{str(path)!r} is not a regular file (a device or a pipe), so it cannot be a {what}")


def read_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of ``path``, ``what`` naming the kind of file in errors."""
    _regular(path, what)
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
    return parse_json(read_text(path, what), path, what)


def parse_json(text: str, path, what: str):
    """The value of JSON ``text`` read from ``path``; errors name the file (a key given twice in
    one object too, which ``json`` would silently resolve to the last)."""
    def pairs(items):
        d = dict(items)
        if len(d) != len(items):
            seen = set()
            twice = next(k for k, _ in items if k in seen or seen.add(k))
            raise ValueError(f"{path}: key {twice[:40]!r} appears twice in one object of the {what}")
        return d

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}"
                         " - is the file truncated?") from None
    except ValueError as e:
        if str(e).startswith(f"{path}: key "):
            raise
        raise ValueError(f"{path}: {what} cannot be read as JSON: {str(e)[:120] or type(e).__name__}") from None
    except RecursionError as e:  # nesting deeper than the stack
        raise ValueError(f"{path}: {what} cannot be read as JSON: {str(e)[:120] or type(e).__name__}") from None


def json_text(value) -> str:
    """``value`` as bpe writes JSON: indented by one, non-ASCII text as it is, a newline at the end."""
    return json.dumps(value, ensure_ascii=False, indent=1) + "\n"


def write_json(path: str | os.PathLike, value) -> None:
    """Write ``json_text(value)`` atomically."""
    atomic_write_text(path, json_text(value))
