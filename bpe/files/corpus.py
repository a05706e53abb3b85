"""Where training text comes from: the default corpus, input paths, streamed file blocks.

- ``default_corpus_files()``: the running Python's standard-library ``.py`` sources
  (site-packages excluded), sorted by path, so every machine with the same Python
  builds the same corpus without a download.
- ``expand_inputs(paths)``: files, folders (recursively, hidden entries and binary files
  skipped) and glob patterns to a de-duplicated list of files; a path that matches nothing
  is an error naming it. ``bpe train`` and ``gpt`` read their inputs through it.
- ``read_blocks(path, ...)``: a file as text blocks of a few MB, cut only after a
  newline that is followed by a letter or digit (a chunk boundary for every built-in
  split pattern), so a file of any size streams in bounded memory. Bytes that are not
  UTF-8 become U+FFFD, with a warning naming the file and the byte offset.
- ``block_ranges(files, sizes)``: the files as byte ranges of about a block, which
  ``read_blocks`` turns into text that tiles each file: the shares of counting processes.
"""
from __future__ import annotations

import glob
import os
import sysconfig
import warnings
from pathlib import Path
from typing import Iterable, Iterator

BLOCK_BYTES = 4 << 20  # 4 MiB: large enough to amortise per-block work, small in memory


def default_corpus_files() -> list[Path]:
    """The standard library's own ``.py`` files of the running interpreter, sorted by path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if "site-packages" not in p.parts and p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def looks_binary(path: str | os.PathLike) -> bool:
    """True when the file's first 8 KiB hold a NUL byte (git's rule): not text to train on."""
    try:
        with open(path, "rb") as f:
            return b"\0" in f.read(8192)
    except OSError:
        return False  # unreadable: reading it later names the file in its error


def _walk(folder: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out.extend(Path(dirpath) / f for f in sorted(filenames) if not f.startswith("."))
    return out


def _expand_one(raw) -> tuple[list[Path], bool]:
    """The files one input names, and whether they were found (a folder or glob) rather than named."""
    if not str(raw):  # Path("") is the current folder
        raise FileNotFoundError("an input path is empty")
    p = Path(raw)
    if p.is_dir():
        return _walk(p), True
    if p.is_file():
        return [p], False
    if glob.has_magic(str(raw)):
        found = []
        for m in sorted(glob.glob(str(raw), recursive=True)):
            mp = Path(m)
            found.extend(_walk(mp) if mp.is_dir() else [mp])
        if not found:
            raise FileNotFoundError(f"input glob {str(raw)!r} matches no file")
        return found, True
    if p.exists():
        raise ValueError(f"input {str(raw)!r} is neither a regular file nor a folder")
    hint = ""
    if isinstance(raw, str) and (len(raw) > 255 or "\n" in raw):
        hint = " (it looks like text: to train on texts, use Tokenizer.train_from_iterator)"
    shown = str(raw) if len(str(raw)) <= 80 else str(raw)[:77] + "..."
    raise FileNotFoundError(f"input file {shown!r} does not exist{hint}")


def expand_inputs(paths: str | os.PathLike | Iterable[str | os.PathLike], skip_binary: bool = True,
                  skipped: list[Path] | None = None) -> list[Path]:
    """Files, folders and globs -> a list of files (in the order given, each folder sorted).

    Folders are walked recursively, hidden entries skipped. With ``skip_binary``, files found
    in a folder or by a glob that look binary (``looks_binary``) are skipped; a file named
    itself is always kept (``skipped``, when given, receives the binary files left out). A link to
    nothing found in a folder or by a glob is left out. A file reached twice (also through another
    spelling of its path or a link) is listed once, where it first appears. Raises FileNotFoundError naming the
    first path that is missing or matches nothing.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[Path] = []
    seen: set[str] = set()
    for raw in paths:
        found, searched = _expand_one(raw)
        for f in found:
            key = os.path.realpath(f)
            if key in seen or searched and not os.path.exists(key):  # a link to nothing, found
                continue
            if searched and skip_binary and looks_binary(f):
                if skipped is not None:
                    skipped.append(f)
                seen.add(key)
                continue
            seen.add(key)
            out.append(f)
    return out


