"""Files of run folders and data folders: a write that could not complete, why a path given as a
file cannot be read as one, and numbers made fit for JSON. (One writer at a time is
bpe.files.lock's FolderLock; atomic writes are bpe.files.atomic's.)"""
from __future__ import annotations

import math
import os
from pathlib import Path


class WriteFailed(OSError):
    """A write that could not complete (a full disk); the message says what was kept."""


def not_a_file(path: str | os.PathLike) -> str | None:
    """Why `path` cannot be read as a file ("does not exist", "is a folder, not a file", ...), or
    None when it is a regular file."""
    p = Path(path)
    if p.is_file():
        return None
    if p.is_dir():
        return "is a folder, not a file"
    return "is not a regular file (a device, pipe or socket)" if p.exists() else "does not exist"


def read_text_file(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of `path`; an error names `what` and the file and says what is wrong."""
    why = not_a_file(path)
    if why:
        raise FileNotFoundError(f"{what} {str(path)!r} {why}")
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
                         f"offset {exc.start})") from None


def json_safe(value):
    """`value` (dicts, lists and tuples of them, nested) with every non-finite float as None: JSON
    has no NaN or Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
