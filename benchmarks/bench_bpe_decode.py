"""Decoding beside tiktoken: ``decode_bytes`` and ``decode`` of one long id sequence, cl100k's
vocabulary, one thread, the two libraries taking turns call by call.

    python3 benchmarks/bench_bpe_decode.py [--corpus code,multilingual] [--size 1] [--rounds 15]

The ids are tiktoken's encoding of the corpus (``bench_bpe_texts.py``); each call's output is
checked equal to tiktoken's before timing. Prints, per corpus and call, the median time of each and
the median of each round's own ratio (ours / tiktoken's: below 1 is faster), with the load average.
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

from bpe import Tokenizer  # noqa: E402
from bpe.files.tiktoken_file import load_tiktoken_ranks  # noqa: E402
from bpe.split.patterns import resolve_pattern  # noqa: E402
from bench_bpe_cold import CL100K  # noqa: E402
from bench_bpe_long import load_average  # noqa: E402
from bench_bpe_texts import corpus_docs  # noqa: E402


def timed(fn, ids) -> float:
    t = time.perf_counter()
    fn(ids)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="code,multilingual", help="of code, prose, multilingual")
    ap.add_argument("--size", type=float, default=1, help="MB of text per corpus (default 1)")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    import tiktoken

    ranks = load_tiktoken_ranks(CL100K)
    pattern = resolve_pattern("cl100k")
    specials = {"<|endoftext|>": len(ranks)}
    ours = Tokenizer(ranks, pattern, specials)
    theirs = tiktoken.Encoding("bench", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    print(f"load average {load_average()}")
    print("| corpus | ids | call | ours ms | tiktoken ms | ours / tiktoken (paired) |")
    print("|---|---|---|---|---|---|")
    for corpus in args.corpus.split(","):
        ids = theirs.encode_ordinary("".join(corpus_docs(corpus, int(args.size * 1_000_000))))
        for call in ("decode_bytes", "decode"):
            mine, ref = getattr(ours, call), getattr(theirs, call)
            assert mine(ids) == ref(ids), f"{call} differs from tiktoken's"
            pairs = []
            for i in range(args.rounds):  # which goes first alternates
                if i % 2:
                    a = timed(mine, ids)
                    b = timed(ref, ids)
                else:
                    b = timed(ref, ids)
                    a = timed(mine, ids)
                pairs.append((a, b))
            a_med = statistics.median(p[0] for p in pairs) * 1e3
            b_med = statistics.median(p[1] for p in pairs) * 1e3
            ratio = statistics.median(p[0] / p[1] for p in pairs)
            print(f"| {corpus} | {len(ids):,} | {call} | {a_med:.2f} | {b_med:.2f} | {ratio:.2f}x |")
    print(f"load average {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