def file_sizes(files: Iterable[str | os.PathLike]) -> list[int]:
    """Each file's size in bytes; an unreadable file is an OSError that names it."""
    sizes = []
    for f in files:
        try:
            sizes.append(os.path.getsize(f))
        except OSError as e:
            raise OSError(f"cannot read corpus file {str(f)!r}: {e.strerror or e}") from None
    return sizes


def block_ranges(files: Iterable[str | os.PathLike], sizes: Iterable[int]) -> list[tuple[str, int, int]]:
    """``(path, start, end)`` byte ranges of BLOCK_BYTES (the last of a file shorter; an empty
    file one empty range) that tile each file: ``read_blocks(path, start, end)`` of them gives
    the file's text exactly once."""
    return [(str(f), s, min(s + BLOCK_BYTES, size)) for f, size in zip(files, sizes)
            for s in range(0, max(size, 1), BLOCK_BYTES)]


def _first_cut(f, q: int, size: int, step: int = 1 << 16) -> int:
    r"""Offset of the first cut at or after ``q``, or ``size`` when there is none.

    A cut is just after a newline with a printable ASCII byte (not a space) before it and an
    ASCII letter or digit after it. Such a newline is a chunk of its own (or ends one, as in
    GPT-4's ":\n") under every pattern of bpe.split.patterns, so pre-tokenizing the two sides apart
    gives the chunks of the whole. Whitespace before it would not do: GPT-2's ``\s+(?!\S)``
    splits "\n\nclass" into "\n", "\n" but keeps a block's final "\n\n" whole.
    """
    if q <= 0:
        return 0
    if q >= size:
        return size
    base = max(q - 2, 0)  # one byte of look-behind for a newline at q - 1
    f.seek(base)
    buf = b""
    while True:
        more = f.read(step)
        buf += more
        i = buf.find(b"\n", q - 1 - base if q - 1 > base else 0)
        while i != -1 and i + 1 < len(buf):
            if i >= 1 and 0x20 < buf[i - 1] < 0x7F and buf[i + 1 : i + 2].isalnum():
                return base + i + 1
            i = buf.find(b"\n", i + 1)
        if not more:
            return size
        # Keep the last two bytes: a trailing newline whose next byte is not read yet, and
        # the byte before it.
        keep = min(2, len(buf))
        base += len(buf) - keep
        buf = buf[len(buf) - keep :]


class _Decoder:
    """UTF-8 decoding that replaces bad bytes and warns once per file, naming the offset."""

    def __init__(self, path: Path):
        self.path = path
        self.warned = False

    def __call__(self, data: bytes, offset: int) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            if not self.warned:
                self.warned = True
                warnings.warn(
                    f"{self.path}: bytes that are not UTF-8 at byte offset {offset + e.start} "
                    "(and maybe later); decoded with replacement characters (U+FFFD)",
                    UnicodeWarning,
                    stacklevel=3,
                )
            return data.decode("utf-8", errors="replace")


def read_blocks(
    path: str | os.PathLike, start: int = 0, end: int | None = None, block_bytes: int = BLOCK_BYTES,
    pattern: str | None = None,
) -> Iterator[str]:
    """Yield the text of ``path`` in blocks of about ``block_bytes``, cut at chunk-safe newlines.

    Each block pre-tokenizes (and so encodes) exactly as it does within the whole file, under
    every built-in split pattern (``pattern`` None or a built-in one). Under any other pattern
    no cut is provably safe, so the file is one block.

    With ``start``/``end`` (byte offsets) only the part of the file owned by that range is
    read: from the first cut at or after ``start`` to the first cut at or after ``end``,
    so ranges that tile ``[0, size)`` tile the text exactly. A file without any cut is one
    block.
    """
    from ..split.patterns import has_safe_cuts

    if pattern is not None and not has_safe_cuts(pattern):
        block_bytes = 1 << 62
        start, end = (0, None) if start <= 0 else (1 << 62, None)  # the first range owns the file
    path = Path(path)
    decode = _Decoder(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise OSError(f"cannot read corpus file {str(path)!r}: {e.strerror or e}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        end = size if end is None else min(end, size)
        pos = _first_cut(f, start, size)
        stop = _first_cut(f, end, size)
        while pos < stop:
            q = stop if stop - pos <= block_bytes else _first_cut(f, pos + block_bytes, size)
            f.seek(pos)
            data = f.read(q - pos)
            if len(data) != q - pos:
                raise OSError(f"corpus file {str(path)!r} changed while it was being read")
            yield decode(data, pos)
            pos = q
