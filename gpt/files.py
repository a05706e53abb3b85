"""Files of run folders and data folders: a write that could not complete. (One writer at a time
is bpe.files.lock's FolderLock; atomic writes are bpe.files.atomic's.)"""
from __future__ import annotations


class WriteFailed(OSError):
    """A write that could not complete (a full disk); the message says what was kept."""
