"""The built-in corpus of `gpt train` with no arguments: the Python standard library's sources.

It needs no download: the running interpreter's own `.py` files (bpe.files.corpus finds them),
less what teaches little about Python and much about numbers (the rule is `is_teaching_source`):
tests and their data, generated tables and code pages, very large files. A fixed-seed shuffle
picks files from every corner of what is left up to a character budget, so the tokenizer and
the model see varied code and the preparation takes seconds. The prepared folder is cached
under `runs/_data/` keyed by everything that shapes it, so a second run skips the tokenizer and
the encoding.
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

# All that is_teaching_source keeps (about 9.5 MB on CPython 3.11): encoding it takes seconds,
# and a tokenizer trained on all of it packs more bytes into a token than one trained on a part.
DEFAULT_MAX_CHARS = 10_000_000
# Folders of tests and test data, of generated code-page tables (encodings) and of pydoc's
# generated topic text: they teach little about Python and much about numbers and byte strings.
SKIPPED_FOLDERS = frozenset({"test", "tests", "idle_test", "encodings", "pydoc_data"})
MAX_FILE_BYTES = 200_000    # the few larger files would fill a slice alone
MAX_DIGIT_SHARE = 0.05      # above this a file is mostly a table of numbers (stringprep, entities)


def is_teaching_source(path: Path) -> bool:
    """Whether a standard-library file belongs in the default corpus: not in a test, test-data or
    generated folder, not a test* module, at most MAX_FILE_BYTES, ASCII digits at most
    MAX_DIGIT_SHARE of its bytes."""
    if SKIPPED_FOLDERS.intersection(path.parts[:-1]) or path.name.startswith("test"):
        return False
    try:
        data = path.read_bytes() if 0 < path.stat().st_size <= MAX_FILE_BYTES else b""
    except OSError:
        return False
    return bool(data) and sum(data.count(d) for d in b"0123456789") <= MAX_DIGIT_SHARE * len(data)


def default_files(max_chars: int = DEFAULT_MAX_CHARS, seed: int = 0) -> list[Path]:
    """Standard-library source files kept by is_teaching_source, shuffled with `seed`, about
    `max_chars` characters (bytes) in all."""
    from bpe import default_corpus_files

    files = sorted(p for p in map(Path, default_corpus_files()) if is_teaching_source(p))
    if not files:
        raise RuntimeError("found no Python standard-library sources to train on; give --input PATH")
    random.Random(seed).shuffle(files)
    chosen, total = [], 0
    for f in files:
        chosen.append(f)
        total += f.stat().st_size
        if total >= max_chars:
            break
    return chosen


def default_data_dir(runs_root: str | Path, vocab_size: int, char: bool = False,
                     max_chars: int | None = None, val_fraction: float = 0.1,
                     workers: int | None = None, verbose: bool = True) -> Path:
    """A prepared data folder of the default corpus (made now, or found in the cache)."""
    from gpt.data.folder import INCOMPLETE_FILE, META_FILE
    from gpt.data.prepare import prepare
    from bpe.files.lock import FolderLock

    max_chars = max_chars or DEFAULT_MAX_CHARS
    files = default_files(max_chars)
    key_src = json.dumps({"python": sys.version, "files": [str(f) for f in files],
                          "sizes": [f.stat().st_size for f in files], "vocab_size": vocab_size,
                          "char": char, "max_chars": max_chars, "val_fraction": val_fraction,
                          "format": 2})
    key = hashlib.sha256(key_src.encode()).hexdigest()[:12]
    out = Path(runs_root) / "_data" / f"stdlib-{'char' if char else vocab_size}-{key}"

    def ready() -> bool:  # a cached folder is never prepared again, so no lock is needed to reuse it
        if (out / META_FILE).is_file() and not (out / INCOMPLETE_FILE).exists():
            if verbose:
                print(f"data: reusing the prepared standard-library corpus in {out}")
            return True
        return False

    if ready():  # runs reading it hold it shared: taking it to write would wait for them
        return out
    # Runs started together share the cache: one prepares it, the others wait and reuse it.
    with FolderLock(out, "the default corpus's data folder", wait=True):
        if ready():
            return out
        if verbose:
            print(f"data: {len(files)} files of the Python standard library "
                  f"({sum(f.stat().st_size for f in files) / 1e6:.1f} MB; no tests, generated tables "
                  f"or number-heavy files) -> {out}")
        prepare(files, out, vocab_size=vocab_size, char=char, val_fraction=val_fraction,
                workers=workers, max_chars=max_chars, force=True, verbose=verbose)
    return out
