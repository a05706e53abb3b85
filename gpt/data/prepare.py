"""Token data on disk in nanoGPT's layout, and `prepare`, which writes it from text files.

A data folder holds
    train.bin, val.bin   flat token ids, uint16 (uint32 when the vocabulary exceeds 65,536 ids)
    meta.json            {"vocab_size", "dtype", "tokenizer": file name or null, "eot_id", ...}
    tokenizer.json       the tokenizer that wrote the ids (our bpe JSON or a character table)
Documents (one per input file) are separated by the end-of-text token, written after each one.
Every tenth document (for val_fraction=0.1, evenly spaced) goes to val.bin; with too few
documents for that, the last val_fraction of the tokens does instead.

`prepare` streams: files are read in blocks, large files are cut into pieces at line breaks
that are also pre-token boundaries (so the ids equal those of encoding the whole file), pieces
are encoded in worker processes with at most a few in flight, and ids go straight to disk.
"""
from __future__ import annotations

import collections
import glob
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from gpt.files import FolderLock, atomic_write_text

from gpt.data.folder import EOT, INCOMPLETE_FILE, META_FILE, SPLITS, TOKENIZER_FILE, eot_id, load_tokenizer, token_dtype


# ---- inputs ---------------------------------------------------------------------------------
def _looks_binary(path: Path) -> bool:
    with open(path, "rb") as f:
        return b"\0" in f.read(8192)


