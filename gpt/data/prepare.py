"""`prepare`: text files in, a data folder in nanoGPT's layout out (gpt.data.folder).

Documents (one per input file) are separated by the end-of-text token, written after each one.
Every tenth document (for val_fraction=0.1, evenly spaced) goes to val.bin; with too few
documents for that, the last val_fraction of the tokens does instead.

`prepare` streams: inputs are found and read by bpe.files.corpus (the reader `bpe train` uses), large
files in blocks cut only where the tokenizer's split pattern provably has a chunk boundary (so
the ids equal those of encoding the whole file); blocks are encoded in worker processes with at
most a few in flight, and ids go straight to disk.
"""
from __future__ import annotations

import collections
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from bpe.files.atomic import atomic_write_text, create_temp, fsync_folder
from bpe.files.corpus import BLOCK_BYTES, expand_inputs, read_blocks
from bpe.workers import default_workers
from bpe.files.lock import FolderLock

from gpt.data.fingerprint import fingerprint
from gpt.data.folder import EOT, INCOMPLETE_FILE, META_FILE, SPLITS, TOKENIZER_FILE, eot_id, load_tokenizer, token_dtype


# ---- inputs ---------------------------------------------------------------------------------
def input_files(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """bpe's reading of input paths (files, folders, globs; binary files in folders skipped;
    each file once), which `bpe train` and `gpt gradflow` share; finding nothing is an error."""
    files = expand_inputs(list(inputs))
    if not files:
        raise ValueError(f"no text files found in {[str(i) for i in inputs]}")
    return files


def iter_documents(files: Sequence[Path], max_chars: int | None = None, block_bytes: int = BLOCK_BYTES,
                   pattern: str | None = None) -> Iterator[tuple[int, str, bool]]:
    """(document index, block of text, whether it is the document's last block), reading at
    most `max_chars` characters in all (the last document is cut there). Blocks are cut only
    where `pattern` (None: every built-in pattern) provably has a chunk boundary, so encoding
    them apart gives the ids of the whole file."""
    total = 0
    for i, path in enumerate(files):
        blocks = read_blocks(path, block_bytes=block_bytes, pattern=pattern)
        block = next(blocks, None)
        if block is None:
            block = ""  # an empty file is still a document (it gets its end-of-text token)
        while block is not None:
            if max_chars is not None and total + len(block) >= max_chars:
                yield i, block[: max_chars - total], True
                return
            total += len(block)
            nxt = next(blocks, None)
            yield i, block, nxt is None
            block = nxt


# ---- tokenizers -----------------------------------------------------------------------------
def train_tokenizer(files: Sequence[Path], vocab_size: int | None, *, char: bool = False,
                    max_chars: int | None = None, pattern: str | None = None,
                    workers: int | None = None, verbose: bool = False):
    """A tokenizer with the end-of-text token, trained on (at most `max_chars` of) `files`."""
    texts = (block for _, block, _ in iter_documents(files, max_chars, pattern=pattern))
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
             workers: int) -> Iterator[tuple[int, np.ndarray, bool, int]]:
    """(doc, ids, last, UTF-8 bytes of the text) of each piece in order; encoded in `workers`
    processes with a bounded number in flight."""
    if workers <= 1:
        _init_worker(tokenizer_path)
        for doc, text, last in pieces:
            yield doc, _encode_piece(text), last, _utf8_bytes(text)
        return
    import multiprocessing as mp

    with mp.get_context().Pool(workers, initializer=_init_worker, initargs=(tokenizer_path,)) as pool:
        pending: collections.deque = collections.deque()
        for doc, text, last in pieces:
            pending.append((doc, pool.apply_async(_encode_piece, (text,)), last, _utf8_bytes(text)))
            if len(pending) >= 2 * workers:  # bounded: a corpus larger than memory streams
                d, res, l, n = pending.popleft()
                yield d, res.get(), l, n
        while pending:
            d, res, l, n = pending.popleft()
            yield d, res.get(), l, n


def _utf8_bytes(text: str) -> int:
    """Bytes of `text` in UTF-8 (what bits per byte divide by); lone surrogates count as 3."""
    return len(text.encode("utf-8", "surrogatepass"))


def _is_val_doc(i: int, val_fraction: float) -> bool:
    """Evenly spaced documents, about `val_fraction` of them (every 10th for 0.1)."""
    return math.floor((i + 1) * val_fraction) > math.floor(i * val_fraction)


