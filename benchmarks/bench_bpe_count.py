"""Counting chunks for training, one process: the way ``ChunkCounter`` chooses (lines, words or the
regex over whole texts) against each way forced, per corpus; and our whole training, alone.

Each cell is the median of --repeat runs in this process, the ways taking turns; every way's
counts are checked equal. Meant also for comparing two checkouts, taking turns in fresh processes
(a checkout without word segments prints "-" for them):

    for i in 1 2 3; do for tree in ../before .; do python3 $tree/benchmarks/bench_bpe_count.py; done; done
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bpe.split.patterns import resolve_pattern  # noqa: E402
from bpe.train import chunk_counter  # noqa: E402
from bench_bpe import print_table, train_ours  # noqa: E402
from bench_bpe_long import load_average, processor  # noqa: E402
from bench_bpe_texts import corpus_docs  # noqa: E402

MB = 1_000_000
WAYS = ("chosen", "lines", "words", "regex")


def _counter(pattern: str, way: str):
    """A ChunkCounter that goes ``way`` from the start (None: this checkout cannot)."""
    c = chunk_counter.ChunkCounter(pattern)
    if way == "chosen":
        return c
    words = getattr(c, "_words", None)
    if way == "words" and words is None:
        return None
    c._probe_at = None  # noqa: SLF001 - the choice made for it
    if way != "lines":
        c._split = None  # noqa: SLF001
    if way == "words":
        c._split_words = words  # noqa: SLF001
    return c


def _way(c) -> str:
    return "lines" if c._split else "words" if getattr(c, "_split_words", None) else "regex"  # noqa: SLF001


def count_row(kind: str, docs: list[str], pattern: str, repeat: int) -> list:
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    chosen, want = "?", None
    for _ in range(repeat):
        for way in WAYS:
            c = _counter(pattern, way)
            if c is None:
                continue
            t = time.perf_counter()
            for d in docs:
                c.add(d)
            got = c.result()
            times[way].append(time.perf_counter() - t)
            if want is None:
                want = got
            assert got == want, f"{way} counts differ on {kind}"
            if way == "chosen":
                chosen = _way(c)
    return [kind, chosen] + [f"{statistics.median(times[w]):.3f}" if times[w] else "-" for w in WAYS]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", default="code,prose,multilingual")
    ap.add_argument("--size", type=float, default=25,
                    help="MB counted in one process; 0: no counting (default 25)")
    ap.add_argument("--train-size", type=float, default=50,
                    help="MB trained on, vocab 32,768; 0: no training (default 50)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    pattern = resolve_pattern("gpt4")
    chunk_counter.ChunkCounter(pattern).add("the split pattern's twin, built outside the timing")
    print(f"{processor()}; python {sys.version.split()[0]}; load average {load_average()}; checkout {ROOT}")
    rows, trained = [], []
    for kind in args.corpora.split(","):
        if args.size:
            rows.append(count_row(kind, corpus_docs(kind, int(args.size * MB)), pattern, args.repeat))
        if args.train_size:
            docs = corpus_docs(kind, int(args.train_size * MB))
            train_ours(docs[:50], 300, pattern, None)  # the split pattern's twin built outside the timing
            walls = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                train_ours(docs, 32768, pattern, None)
                walls.append(time.perf_counter() - t)
            trained.append([kind, f"{statistics.median(walls):.2f}", " ".join(f"{w:.2f}" for w in walls)])
    if rows:
        print_table(f"Counting {args.size:g} MB in one process, seconds, median of {args.repeat}",
                    ["corpus", "way chosen", "chosen", "lines", "words", "regex"], rows)
    if trained:
        print_table(f"Training {args.train_size:g} MB, vocab 32,768, ours alone, in this process: "
                    "wall seconds",
                    ["corpus", f"median of {args.repeat}", "each"], trained)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
