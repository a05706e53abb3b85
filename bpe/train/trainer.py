"""Training, the entry point: check the arguments, count chunks (``parallel_count``), learn merges
(``merge_learner``), build the Tokenizer."""
from __future__ import annotations

import os
import sys
import time
import warnings
from collections import Counter
from collections.abc import Mapping

from ..encode.special import check_special_token
from ..files.corpus import default_corpus_files, expand_inputs
from ..heap import training_heap
from ..split.patterns import resolve_pattern
from .chunk_table import ChunkTable
from .merge_learner import train_merges
from .parallel_count import count_files, count_texts


class Progress:
    """A one-line progress display (merges/s) on stderr, only when stderr is a TTY."""

    def __init__(self, total: int, enabled: bool | None = None, label: str = "merges"):
        self.total = total
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.label = label
        self.t0 = time.perf_counter()
        self.last = 0.0

    def __call__(self, done: int, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not final and now - self.last < 0.2:
            return
        self.last = now
        dt = max(now - self.t0, 1e-9)
        sys.stderr.write(f"\r{self.label}: {done}/{self.total}  {done / dt:,.0f}/s  {dt:.1f}s ")
        if final:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _special_ids(special_tokens) -> tuple[list[str], dict[str, int] | None]:
    """Names in order, and explicit ids when a mapping was given."""
    if isinstance(special_tokens, str):
        special_tokens = [special_tokens]
    if isinstance(special_tokens, Mapping):
        names = list(special_tokens)
        explicit = {s: int(i) for s, i in special_tokens.items()}
    else:
        names = list(special_tokens or ())
        explicit = None
    seen = set()
    for s in names:
        check_special_token(s)
        if s in seen:
            raise ValueError(f"duplicate special token {s!r} in special_tokens")
        seen.add(s)
    if explicit is not None and len(set(explicit.values())) != len(explicit):
        raise ValueError(f"special tokens share an id: {explicit}")
    return names, explicit


def _summarize_warnings(caught, quiet_unicode: bool, log) -> None:
    """Re-raise warnings from counting; those about non-UTF-8 files become one warning."""
    bad = [w for w in caught if issubclass(w.category, UnicodeWarning)]
    for w in caught:
        if not issubclass(w.category, UnicodeWarning):
            warnings.warn(w.message, w.category, stacklevel=4)
    if not bad:
        return
    if len(bad) == 1:
        msg = str(bad[0].message)
    else:
        msg = f"{len(bad)} corpus files hold bytes that are not UTF-8; the first: {bad[0].message}"
    if quiet_unicode:  # a few test files of the standard library are not UTF-8 on purpose
        log(msg)
    else:
        warnings.warn(msg, UnicodeWarning, stacklevel=4)


def _check(vocab_size, pattern, special_tokens, min_frequency):
    """(pattern, special names, explicit ids or None, number of merges) from checked arguments."""
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        raise TypeError(f"vocab_size must be an int, got {vocab_size!r}")
    pattern = resolve_pattern(pattern)
    names, explicit = _special_ids(special_tokens)
    if vocab_size < 256 + len(names):
        raise ValueError(
            f"vocab_size={vocab_size} is too small: it must be at least 256 (one token per byte)"
            f" + {len(names)} special token(s) = {256 + len(names)}"
        )
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
    n_merges = vocab_size - 256 - len(names)
    taken = [(s, i) for s, i in (explicit or {}).items() if i < 256 + n_merges]
    if taken:  # refused now, not after the training that would make the clash
        s, i = taken[0]
        raise ValueError(f"special token {s!r} has id {i}, which the bytes (0..255) or the merges "
                         f"(256..{255 + n_merges}, for vocab_size={vocab_size}) take; give it {256 + n_merges} "
                         "or more")
    return pattern, names, explicit, n_merges


def _logger(verbose: bool):
    return (lambda msg: print(msg, file=sys.stderr)) if verbose else (lambda msg: None)


def _files(n: int) -> str:
    return f"{n:,} file{'' if n == 1 else 's'}"


def count_inputs(inputs, texts, pattern: str, names: list[str], workers, log,
                 table: bool = False, shard: bool = False) -> Counter | ChunkTable:
    """Chunk counts of files, folders and globs (``inputs``; None: the default corpus) or of
    an iterable of ``texts``, as a ChunkTable where ``table`` is true; an empty corpus is an
    error, but an empty ``shard`` (one of several counted apart) only a warning."""
    t0 = time.perf_counter()
    if texts is None and inputs is not None and not isinstance(inputs, (str, os.PathLike, list, tuple)):
        texts, inputs = inputs, None  # a generator or other iterable of texts
    if texts is None:
        binary: list = []
        files = default_corpus_files() if inputs is None else expand_inputs(inputs, skipped=binary)
        if not files:
            raise ValueError("no input files to train on" + (f" ({_files(len(binary))} skipped as binary)"
                                                              if binary else ""))
        log(f"counting chunks in {_files(len(files))}"
            + (f" ({_files(len(binary))} skipped as binary: a NUL byte in the first 8 KiB)" if binary else ""))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            counts = count_files(files, pattern, workers, special_tokens=names, table=table)
        _summarize_warnings(caught, quiet_unicode=inputs is None, log=log)
        source = _files(len(files))
    else:
        counts = count_texts(texts, pattern, workers, special_tokens=names, table=table)
        source = "the given texts"
    if not counts and not shard:
        raise ValueError(f"the training corpus ({source}) is empty: no text to learn merges from")
    if not counts:
        warnings.warn(f"the shard ({source}) holds no text: its counts are empty", stacklevel=3)
    log(f"{len(counts):,} distinct chunks ({counts.total():,} in all) counted in "
        f"{time.perf_counter() - t0:.2f}s")
    return counts


def _learn(cls, counts, vocab_size, pattern, names, explicit, n_merges, min_frequency, progress, log):
    """Merges from chunk counts, then the Tokenizer (special tokens after the merges)."""
    show = sys.stderr.isatty() if progress is None else bool(progress)
    t1 = time.perf_counter()
    bar = Progress(n_merges, enabled=show)
    merges = train_merges(counts, n_merges, min_frequency, progress=bar if show else None)
    bar(len(merges), final=True)
    t2 = time.perf_counter()
    log(f"{len(merges):,} merges in {t2 - t1:.2f}s ({len(merges) / max(t2 - t1, 1e-9):,.0f} merges/s)")
    if len(merges) < n_merges:
        warnings.warn(
            f"the corpus supports only {len(merges)} merges (no pair occurs {min_frequency} time(s) any "
            f"more), fewer than the {n_merges} that vocab_size={vocab_size} asks for; the vocabulary "
            f"is smaller",
            stacklevel=4,
        )
    first_special = 256 + len(merges)
    specials = explicit if explicit is not None else {s: first_special + j for j, s in enumerate(names)}
    return cls.from_merges(merges, pattern, specials)


def count_shard(inputs, pattern: str, special_tokens, workers, log) -> Counter:
    """The chunk counts of one shard, for a count file: its special tokens checked as training
    checks them, so that no count file is one that training refuses. An empty shard is empty
    counts; training from count files refuses only counts that are all empty."""
    names = _special_ids(special_tokens)[0]
    return count_inputs(inputs, None, pattern, names, workers, log, shard=True)


# Both make and free arrays of millions of positions at every early merge (bpe/heap.py).
@training_heap()
def train_tokenizer(cls, inputs, texts, vocab_size, pattern, special_tokens, min_frequency,
                    workers, verbose, progress):
    pattern, names, explicit, n_merges = _check(vocab_size, pattern, special_tokens, min_frequency)
    log = _logger(verbose)
    counts = count_inputs(inputs, texts, pattern, names, workers, log, table=True)
    return _learn(cls, counts, vocab_size, pattern, names, explicit, n_merges, min_frequency, progress, log)


@training_heap()
def train_from_chunk_counts(cls, counts, vocab_size, pattern, special_tokens, min_frequency, verbose, progress):
    """A Tokenizer from chunk counts already made (by ``bpe count`` files or MPI ranks)."""
    pattern, names, explicit, n_merges = _check(vocab_size, pattern, special_tokens, min_frequency)
    if not counts:
        raise ValueError("the chunk counts are empty: no text to learn merges from")
    return _learn(cls, counts, vocab_size, pattern, names, explicit, n_merges, min_frequency, progress,
                  _logger(verbose))


def train_from_count_files(cls, paths, vocab_size, pattern, special_tokens, min_frequency, verbose, progress):
    """Train on the merged chunk counts of ``bpe count`` files: the tokenizer of one run over
    all their shards. The pattern and special tokens are the files' own (given ones must agree)."""
    from .counts_file import load_counts

    log = _logger(verbose)
    counts, file_pattern, file_specials = load_counts(paths, log)
    if pattern is not None and resolve_pattern(pattern) != file_pattern:
        raise ValueError(f"the count files were made with pattern {file_pattern[:60]!r}, not the given "
                         f"{resolve_pattern(pattern)[:60]!r}; count again or leave the pattern out")
    if special_tokens is None:
        special_tokens = file_specials
    elif sorted(_special_ids(special_tokens)[0]) != sorted(file_specials):
        raise ValueError(f"the count files were made with special tokens {file_specials}, which split "
                         f"the documents; the given {list(special_tokens)} differ: count again or leave them out")
    return train_from_chunk_counts(cls, counts, vocab_size, file_pattern, special_tokens, min_frequency,
                                   verbose, progress)
