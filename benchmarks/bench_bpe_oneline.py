"""Benchmark: a cold encode of a long text without newlines, beside tiktoken.

Text without line breaks (one long line of prose, a minified file) holds no line cut: the encoder
cuts it into blocks before a space between words instead, or before punctuation after a CJK
character, so that its new pieces are merged together once the first block shows there are many.
Each round: a fresh tokenizer from cl100k's ranks encodes a new random text of the kind asked for,
then tiktoken (imported when installed) with the same ranks; the ids are checked equal. Medians of
the rounds. The kinds (--kind):

- ``words``: lowercase words of 5 to 10 letters, one space between;
- ``cjk``: clauses of 3 to 20 of the 3,000 first CJK ideographs, each ended by "，", "。" or "、",
  no space;
- ``emoji``: words, each followed by up to two emoji (characters above U+FFFF), one space between.

    python3 benchmarks/bench_bpe_oneline.py                      # 10^6 characters, 3 rounds
    python3 benchmarks/bench_bpe_oneline.py --kind cjk --size 500000 --rounds 5

Compare two checkouts by running this file from each, taking turns.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_bpe_long import CL100K, load_average, processor  # noqa: E402
from bpe import GPT4_PATTERN, Tokenizer  # noqa: E402


IDEOGRAPHS = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
EMOJI = [chr(c) for c in range(0x1F300, 0x1F650)]


def _word(rng: random.Random) -> str:
    return " " + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(5, 10)))


def _clause(rng: random.Random) -> str:
    return "".join(rng.choice(IDEOGRAPHS) for _ in range(rng.randint(3, 20))) + rng.choice("，。、")


def _emoji_word(rng: random.Random) -> str:
    return _word(rng) + "".join(rng.choice(EMOJI) for _ in range(rng.randint(0, 2)))


KINDS = {"words": _word, "cjk": _clause, "emoji": _emoji_word}


def text_of(kind: str, n: int, seed: int) -> str:
    """``n`` characters of random parts of ``kind`` (KINDS), no newline."""
    rng, part = random.Random(seed), KINDS[kind]
    out, size = [], 0
    while size < n:
        out.append(part(rng))
        size += len(out[-1])
    return "".join(out)[:n]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=1_000_000, help="characters of text (default 10^6)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each on a new text (default 3)")
    ap.add_argument("--kind", choices=sorted(KINDS), default="words", help="what the text holds (default words)")
    args = ap.parse_args(argv)
    try:
        import tiktoken
        import tiktoken.load
    except ImportError:
        tiktoken = None
    print(f"# {processor()}; load average {load_average()}; {args.size:,} characters of {args.kind}, no newline")
    peer = None
    if tiktoken is not None:
        peer = tiktoken.Encoding("cl100k", pat_str=GPT4_PATTERN, special_tokens={},
                                 mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(CL100K)))
    ours_s, peer_s = [], []
    for r in range(args.rounds):
        text = text_of(args.kind, args.size, seed=r)
        tok = Tokenizer.from_tiktoken(CL100K, pattern=GPT4_PATTERN)  # a cold cache each round
        t0 = time.perf_counter()
        ids = tok.encode_ordinary(text)
        ours_s.append(time.perf_counter() - t0)
        line = f"round {r + 1}: ours {ours_s[-1]:.3f} s"
        if peer is not None:
            t0 = time.perf_counter()
            want = peer.encode_ordinary(text)
            peer_s.append(time.perf_counter() - t0)
            if ids != want:
                print(f"round {r + 1}: ids differ from tiktoken's", file=sys.stderr)
                return 1
            line += f", tiktoken {peer_s[-1]:.3f} s"
        print(line)
    ours = statistics.median(ours_s)
    summary = f"median: ours {ours:.3f} s"
    if peer_s:
        summary += f", tiktoken {statistics.median(peer_s):.3f} s, ours / tiktoken {ours / statistics.median(peer_s):.2f}x"
    print(summary + f"; load average {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
