"""Benchmark: training and encoding time against the length of one chunk (should be linear).

Long chunks are normal in DNA, minified code, base64 and languages without spaces. Two curves:

- training: one run of ``ACGT`` without spaces, vocab 356 (100 merges), GPT-4 pattern, beside
  a minbpe-style loop (recount every pair after every merge) as the plain-Python yardstick;
- encoding: ``'^' * n`` and a random ``ACGT`` run with cl100k's ranks (tiktoken's worst cases),
  beside tiktoken when it is installed and the .tiktoken file is present.

    python3 benchmarks/bench_bpe_long.py                       # 50k, 100k, 200k characters
    python3 benchmarks/bench_bpe_long.py --sizes 50000,200000 --no-naive
    python3 benchmarks/bench_bpe_long.py --encode-sizes 250000,1000000

Times are wall seconds of one run; the load average is printed, since the machine may be shared.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bpe import GPT4_PATTERN, Tokenizer  # noqa: E402

CL100K = Path(__file__).resolve().parents[2] / "shared" / "data" / "cl100k_base.tiktoken"


def acgt(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ACGT") for _ in range(n))


def naive_merges(text: str, n_merges: int) -> None:
    """minbpe's training loop on one chunk: recount every pair after every merge."""
    ids = list(text.encode("utf-8"))
    for k in range(n_merges):
        stats: dict[tuple[int, int], int] = {}
        for p in zip(ids, ids[1:]):
            stats[p] = stats.get(p, 0) + 1
        if not stats:
            return
        pair = max(stats, key=stats.get)
        new, i, out = 256 + k, 0, []
        while i < len(ids):
            if i < len(ids) - 1 and (ids[i], ids[i + 1]) == pair:
                out.append(new)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids = out


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def train_curve(sizes: list[int], naive: bool) -> None:
    print("\ntraining one ACGT chunk, vocab 356 (100 merges), GPT-4 pattern: wall seconds")
    print("| chars | bpe (ours) | ours per 100k chars | minbpe-style loop |")
    print("|---|---|---|---|")
    for n in sizes:
        text = acgt(n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = timed(lambda: Tokenizer.train_from_iterator([text], vocab_size=356, pattern=GPT4_PATTERN,
                                                            workers=1, progress=False))
        ref = f"{timed(lambda: naive_merges(text, 100)):.2f}" if naive else "-"
        print(f"| {n:,} | {t:.3f} | {t * 100_000 / n:.3f} | {ref} |", flush=True)


def encode_curve(sizes: list[int]) -> None:
    if not CL100K.exists():
        print(f"\nencoding curve skipped: {CL100K} is absent")
        return
    tok = Tokenizer.from_tiktoken(CL100K, pattern=GPT4_PATTERN)
    enc = None
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe

        enc = tiktoken.Encoding("cl100k", pat_str=GPT4_PATTERN, mergeable_ranks=load_tiktoken_bpe(str(CL100K)),
                                special_tokens={})
    except ImportError:
        pass
    print("\nencoding one long chunk with cl100k's ranks: wall seconds")
    print("| text | chars | bpe (ours) | ours per 100k chars | tiktoken |")
    print("|---|---|---|---|---|")
    for name, make in [("'^' * n", lambda n: "^" * n), ("ACGT run", acgt), ("'a' * n", lambda n: "a" * n)]:
        for n in sizes:
            text = make(n)
            t = timed(lambda: tok.encode_ordinary(text))
            ref = f"{timed(lambda: enc.encode_ordinary(text)):.3f}" if enc is not None else "-"
            print(f"| {name} | {n:,} | {t:.3f} | {t * 100_000 / n:.3f} | {ref} |", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="50000,100000,200000", help="training chunk lengths (characters)")
    ap.add_argument("--encode-sizes", default="250000,500000,1000000", help="encoding chunk lengths")
    ap.add_argument("--no-naive", action="store_true", help="skip the minbpe-style loop")
    args = ap.parse_args(argv)
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    train_curve([int(s) for s in args.sizes.split(",") if s], not args.no_naive)
    if args.encode_sizes:
        encode_curve([int(s) for s in args.encode_sizes.split(",") if s])
    return 0


if __name__ == "__main__":
    sys.exit(main())
