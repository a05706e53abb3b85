"""The project's atomic file writes: a temp file in the same folder, fsync, rename over the
target, fsync the folder.

A crash, a kill or a full disk leaves either the old file or the new one, never half of one.
The file gets the mode any file the user writes gets (0666 less the umask, which the kernel
applies when the temp file is created: no process-wide ``os.umask`` round trip, so threads may
write at once), not ``mkstemp``'s 0600, so a file sits in a shared folder like those beside it.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable


def create_temp(folder: Path, name: str, prefix: str = ".") -> Path:
    """A new empty file ``<prefix><name>.<random>.tmp``; O_EXCL, so never someone else's."""
    while True:
        tmp = folder / f"{prefix}{name}.{secrets.token_hex(6)}.tmp"
        try:
            # The kernel applies the umask to 0o666, as for open(path, "w").
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp


def fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (not possible on every system: then skipped)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def existing_folder(path: Path) -> Path:
    """The folder of the file ``path``, which must exist (FileNotFoundError naming both
    otherwise); ``path`` itself must not be a folder (IsADirectoryError)."""
    if path.is_dir() or not path.name:
        raise IsADirectoryError(f"cannot write {str(path)!r}: it is a folder")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write {str(path)!r}: folder {str(folder)!r} does not exist")
    return folder


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` to fill a temp file beside ``path``, then put it in place atomically.

    The temp file is named ``.<name>.<random>.tmp``; on any error (a full disk, Ctrl-C) it is
    removed and ``path`` is left as it was. Returns ``path`` as a Path."""
    path = Path(path)
    folder = existing_folder(path)
    tmp = create_temp(folder, path.name)
    try:
        write(str(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_folder(folder)
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically (newlines as they are, on every system)."""
    return atomic_write_bytes(path, text.encode("utf-8"))
