"""Several files written as one set: ``bpe train``'s outputs, a ``.tiktoken`` file and its side file.

The files of one tokenizer (``--out``, ``--tiktoken-out`` and its side file, ``--hf-out``) must
encode alike, so ``write_together`` writes them as a unit:

1. it takes a lock per output file (``lock.FolderLock`` on ``.<name>.lock`` beside it): a second
   writer of any of the same files is refused, naming the holder's pid;
2. it removes the hidden temp files that killed writers of these files left
   (``.bpe-new.<name>.<random>.tmp``: only a holder of the file's lock makes them);
3. it writes every file to such a temp file beside its target and fsyncs each: a full disk or a
   kill here leaves the old set whole and no temp file once the next writer has run;
4. only then it renames the temps over the targets, one after the other, and fsyncs the folders.

POSIX renames one file atomically, not several, so a kill between two renames of step 4 would
leave a mix; that window is a few renames long (microseconds, no data written in it), where
before it was the whole of writing every file. Tests pause a writer between steps 3 and 4 with
``BPE_TEST_PAUSE_BEFORE_RENAME=<seconds>`` (it prints one line to stderr first).
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .atomic import create_temp, existing_folder, fsync_folder
from .lock import FolderLock

TEMP_PREFIX = ".bpe-new."
PAUSE_ENV = "BPE_TEST_PAUSE_BEFORE_RENAME"


def output_lock(path: str | os.PathLike) -> FolderLock:
    """The lock of one output file: ``.<name>.lock`` beside it."""
    path = Path(path)
    return FolderLock(path, "output file", lock_file=path.parent / f".{path.name}.lock")


def _remove_stale(path: Path) -> None:
    """Remove temps of ``path`` left by killed writers (the caller holds ``path``'s lock)."""
    for stale in path.parent.glob(f"{TEMP_PREFIX}{path.name}.*.tmp"):
        try:
            stale.unlink()
        except OSError:
            pass


def _write_temp(path: Path, data: bytes) -> Path:
    tmp = create_temp(path.parent, path.name, TEMP_PREFIX)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, f"cannot write {str(path)!r}: {e.strerror or e}; no output file was "
                               "changed") from None
    return tmp


@contextmanager
def locked(paths: Iterable[str | os.PathLike]):
    """Hold the locks of the output files ``paths`` (their folders must exist); re-entrant."""
    paths = sorted({Path(p) for p in paths}, key=str)  # one order for every writer
    for p in paths:
        existing_folder(p)  # and p no folder
    with ExitStack() as held:
        for p in paths:
            held.enter_context(output_lock(p))
        yield


def write_together(texts: Mapping[str | os.PathLike, str]) -> None:
    """Write each path's text (UTF-8) as one set: all old or all new (see the module docstring)."""
    files = {Path(p): t.encode("utf-8") for p, t in texts.items()}
    with locked(files):
        temps: dict[Path, Path] = {}
        try:
            for p, data in files.items():
                _remove_stale(p)
                temps[p] = _write_temp(p, data)
            if os.environ.get(PAUSE_ENV):
                print(f"bpe: pausing before the renames ({PAUSE_ENV})", file=sys.stderr, flush=True)
                time.sleep(float(os.environ[PAUSE_ENV]))
            for p in list(temps):
                os.replace(temps.pop(p), p)
        finally:
            for tmp in temps.values():  # not renamed: an error or Ctrl-C before step 4 ended
                tmp.unlink(missing_ok=True)
        for folder in {existing_folder(p) for p in files}:
            fsync_folder(folder)
