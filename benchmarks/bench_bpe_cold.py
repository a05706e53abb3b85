"""One text encoded by a fresh tokenizer: its construction, the cold and the warm encode, beside
tiktoken, each round in this process, the ids checked equal.

Meant for comparing two checkouts of the project side by side: run it from each in turn (fresh
processes, taking turns), e.g.

    for i in 1 2 3; do for tree in ../before .; do python3 $tree/benchmarks/bench_bpe_cold.py; done; done

Prints one line per run: the medians over --rounds of the construction of ``Tokenizer(ranks)``, the
first ``encode_ordinary`` (cold: an empty piece cache), the construction of ``tiktoken.Encoding``,
its encode, and the second encode of ours (warm), in milliseconds; and the median of each round's
own speed ratio, cold against tiktoken, without and with the constructions (a tool loaded to
encode one text). The vocabulary is cl100k's (``../shared/data/cl100k_base.tiktoken``). With --joined
the documents are joined by ``<|endoftext|>`` and encoded by ``encode(allowed_special="all")``.
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
from bench_bpe_long import load_average  # noqa: E402
from bench_bpe_texts import corpus_docs  # noqa: E402

CL100K = ROOT.parent / "shared" / "data" / "cl100k_base.tiktoken"
EOT = "<|endoftext|>"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="multilingual", help="code, prose or multilingual (default multilingual)")
    ap.add_argument("--size", type=float, default=6, help="MB of text (default 6)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", default=str(CL100K), help="a .tiktoken file (default cl100k's)")
    ap.add_argument("--joined", action="store_true",
                    help=f"the documents joined by {EOT} and encoded with encode(allowed_special='all')")
    args = ap.parse_args(argv)
    import tiktoken

    docs = corpus_docs(args.corpus, int(args.size * 1_000_000))
    text = (EOT if args.joined else "").join(docs)
    ranks = load_tiktoken_ranks(args.ranks)
    pattern = resolve_pattern("cl100k")
    specials = {EOT: len(ranks)}
    runs = []
    for i in range(args.rounds):
        t0 = time.perf_counter()
        ours = Tokenizer(ranks, pattern, specials)
        t1 = time.perf_counter()
        cold = ours.encode(text, allowed_special="all") if args.joined else ours.encode_ordinary(text)
        t2 = time.perf_counter()
        theirs = tiktoken.Encoding(f"bench{i}", pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
        t3 = time.perf_counter()
        ref = theirs.encode(text, allowed_special="all") if args.joined else theirs.encode_ordinary(text)
        t4 = time.perf_counter()
        warm = ours.encode(text, allowed_special="all") if args.joined else ours.encode_ordinary(text)
        t5 = time.perf_counter()
        assert cold == ref == warm, "ids differ from tiktoken's"
        runs.append((t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4))
    med = [statistics.median(r[i] for r in runs) * 1e3 for i in range(5)]
    ratio = statistics.median(r[3] / r[1] for r in runs)
    both = statistics.median((r[2] + r[3]) / (r[0] + r[1]) for r in runs)
    what = f"{args.corpus}{' joined by ' + EOT if args.joined else ''}"
    print(f"{ROOT.name} {what} {args.size:g} MB: construct {med[0]:.1f} ms, cold {med[1]:.1f}, "
          f"tiktoken's construction {med[2]:.1f}, tiktoken {med[3]:.1f}, warm {med[4]:.1f}; cold speed / "
          f"tiktoken's {ratio:.3f}, with the constructions {both:.3f}; load average {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
