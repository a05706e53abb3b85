"""The built-in corpus of `gpt train` with no arguments: the Python standard library's sources.

It needs no download: the running interpreter's own `.py` files (bpe.files.corpus finds them). A
fixed-seed shuffle picks files from every corner of the library up to a character budget, so
the tokenizer and the model see varied code and the preparation takes seconds. The prepared
folder is cached under `runs/_data/` keyed by everything that shapes it, so a second run skips
the tokenizer and the encoding.
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

DEFAULT_MAX_CHARS = 3_000_000
TOKENIZER_MAX_CHARS = 1_500_000


def default_files(max_chars: int = DEFAULT_MAX_CHARS, seed: int = 0) -> list[Path]:
    """Standard-library source files, shuffled with `seed`, about `max_chars` characters in all."""
    from bpe import default_corpus_files

    # encodings/ is mostly generated code-page tables: little to learn about Python there.
    files = sorted(Path(p) for p in default_corpus_files() if "encodings" not in Path(p).parts)
    if not files:
        raise RuntimeError("found no Python standard-library sources to train on; give --input PATH")
    random.Random(seed).shuffle(files)
    chosen, total = [], 0
    for f in files:
        size = f.stat().st_size
        if size == 0:
            continue
        chosen.append(f)
        total += size
        if total >= max_chars:
            break
    return chosen


def default_data_dir(runs_root: str | Path, vocab_size: int, char: bool = False,
                     max_chars: int | None = None, val_fraction: float = 0.1,
                     workers: int | None = None, verbose: bool = True) -> Path:
    """A prepared data folder of the default corpus (made now, or found in the cache)."""
    from gpt.data.folder import INCOMPLETE_FILE, META_FILE
    from gpt.data.prepare import prepare
    from gpt.files import FolderLock

    max_chars = max_chars or DEFAULT_MAX_CHARS
    files = default_files(max_chars)
    key_src = json.dumps({"python": sys.version, "files": [str(f) for f in files],
                          "sizes": [f.stat().st_size for f in files], "vocab_size": vocab_size,
                          "char": char, "max_chars": max_chars, "val_fraction": val_fraction,
                          "format": 1})
    key = hashlib.sha256(key_src.encode()).hexdigest()[:12]
    out = Path(runs_root) / "_data" / f"stdlib-{'char' if char else vocab_size}-{key}"
    # Runs started together share the cache: one prepares it, the others wait and reuse it.
    with FolderLock(out, "the default corpus's data folder", wait=True):
        if (out / META_FILE).is_file() and not (out / INCOMPLETE_FILE).exists():
            if verbose:
                print(f"data: reusing the prepared standard-library corpus in {out}")
            return out
        if verbose:
            print(f"data: {len(files)} files of the Python standard library "
                  f"({sum(f.stat().st_size for f in files) / 1e6:.1f} MB) -> {out}")
        prepare(files, out, vocab_size=vocab_size, char=char, val_fraction=val_fraction,
                workers=workers, max_chars=max_chars,
                tokenizer_max_chars=min(max_chars, TOKENIZER_MAX_CHARS), verbose=verbose)
    return out
