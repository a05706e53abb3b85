"""Benchmark: training and encoding time against the length of one chunk (should be linear).

Long chunks are normal in DNA, minified code, base64 and languages without spaces. Two curves:

- training: one run of ``ACGT`` without spaces, vocab 356 (100 merges), GPT-4 pattern, beside
  a minbpe-style loop (recount every pair after every merge) as the plain-Python yardstick;
- encoding: one long piece of each kind (repeated ``a``, ``^`` and spaces, random DNA, letters,
  CJK and punctuation: each one chunk under the GPT-4 pattern) with cl100k's ranks, beside tiktoken
  (imported when installed) with the same ranks, its ids checked equal to ours. "slope" is the
  exponent of the growth from the previous length (1: linear).

    python3 benchmarks/bench_bpe_long.py                       # 10^4..10^6 characters
    python3 benchmarks/bench_bpe_long.py --quick               # 10^4, 10^5; short training curve
    python3 benchmarks/bench_bpe_long.py --sizes 50000,200000 --no-naive
    python3 benchmarks/bench_bpe_long.py --encode-sizes 250000,1000000 --kinds a,dna

Times are of one run: wall seconds and this process's CPU seconds (the steadier on a shared
machine); the processor and the load average before and after are printed.
"""
from __future__ import annotations

import argparse
import math
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


LETTERS = {"dna": "ACGT", "letters": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
           "cjk": "".join(map(chr, range(0x4E00, 0x4E40))), "punct": "{}();,.=<>+-*/&|!?"}
KINDS = ["a", "^", "space", "dna", "letters", "cjk", "punct"]


def long_piece(kind: str, n: int) -> str:
    """``n`` characters that the GPT-4 pattern keeps as one chunk (spaces end in a letter)."""
    if kind in LETTERS:
        rng = random.Random(n)
        return "".join(rng.choices(LETTERS[kind], k=n))
    return " " * (n - 1) + "x" if kind == "space" else kind * n


def timed_cpu(fn):
    """(wall seconds, CPU seconds, result) of one call."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def tiktoken_encoding():
    """tiktoken with cl100k's ranks and the GPT-4 pattern, or None when it is not installed. Its
    regex overflows its stack on some long pieces (a million spaces): that row then says so, without
    the panic's backtrace."""
    os.environ["RUST_BACKTRACE"] = "0"
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError:
        return None
    return tiktoken.Encoding("cl100k", pat_str=GPT4_PATTERN, mergeable_ranks=load_tiktoken_bpe(str(CL100K)),
                             special_tokens={})


def encode_curve(sizes: list[int], kinds: list[str]) -> None:
    if not CL100K.exists():
        print(f"\nencoding curve skipped: {CL100K} is absent")
        return
    tok = Tokenizer.from_tiktoken(CL100K, pattern=GPT4_PATTERN)
    enc = tiktoken_encoding()
    print("\nencoding one long piece with cl100k's ranks (never cached, so cold): seconds (CPU seconds in brackets)")
    print("| piece | chars | bytes | bpe (ours) | ours µs/byte | slope | tiktoken | ours / tiktoken | same ids |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        last = None
        for n in sizes:
            text = long_piece(kind, n)
            w, c, ids = timed_cpu(lambda: tok.encode_ordinary(text))
            nb = len(text.encode("utf-8"))
            slope = f"{math.log(c / last[1]) / math.log(n / last[0]):.2f}" if last and c > 0 and last[1] > 0 else "-"
            last = (n, c)
            ref = ratio = same = "-"
            if enc is not None:
                try:
                    tw, tc, theirs = timed_cpu(lambda: enc.encode_ordinary(text))
                    ref, ratio, same = f"{tw:.3f} ({tc:.3f})", f"{c / tc:.2f}x" if tc else "-", str(ids == theirs)
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:  # noqa: BLE001 - a Rust panic is a BaseException
                    ref = f"fails: {str(exc)[-40:]}"
            print(f"| {kind!r} | {n:,} | {nb:,} | {w:.3f} ({c:.3f}) | {c * 1e6 / nb:.2f} | {slope} | {ref} | "
                  f"{ratio} | {same} |", flush=True)


def processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown processor"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="50000,100000,200000", help="training chunk lengths (characters)")
    ap.add_argument("--encode-sizes", default="10000,100000,1000000", help="encoding piece lengths")
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help=f"kinds of long piece, of {','.join(KINDS)} (any other string is repeated)")
    ap.add_argument("--quick", action="store_true", help="training 20k and 50k, encoding 10^4 and 10^5")
    ap.add_argument("--no-naive", action="store_true", help="skip the minbpe-style loop")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.encode_sizes = "20000,50000", "10000,100000"
    kinds = [k for k in args.kinds.split(",") if k]
    print(f"{processor()}, {os.cpu_count()} cores, python {sys.version.split()[0]}, load average {load_average()}")
    if args.sizes:
        train_curve([int(s) for s in args.sizes.split(",") if s], not args.no_naive)
    if args.encode_sizes:
        encode_curve([int(s) for s in args.encode_sizes.split(",") if s], kinds)
    print(f"\nload average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
