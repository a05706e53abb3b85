"""Atomic file writes: a temp file in the same folder, fsync, rename over the target, fsync the folder.

A crash or a full disk leaves either the old file or the new one, never half of one. The file
gets the mode any file the user writes gets (0666 less the umask), not ``mkstemp``'s 0600, so
a tokenizer sits in a shared folder like the files beside it.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path


def _create_temp(folder: Path, name: str) -> tuple[int, Path]:
    """A new file ``.<name>.<random>.tmp`` opened for writing; O_EXCL, so never someone else's."""
    while True:
        tmp = folder / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            # The kernel applies the umask to 0o666, as for open(path, "w").
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (not possible on every system: then skipped)."""
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write {str(path)!r}: folder {str(folder)!r} does not exist")
    fd, tmp = _create_temp(folder, path.name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_folder(folder)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