def prepare(inputs: Sequence[str | os.PathLike], out_dir: str | os.PathLike, *,
            tokenizer: str | os.PathLike | Any | None = None, vocab_size: int | None = None,
            char: bool = False, pattern: str | None = None, val_fraction: float = 0.1,
            workers: int | None = None, max_chars: int | None = None,
            tokenizer_max_chars: int | None = None, block_bytes: int = BLOCK_BYTES,
            force: bool = False, verbose: bool = False) -> dict:
    """Tokenize `inputs` (files, folders, globs) into a nanoGPT data folder `out_dir`.

    tokenizer: a tokenizer file, a tokenizer object, or None to train one (`vocab_size` BPE ids,
    or characters with `char=True`) on the inputs (at most `tokenizer_max_chars` of them).
    Returns the meta dict also written to meta.json, with the folder's fingerprint
    (gpt.data.fingerprint) that checkpoints keep. A folder that holds prepared data is replaced
    only with `force`. While it works, the folder is locked (a second writer, or a `gpt train`
    reading it, is refused). The new tokenizer and token files are written aside (temp files in
    `out`, so the old data and the new share the disk until the end) and put in place only once
    all of them are complete: a failure before that (a missing tokenizer, bad input, a full disk)
    leaves the folder as it was. During the renames the folder is marked incomplete
    (`.incomplete`, which readers refuse), so a kill at any moment leaves a folder that is
    complete or refused, never one that looks valid."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    out = Path(out_dir)
    files = _not_data(input_files(inputs), out)
    with FolderLock(out, "data folder"):  # a second `gpt prepare` into `out` is refused
        if not force:
            _refuse_prepared(out)
        _clear_temp_files(out)
        staged = {name: create_temp(out, name) for name in (TOKENIZER_FILE, *(f"{s}.bin" for s in SPLITS))}
        try:
            meta = _prepare(files, inputs, staged, tokenizer=tokenizer, vocab_size=vocab_size, char=char,
                            pattern=pattern, val_fraction=val_fraction, workers=workers, max_chars=max_chars,
                            tokenizer_max_chars=tokenizer_max_chars, block_bytes=block_bytes, verbose=verbose)
            _put_in_place(out, staged, meta)
        finally:
            for path in staged.values():  # what was not put in place (a failure)
                path.unlink(missing_ok=True)
    return meta


def _not_data(files: list[Path], out: Path) -> list[Path]:
    """``files`` less those in ``out`` or in another data folder (which holds train.bin) found
    in an input folder: prepared data is no text to learn from, and ``out``'s is replaced."""
    folders = [os.path.dirname(os.path.realpath(f)) for f in files]
    data = {d for d in set(folders) if d == os.path.realpath(out) or os.path.isfile(os.path.join(d, "train.bin"))}
    kept = [f for f, d in zip(files, folders) if d not in data]  # one look per folder, not per file
    if not kept:
        raise ValueError(f"no text files found outside data folders in {[str(f) for f in files[:3]]}")
    return kept


def _refuse_prepared(out: Path) -> None:
    """Stop before replacing a complete data folder (a killed prepare's may be redone at will)."""
    held = [n for n in (META_FILE, "train.bin", "val.bin") if (out / n).exists()]
    if held and not (out / INCOMPLETE_FILE).exists():
        raise FileExistsError(f"data folder {str(out)!r} already holds prepared data ({', '.join(held)}); "
                              "runs trained on it could no longer resume. Give --force (force=True) to "
                              "replace it, or choose another folder")


def _clear_temp_files(out: Path) -> None:
    """Remove the temp files a killed writer left (we hold the folder's lock)."""
    for p in out.glob(".*.tmp"):
        p.unlink()


def _put_in_place(out: Path, staged: dict[str, Path], meta: dict) -> None:
    """Rename the complete staged files (file name -> temp path) over `out`'s, then write
    meta.json with their fingerprint; `out` is marked incomplete in between."""
    atomic_write_text(out / INCOMPLETE_FILE, f"being written by gpt prepare (process {os.getpid()})\n")
    (out / META_FILE).unlink(missing_ok=True)
    for name, tmp in staged.items():
        os.replace(tmp, out / name)
    fsync_folder(out)
    meta["fingerprint"] = fingerprint(out, out / TOKENIZER_FILE)
    atomic_write_text(out / META_FILE, json.dumps(meta, indent=2))
    (out / INCOMPLETE_FILE).unlink()  # the folder is complete from here on


