"""Batch encoding on two processes, taken apart: what a worker's share costs as lists and as bytes,
and the batch's scaling over many pairs of batches, in this process.

- A worker's share (``parallel_encode.plan``'s last share of the batch, part by part as a worker
  takes it) encoded warm into what a worker sends back: lists of ids packed into bytes (the
  encoder the caller uses, then ``np.fromiter``) against ``PackedEncoder`` (bytes directly); the
  same ids are checked.
- ``encode_ordinary_batch`` on 1 and on 2 threads, as ``bench_bpe.py``'s batch table measures it
  (``batch_row``): --rounds pairs of fresh tokenizers (cold), then --warm pairs of batches a round
  (warm), one thread and two taking turns; the scaling is the median of each pair's own ratio.
  The vocabulary is cl100k's (``../shared/data/cl100k_base.tiktoken``).

Meant also for comparing two checkouts side by side, taking turns in fresh processes:

    for i in 1 2 3; do for tree in ../before .; do python3 $tree/benchmarks/bench_bpe_batch.py; done; done
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
from bpe.encode import parallel_encode  # noqa: E402
from bpe.files.tiktoken_file import load_tiktoken_ranks  # noqa: E402
from bpe.split.patterns import resolve_pattern  # noqa: E402
from bench_bpe import BATCH_HEADER, batch_row, cores_check, print_table  # noqa: E402
from bench_bpe_long import load_average, processor  # noqa: E402
from bench_bpe_texts import corpus_docs  # noqa: E402

CL100K = ROOT.parent / "shared" / "data" / "cl100k_base.tiktoken"


def _timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def share_costs(docs: list[str], ranks, pattern, rounds: int) -> str:
    """Medians (ms) of a worker's share, warm, as packed lists and as bytes."""
    try:
        from bpe.encode.packed_encoder import PackedEncoder
    except ImportError:  # a checkout from before it
        return "a worker's share: this checkout has no packed encoder"
    bounds = parallel_encode.plan([len(t) for t in docs], 2)
    share = docs[bounds[-1]:]
    cuts = parallel_encode.parts([len(t) for t in share])
    tok = Tokenizer(ranks, pattern)
    packed = PackedEncoder(Tokenizer(ranks, pattern)._ordinary)

    def send(encoder):  # every part as a worker sends it: (counts, ids) bytes
        return [parallel_encode._packed_ids(tok, share[a:b], set(), encoder) for a, b in cuts]

    send(None)  # both warm
    send(packed)
    lists, as_bytes = [], []
    for _ in range(rounds):
        t, want = _timed(lambda: send(None))
        lists.append(t)
        t, got = _timed(lambda: send(packed))
        as_bytes.append(t)
        assert got == want, "the packed encoder's ids differ"
    a, b = statistics.median(lists), statistics.median(as_bytes)
    return (f"a worker's share ({sum(map(len, share)):,} characters, {len(cuts)} parts), warm: lists then "
            f"packed {a * 1e3:.1f} ms, bytes {b * 1e3:.1f} ms ({b / a:.2f} of the time)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="multilingual", help="code, prose or multilingual (default multilingual)")
    ap.add_argument("--size", type=float, default=6, help="MB of text (default 6)")
    ap.add_argument("--rounds", type=int, default=2, help="fresh tokenizers per thread count (default 2)")
    ap.add_argument("--warm", type=int, default=8, help="warm batches a round (default 8)")
    args = ap.parse_args(argv)
    docs = corpus_docs(args.corpus, int(args.size * 1_000_000))
    ranks, pattern = load_tiktoken_ranks(CL100K), resolve_pattern("cl100k")
    print(f"{ROOT.name} {args.corpus} {args.size:g} MB, {len(docs)} documents; {processor()}; "
          f"load average {load_average()}")
    print(share_costs(docs, ranks, pattern, max(3, args.rounds)))
    check = cores_check(2)
    row = batch_row(args.corpus, docs, "cl100k", ranks, {}, pattern,
                    argparse.Namespace(encode_repeat=args.rounds, batch_threads=2, batch_warm=args.warm), None)
    print_table(f"MB/s of wall time and scaling over {args.rounds} cold and {args.rounds * args.warm} warm pairs; "
                f"2 processes running one memory-bound loop at once took {check:.2f}x then {cores_check(2):.2f}x "
                f"the time of one alone; load average {load_average()}",
                [h.format(n="2 threads") for h in BATCH_HEADER], [row])
    return 0


if __name__ == "__main__":
    sys.exit(main())
