"""An export's output put in place as a unit, under a lock: a whole folder (a Hugging Face
export) or one file (GGUF).

A folder is built in a hidden temp folder beside it, `.<name>.tmp-<pid>`, on the same file
system, then swapped in: the old folder is renamed aside to `.<name>.old-<pid>`, the new one
renamed in, the old one removed. A SIGKILL at any point leaves the old complete folder or the
new one: where it struck between the two renames, the next export or read of the folder puts
the old one back. The lock is a file beside the target, `.<name>.lock` (bpe.files.lock.FolderLock),
since the folder itself is replaced; whoever holds it knows that every leftover temp or old
folder is a dead writer's, and removes it. A file is written by bpe.files.atomic under the
same lock, which removes the `.<name>.<hex>.tmp` files killed writers left.
"""
from __future__ import annotations

import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from bpe.files.atomic import fsync_folder
from bpe.files.lock import FolderBusy, FolderLock


def _reached(point: str) -> None:
    """A named step of the swap ("built", "aside", "swapped"); tests replace it to kill the
    writer there."""


def _named(target: str | os.PathLike) -> Path:
    """`target` with a name of its own to rename and to put beside ("." and ".." made absolute)."""
    target = Path(target)
    return target if target.name not in ("", "..") else Path(os.path.abspath(target))


def _lock(target: Path, what: str) -> FolderLock:
    return FolderLock(target, what, lock_file=target.parent / f".{target.name}.lock")


def _leftovers(target: Path, kind: str) -> list[Path]:
    """The `.<name>.<kind>-<pid>` folders beside `target`, oldest first."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.{kind}-\d+")
    found = [p for p in target.parent.iterdir() if pattern.fullmatch(p.name)] if target.parent.is_dir() else []
    return sorted(found, key=lambda p: p.stat().st_mtime)


def _recover(target: Path) -> None:
    """Under the lock: put the old folder back where a killed swap left none, remove the rest."""
    old = _leftovers(target, "old")
    if old and not target.exists():
        os.rename(old.pop(), target)
        fsync_folder(target.parent)
    for p in old + _leftovers(target, "tmp"):
        shutil.rmtree(p, ignore_errors=True)


def restore(target: str | os.PathLike) -> bool:
    """Put back the folder a killed export had renamed aside; whether one was put back. A live
    exporter (it holds the lock) is left to finish."""
    target = _named(target)
    if target.exists() or not _leftovers(target, "old"):
        return False
    try:
        with _lock(target, "export folder"):
            _recover(target)
    except FolderBusy:
        return False
    return target.exists()


def _check_replaceable(target: Path, names: frozenset[str]) -> None:
    """Refuse to replace what is not an export of ours: a file, or a folder holding other names."""
    if not target.exists() and not target.is_symlink():
        return
    if target.is_symlink() or not target.is_dir():
        raise FileExistsError(f"{str(target)!r} exists and is not a folder; choose a new or empty folder")
    for p in sorted(target.iterdir()):
        if p.name not in names and not re.fullmatch(r"\..+\.tmp|\.lock", p.name):
            raise FileExistsError(f"{str(target)!r} holds {p.name!r}, which an export does not write, and "
                                  "would be replaced whole; choose a new or empty folder")


@contextmanager
def new_folder(target: str | os.PathLike, names: frozenset[str]) -> Iterator[Path]:
    """`with new_folder(dir, names) as tmp:` write the files into `tmp`; on leaving, `dir` becomes
    exactly those files, as a unit. names: the files an export writes (a folder holding anything
    else is refused). On an error nothing changes."""
    target = _named(target)
    with _lock(target, "export folder"):
        _recover(target)
        _check_replaceable(target, names)
        tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
        tmp.mkdir()
        try:
            yield tmp
            fsync_folder(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _reached("built")
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        if target.exists():
            os.rename(target, old)
            _reached("aside")
        os.rename(tmp, target)
        fsync_folder(target.parent)
        _reached("swapped")
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def locked_file(target: str | os.PathLike, magic: bytes) -> Iterator[Path]:
    """`with locked_file(file, b"GGUF"):` write `file` atomically, with no other exporter at it
    and the temp files of killed ones removed; an existing file that does not start with
    `magic` (not an export of this kind) is refused."""
    target = _named(target)
    with _lock(target, "export file"):
        pattern = re.compile(rf"\.{re.escape(target.name)}\.[0-9a-f]+\.tmp")
        for p in target.parent.iterdir():
            if pattern.fullmatch(p.name):
                p.unlink(missing_ok=True)
        if target.is_dir():
            raise FileExistsError(f"{str(target)!r} is a folder; a GGUF export is one file")
        if target.exists():
            with open(target, "rb") as f:
                if f.read(len(magic)) != magic:
                    raise FileExistsError(f"{str(target)!r} exists and is not a {magic.decode()} file; "
                                          "choose another file name")
        yield target