def _prepare(files: list[Path], inputs, staged: dict[str, Path], *, tokenizer, vocab_size, char, pattern,
             val_fraction, workers, max_chars, tokenizer_max_chars, block_bytes, verbose) -> dict:
    """The work of `prepare` inside its lock: the tokenizer, then train.bin and val.bin, each
    written to its temp file in `staged` (file name -> path) -> meta."""
    if tokenizer is None:
        tok = train_tokenizer(files, vocab_size, char=char, pattern=pattern, workers=workers,
                              max_chars=tokenizer_max_chars or max_chars, verbose=verbose)
    elif isinstance(tokenizer, (str, os.PathLike)):
        tok = load_tokenizer(tokenizer)
    else:
        tok = tokenizer
    tok.save(str(staged[TOKENIZER_FILE]))
    V, eot = int(tok.vocab_size), eot_id(tok)
    workers = min(default_workers(), 8) if workers is None else max(1, int(workers))  # bpe's count, capped
    blocks = iter_documents(files, max_chars, block_bytes, getattr(tok, "pattern", None))
    tmp = {s: staged[f"{s}.bin"] for s in SPLITS}
    stats = _write_splits(tmp, _encoded(blocks, str(staged[TOKENIZER_FILE]), workers), V, eot, val_fraction,
                          verbose)
    return {
        "vocab_size": V, "dtype": token_dtype(V).name, "tokenizer": TOKENIZER_FILE, "eot_id": eot,
        **stats, "val_fraction": val_fraction,
        "inputs": [str(i) for i in inputs][:10] + (["..."] if len(inputs) > 10 else []),
    }


def _write_splits(tmp: dict[str, Path], encoded, V: int, eot: int | None, val_fraction: float,
                  verbose: bool) -> dict:
    """Stream (doc, ids, last) into the files `tmp` names for each split (train, val)."""
    dtype, tty = token_dtype(V), sys.stderr.isatty()  # a live count on a terminal; one line in a log
    counts, n_bytes = {s: 0 for s in SPLITS}, {s: 0 for s in SPLITS}
    n_docs, t0 = 0, time.perf_counter()
    with open(tmp["train"], "wb") as ftrain, open(tmp["val"], "wb") as fval:
        handles = {"train": ftrain, "val": fval}
        for doc, ids, last, size in encoded:
            split = "val" if _is_val_doc(doc, val_fraction) else "train"
            if last and eot is not None:
                ids = np.append(ids, eot)
            if ids.size and int(ids.max()) >= V:
                raise ValueError(f"tokenizer produced id {int(ids.max())} >= vocab_size {V}")
            handles[split].write(ids.astype(dtype).tobytes())
            counts[split] += ids.size
            n_bytes[split] += size
            n_docs = max(n_docs, doc + 1)
            if verbose and tty and last and doc % 200 == 0:
                rate = sum(counts.values()) / max(time.perf_counter() - t0, 1e-9)
                print(f"\rprepare: {doc + 1} document{'s' if doc else ''}, {rate / 1e3:.0f} k tokens/s",
                      end="", file=sys.stderr, flush=True)
        for f in handles.values():
            f.flush()
            os.fsync(f.fileno())
    if counts["val"] == 0 or counts["train"] == 0:
        _move_tail_to_val(tmp, counts, dtype, val_fraction)
        total = sum(n_bytes.values())  # a token split: the bytes go with their share of tokens
        n_bytes["val"] = round(total * counts["val"] / (counts["train"] + counts["val"]))
        n_bytes["train"] = total - n_bytes["val"]
    if verbose:
        print(f"{chr(13) if tty else ''}prepare: {n_docs} document{'s' if n_docs != 1 else ''} -> "
              f"{counts['train']:,} train + "
              f"{counts['val']:,} val tokens in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return {"train_tokens": counts["train"], "val_tokens": counts["val"], "documents": n_docs,
            "train_bytes": n_bytes["train"], "val_bytes": n_bytes["val"]}


def _move_tail_to_val(tmp: dict, counts: dict, dtype: np.dtype, val_fraction: float) -> None:
    """Too few documents for a document-level split: the last tokens become val instead."""
    total = counts["train"] + counts["val"]
    # Everything is in one of the two files: gather it into train first (val is small or empty).
    if counts["train"] == 0:
        os.replace(tmp["val"], tmp["train"])  # val is reopened below, empty
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
