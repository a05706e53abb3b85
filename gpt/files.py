"""Files of run folders and data folders: one writer at a time (atomic writes: bpe.files.atomic).

`FolderLock` makes a second process that would write the same folder stop with a message that
names the one already there. It holds an exclusive `flock` on `<folder>/.lock`, which the
kernel drops when the holder exits, however it exits (even SIGKILL): a lock left by a killed
process is stale by construction and the next writer takes it over at once. The file keeps the
holder's pid and command for the message.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

LOCK_FILE = ".lock"


class FolderBusy(RuntimeError):
    """Another process is writing this folder."""


class WriteFailed(OSError):
    """A write that could not complete (a full disk); the message says what was kept."""


class FolderLock:
    """`with FolderLock(folder, "run folder"):` ... writes no other process can interleave.

    wait=False: a folder in use is refused at once (FolderBusy, naming the holder); wait=True:
    block until the holder finishes (for a shared cache that the other process is filling).
    Re-entrant within one process: an inner lock of a folder this process holds is a no-op."""

    _held: dict[str, int] = {}  # resolved folder -> nesting depth, in this process

    def __init__(self, folder: str | os.PathLike, what: str = "folder", wait: bool = False):
        self.folder, self.what, self.wait = Path(folder), what, wait
        self._fd: int | None = None
        self._key: str | None = None

    def acquire(self) -> "FolderLock":
        import fcntl

        self.folder.mkdir(parents=True, exist_ok=True)
        self._key = str(self.folder.resolve())
        if self._key in FolderLock._held:
            FolderLock._held[self._key] += 1
            return self
        fd = os.open(self.folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip() or "another process"
            if not self.wait:
                os.close(fd)
                raise FolderBusy(f"{self.what} {str(self.folder)!r} is in use by {holder}; wait for it "
                                 "to finish or choose another folder") from None
            print(f"waiting for {holder}, which is writing {self.what} {self.folder}", file=sys.stderr)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} ({' '.join(sys.argv)[:200]})\n".encode(), 0)
        self._fd = fd
        FolderLock._held[self._key] = 1
        return self

    def release(self) -> None:
        if self._key is None or self._key not in FolderLock._held:
            return
        FolderLock._held[self._key] -= 1
        if FolderLock._held[self._key] == 0:
            del FolderLock._held[self._key]
            if self._fd is not None:
                os.close(self._fd)  # closing drops the flock; the file stays (removing it would race)
        self._fd, self._key = None, None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
