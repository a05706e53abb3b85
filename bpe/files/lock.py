"""One writer at a time: an exclusive ``flock`` on a lock file, which names its holder.

``FolderLock(folder, what)`` holds ``<folder>/.lock`` (or ``lock_file``, for an output that is
replaced whole); a second process that would take it stops with FolderBusy, naming the pid and
command of the one already there. The kernel drops a flock when its holder exits, however it
exits (even SIGKILL): a lock left by a killed process is stale by construction and the next
writer takes it over at once. ``bpe train`` holds one per output file (``write_set``); gpt's run,
data and export folders use the same class.

``shared=True`` takes a reader's lock instead: any number of readers hold it together (every
``gpt train`` on a data folder), and a writer (``gpt prepare``) is refused while one does. A
reader writes no name (readers would overwrite each other's); it clears a name a killed writer
left. A writer's name is also missing for a moment after it takes the lock and before it lets
go, so a refused process that finds no name asks the lock itself: a reader's lock granted means
no writer is there (then it takes the lock whole if nobody reads either: the writer let go);
else it reads the name again (or takes the lock, come free).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

LOCK_FILE = ".lock"
# A writer's name is missing from its lock file for a moment after it takes the lock and before
# it lets go: a refused process reads the file again this many times, this many seconds apart.
NAME_TRIES = 50
NAME_WAIT = 0.002


class FolderBusy(RuntimeError):
    """Another process is writing this folder (or output file)."""


class FolderLock:
    """``with FolderLock(folder, "run folder"):`` ... writes no other process can interleave.

    wait=False: a folder in use is refused at once (FolderBusy, naming the holder); wait=True:
    block until the holder finishes (for a shared cache that the other process is filling).
    Re-entrant within one process: an inner lock of a lock file this process holds is a no-op.
    shared=True: a reader's lock (see the module docstring)."""

    _held: dict[str, int] = {}  # resolved lock file -> nesting depth, in this process

    def __init__(self, folder: str | os.PathLike, what: str = "folder", wait: bool = False,
                 lock_file: str | os.PathLike | None = None, shared: bool = False):
        self.folder, self.what, self.wait, self.shared = Path(folder), what, wait, shared
        # beside the folder (or file) instead, for an output that is replaced whole
        self.lock_file = Path(lock_file) if lock_file is not None else self.folder / LOCK_FILE
        self._fd: int | None = None
        self._key: str | None = None

    def acquire(self) -> "FolderLock":
        import fcntl

        try:
            self.lock_file.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):  # the folder, or one above it, is a file
            raise FileExistsError(f"{self.what} {str(self.lock_file.parent)!r} cannot be made: it (or a folder "
                                  "above it) is a file") from None
        self._key = str(self.lock_file.resolve())
        if self._key in FolderLock._held:
            FolderLock._held[self._key] += 1
            return self
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o666)
        mode = fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd, mode)
            if holder is not None:  # else the lock came free meanwhile, and is this process's
                if not self.wait:
                    os.close(fd)
                    raise FolderBusy(f"{self.what} {str(self.folder)!r} is in use by {holder}; wait for "
                                     "it to finish or choose another folder") from None
                print(f"waiting for {holder}, which is using {self.what} {self.folder}", file=sys.stderr)
                fcntl.flock(fd, mode)
        os.ftruncate(fd, 0)
        if not self.shared:
            command = " ".join(sys.argv)[:200]  # a file name that is not UTF-8 stays readable
            os.pwrite(fd, f"process {os.getpid()} ({command})\n".encode("utf-8", "backslashreplace"), 0)
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
                if not self.shared:
                    os.ftruncate(self._fd, 0)  # no name outlives its holder
                os.close(self._fd)  # closing drops the flock; the file stays (removing it would race)
        self._fd, self._key = None, None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(fd: int, mode: int) -> str | None:
    """Who holds the lock that ``mode`` was refused on ``fd``: the name its writer wrote, or "a
    process that reads it" when only readers hold it (they write none). None when the lock came
    free while the name was missing (a writer letting go), and this process now holds it."""
    import fcntl
    import time

    for _ in range(NAME_TRIES):
        name = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        if name:
            return name
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return None
        except OSError:
            pass
        if mode == fcntl.LOCK_EX:  # a reader's lock granted now: no writer is there
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                pass
            else:  # the writer may have let go since the probe above: readers, or nobody?
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return None
                except OSError:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    return "a process that reads it"
        time.sleep(NAME_WAIT)  # a writer that has not written its name yet, or is letting go
    return "another process"