def expand_inputs(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """Files as given, folders walked recursively (sorted; hidden entries and binary files
    skipped), glob patterns expanded. A path that matches nothing is an error naming it."""
    files: list[Path] = []
    for item in inputs:
        s = str(item)
        p = Path(s)
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(names):
                    f = Path(root) / name
                    if not name.startswith(".") and f.is_file() and not _looks_binary(f):
                        files.append(f)
        elif any(ch in s for ch in "*?["):
            matches = sorted(Path(m) for m in glob.glob(s, recursive=True) if Path(m).is_file())
            if not matches:
                raise FileNotFoundError(f"input pattern {s!r} matches no files")
            files.extend(matches)
        else:
            raise FileNotFoundError(f"input {s!r} does not exist")
    if not files:
        raise ValueError(f"no input files found in {[str(i) for i in inputs]}")
    return files


def _split_point(buf: str) -> int:
    """Index just after the last '\\n' with non-space characters on both sides, or -1.

    No pre-token of the GPT-2 or GPT-4 split patterns spans such a line break, so encoding the
    two sides separately gives the ids of encoding them together."""
    p = buf.rfind("\n", 0, len(buf) - 1)
    while p > 0:
        if not buf[p - 1].isspace() and not buf[p + 1].isspace():
            return p + 1
        p = buf.rfind("\n", 0, p)
    return -1


def iter_pieces(path: Path, chunk_chars: int) -> Iterator[str]:
    """The text of `path` (UTF-8, bad bytes replaced) in pieces of about `chunk_chars`."""
    with open(path, "r", encoding="utf-8", errors="replace", newline="") as f:
        buf = ""
        while True:
            block = f.read(chunk_chars)
            buf += block
            if not block:
                break
            if len(buf) >= chunk_chars:
                cut = _split_point(buf)
                if cut <= 0 and len(buf) >= 8 * chunk_chars:
                    cut = len(buf)  # one enormous line: cut anyway (ids may differ at the cut)
                if cut > 0:
                    yield buf[:cut]
                    buf = buf[cut:]
        if buf:
            yield buf


def iter_documents(files: Sequence[Path], max_chars: int | None = None,
                   chunk_chars: int = 1 << 20) -> Iterator[tuple[int, str, bool]]:
    """(document index, piece of text, whether it is the document's last piece), reading at
    most `max_chars` characters in all (the last document is cut there)."""
    total = 0
    for i, path in enumerate(files):
        pieces = iter_pieces(path, chunk_chars)
        piece = next(pieces, None)
        if piece is None:
            piece = ""  # an empty file is still a document (it gets its end-of-text token)
        while piece is not None:
            if max_chars is not None and total + len(piece) >= max_chars:
                yield i, piece[: max_chars - total], True
                return
            total += len(piece)
            nxt = next(pieces, None)
            yield i, piece, nxt is None
            piece = nxt


# ---- tokenizers -----------------------------------------------------------------------------
def train_tokenizer(files: Sequence[Path], vocab_size: int | None, *, char: bool = False,
                    max_chars: int | None = None, pattern: str | None = None,
                    workers: int | None = None, verbose: bool = False):
    """A tokenizer with the end-of-text token, trained on (at most `max_chars` of) `files`."""
    texts = (piece for _, piece, _ in iter_documents(files, max_chars))
    if char:
        from gpt.data.char_tokenizer import CharTokenizer

        return CharTokenizer.train(texts, special_tokens=[EOT])
    if vocab_size is None:
        raise ValueError("training a tokenizer needs --vocab-size (or give --tokenizer FILE, or --char)")
    from bpe import Tokenizer

    kwargs: dict[str, Any] = {"vocab_size": vocab_size, "special_tokens": [EOT], "workers": workers}
    if pattern is not None:
        kwargs["pattern"] = pattern
    t0 = time.perf_counter()
    tok = Tokenizer.train_from_iterator(texts, **kwargs)
    if verbose:
        print(f"trained a BPE tokenizer of {tok.vocab_size} ids in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    return tok


# ---- encoding in workers --------------------------------------------------------------------
_WORKER_TOK = None


def _init_worker(tokenizer_path: str) -> None:
    global _WORKER_TOK
    _WORKER_TOK = load_tokenizer(tokenizer_path)


def _encode_piece(text: str) -> np.ndarray:
    # Document text is ordinary: a literal "<|endoftext|>" inside a file is not a separator.
    return np.asarray(_WORKER_TOK.encode_ordinary(text), dtype=np.int64)


def _encoded(pieces: Iterable[tuple[int, str, bool]], tokenizer_path: str,
             workers: int) -> Iterator[tuple[int, np.ndarray, bool]]:
    """Encode pieces in order; in `workers` processes with a bounded number in flight."""
    if workers <= 1:
        _init_worker(tokenizer_path)
        for doc, text, last in pieces:
            yield doc, _encode_piece(text), last
        return
    import multiprocessing as mp

    with mp.get_context().Pool(workers, initializer=_init_worker, initargs=(tokenizer_path,)) as pool:
        pending: collections.deque = collections.deque()
        for doc, text, last in pieces:
            pending.append((doc, pool.apply_async(_encode_piece, (text,)), last))
            if len(pending) >= 2 * workers:  # bounded: a corpus larger than memory streams
                d, res, l = pending.popleft()
                yield d, res.get(), l
        while pending:
            d, res, l = pending.popleft()
            yield d, res.get(), l


def _temp_file(folder: Path, name: str) -> Path:
    """A new empty file `.<name>.<random>.tmp` in `folder` (never one another writer uses)."""
    fd, path = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    return Path(path)


def _is_val_doc(i: int, val_fraction: float) -> bool:
    """Evenly spaced documents, about `val_fraction` of them (every 10th for 0.1)."""
    return math.floor((i + 1) * val_fraction) > math.floor(i * val_fraction)


def prepare(inputs: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *,
            tokenizer: str | os.PathLike | Any | None = None, vocab_size: int | None = None,
            char: bool = False, pattern: str | None = None, val_fraction: float = 0.1,
            workers: int | None = None, max_chars: int | None = None,
            tokenizer_max_chars: int | None = None, chunk_chars: int = 1 << 20,
            verbose: bool = False) -> dict:
    """Tokenize `inputs` (files, folders, globs) into a nanoGPT data folder `out_dir`.

    tokenizer: a tokenizer file, a tokenizer object, or None to train one (`vocab_size` BPE ids,
    or characters with `char=True`) on the inputs (at most `tokenizer_max_chars` of them).
    Returns the meta dict also written to meta.json. While it works, the folder is locked (a
    second writer is refused) and marked incomplete (`.incomplete`, which readers refuse), so a
    kill at any moment leaves a folder that is complete or refused, never one that looks valid."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    files = expand_inputs(inputs)
    out = Path(out_dir)
    with FolderLock(out, "data folder"):  # a second `gpt prepare` into `out` is refused
        _start_rewrite(out)
        meta = _prepare(files, inputs, out, tokenizer=tokenizer, vocab_size=vocab_size, char=char,
                        pattern=pattern, val_fraction=val_fraction, workers=workers, max_chars=max_chars,
                        tokenizer_max_chars=tokenizer_max_chars, chunk_chars=chunk_chars, verbose=verbose)
        atomic_write_text(out / META_FILE, json.dumps(meta, indent=2))
        (out / INCOMPLETE_FILE).unlink()  # the folder is complete from here on
    return meta


def _start_rewrite(out: Path) -> None:
    """Mark `out` incomplete before changing anything in it, and clear what a killed run left."""
    atomic_write_text(out / INCOMPLETE_FILE, f"being written by gpt prepare (process {os.getpid()})\n")
    if (out / META_FILE).exists():
        (out / META_FILE).unlink()
    for p in out.glob(".*.tmp"):  # temp files of a killed writer (we hold the folder's lock)
        p.unlink()


def _prepare(files: list[Path], inputs, out: Path, *, tokenizer, vocab_size, char, pattern, val_fraction,
             workers, max_chars, tokenizer_max_chars, chunk_chars, verbose) -> dict:
    """The work of `prepare` inside its lock: the tokenizer, then train.bin and val.bin -> meta."""
    if tokenizer is None:
        tok = train_tokenizer(files, vocab_size, char=char, pattern=pattern, workers=workers,
                              max_chars=tokenizer_max_chars or max_chars, verbose=verbose)
    elif isinstance(tokenizer, (str, os.PathLike)):
        tok = load_tokenizer(tokenizer)
    else:
        tok = tokenizer
    tok_path = out / TOKENIZER_FILE
    tok.save(str(tok_path))
    V = int(tok.vocab_size)
    eot = eot_id(tok)
    dtype = token_dtype(V)
    workers = max(1, min(os.cpu_count() or 1, 8)) if workers is None else max(1, int(workers))

    tty = sys.stderr.isatty()  # a live count on a terminal; one closing line in a log
    tmp = {s: _temp_file(out, f"{s}.bin") for s in SPLITS}
    counts = {s: 0 for s in SPLITS}
    n_docs, n_chars, t0 = 0, 0, time.perf_counter()
    try:
        with open(tmp["train"], "wb") as ftrain, open(tmp["val"], "wb") as fval:
            handles = {"train": ftrain, "val": fval}
            pieces = iter_documents(files, max_chars, chunk_chars)

            def counting(it):
                nonlocal n_chars
                for doc, text, last in it:
                    n_chars += len(text)
                    yield doc, text, last

            for doc, ids, last in _encoded(counting(pieces), str(tok_path), workers):
                split = "val" if _is_val_doc(doc, val_fraction) else "train"
                if last and eot is not None:
                    ids = np.append(ids, eot)
                if ids.size and int(ids.max()) >= V:
                    raise ValueError(f"tokenizer produced id {int(ids.max())} >= vocab_size {V}")
                handles[split].write(ids.astype(dtype).tobytes())
                counts[split] += ids.size
                n_docs = max(n_docs, doc + 1)
                if verbose and tty and last and doc % 200 == 0:
                    dt = time.perf_counter() - t0
                    print(f"\rprepare: {doc + 1} documents, {n_chars / 1e6:.1f} M chars, "
                          f"{sum(counts.values()) / max(dt, 1e-9) / 1e3:.0f} k tokens/s",
                          end="", file=sys.stderr, flush=True)
            for f in handles.values():
                f.flush()
                os.fsync(f.fileno())
        if counts["val"] == 0 or counts["train"] == 0:
            _move_tail_to_val(tmp, counts, dtype, val_fraction)
        for s in SPLITS:
            os.replace(tmp[s], out / f"{s}.bin")
    finally:
        for p in tmp.values():
            if p.exists():
                p.unlink()
    if verbose:
        print(f"{chr(13) if tty else ''}prepare: {n_docs} documents, {n_chars / 1e6:.2f} M chars -> "
              f"{counts['train']:,} train + {counts['val']:,} val tokens in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    meta = {
        "vocab_size": V, "dtype": dtype.name, "tokenizer": TOKENIZER_FILE, "eot_id": eot,
        "train_tokens": counts["train"], "val_tokens": counts["val"], "documents": n_docs,
        "characters": n_chars, "val_fraction": val_fraction,
        "inputs": [str(i) for i in inputs][:10] + (["..."] if len(inputs) > 10 else []),
    }
    return meta


def _move_tail_to_val(tmp: dict, counts: dict, dtype: np.dtype, val_fraction: float) -> None:
    """Too few documents for a document-level split: the last tokens become val instead."""
    total = counts["train"] + counts["val"]
    # Everything is in one of the two files: gather it into train first (val is small or empty).
    if counts["train"] == 0:
        tmp["train"], tmp["val"] = tmp["val"], tmp["train"]
    n_val = max(1, int(round(total * val_fraction)))
    n_train = total - n_val
    if n_train <= 0:
        raise ValueError(f"only {total} tokens: too few to split into train and val")
    item = dtype.itemsize
    with open(tmp["train"], "r+b") as src, open(tmp["val"], "wb") as dst:
        src.seek(n_train * item)
        while True:
            block = src.read(1 << 24)
            if not block:
                break
            dst.write(block)
        src.truncate(n_train * item)
        for f in (src, dst):
            f.flush()
            os.fsync(f.fileno())
    counts["train"], counts["val"] = n_train, n_val
