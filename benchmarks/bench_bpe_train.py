"""One tokenizer training (``Tokenizer.train_from_iterator``: counting, then learning merges) in this
process, timed by phase, with the kernel's share (system CPU seconds) and the page faults.

Meant for comparing two checkouts side by side, as the first training of a fresh process (which is
how training runs for a user): run it from each tree in turn, in fresh processes, e.g.

    for i in 1 2 3 4 5; do for tree in ../before .; do python3 $tree/benchmarks/bench_bpe_train.py; done; done

(copy the script into a tree that lacks it). Prints one line: total, counting and learning wall
seconds, this process's system seconds and minor page faults, the load average.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bpe.train.trainer as trainer  # noqa: E402
from bpe import Tokenizer  # noqa: E402
from bench_bpe_long import load_average  # noqa: E402
from bench_bpe_texts import corpus_docs  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="multilingual", help="code, prose or multilingual (default multilingual)")
    ap.add_argument("--size", type=float, default=50, help="MB of corpus (default 50)")
    ap.add_argument("--vocab", type=int, default=32768)
    args = ap.parse_args(argv)
    docs = corpus_docs(args.corpus, int(args.size * 1_000_000))
    spent = {}

    def timed(name, fn):
        def run(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] = time.perf_counter() - t
        return run

    trainer.count_inputs = timed("count", trainer.count_inputs)
    trainer._learn = timed("learn", trainer._learn)
    before, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Tokenizer.train_from_iterator(docs, vocab_size=args.vocab, special_tokens=["<|endoftext|>"], progress=False)
    total, after = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF)
    print(f"{ROOT.name} {args.corpus} {args.size:g} MB vocab {args.vocab}: total {total:.3f} s, counting "
          f"{spent['count']:.3f}, learning {spent['learn']:.3f}; system {after.ru_stime - before.ru_stime:.3f} s, "
          f"{after.ru_minflt - before.ru_minflt:,} page faults; load average {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
