"""Where learning merges goes, and a paired comparison of the array merges' few-positions path.

Counts one corpus once (``bench_bpe_texts.py``: code, prose or multilingual), then:

1. learns the merges from those counts --rounds times, each phase timed: building the array
   index (``ArrayMerges.__init__``), the merges in NumPy (``starts`` + ``merge``), the hand-over to
   the Python loop, and the rest (the loop, the heap, lowering the floor); with the kernel's share
   of the time (system CPU seconds), which is what swings on a virtual machine that pages fresh
   memory in slowly;
2. with --few, replays the merges that ran in NumPy on one ``ArrayMerges`` per value of
   ``early_merges.FEW`` (0: every merge by arrays), taking turns merge by merge, so that every
   value sees the same machine: total seconds and seconds by the merge's number of positions;
3. with --against DIR, learns the same merges with another checkout's learner (its ``bpe``
   package imported under another name) and with this one's, taking turns in this process, and
   prints each one's median and the median of each round's own ratio; the merges must agree.

    python3 benchmarks/bench_bpe_learn.py --corpus multilingual --size 50 --few 0,48,96
    python3 benchmarks/bench_bpe_learn.py --against ../before --rounds 8
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bpe.train.early_merges as early_merges  # noqa: E402
from bpe.split.patterns import resolve_pattern  # noqa: E402
from bpe.train.merge_learner import train_merges  # noqa: E402
from bpe.train.parallel_count import count_texts  # noqa: E402
from bench_bpe_long import load_average, processor  # noqa: E402
from bench_bpe_texts import corpus_docs  # noqa: E402

PHASES = {"__init__": "array index", "starts": "merges in NumPy", "merge": "merges in NumPy",
          "hand_over": "hand-over"}


def _usage() -> tuple[float, float]:
    """(wall seconds, this process's system CPU seconds) now."""
    return time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_stime


def learn_phases(counts, n_merges: int) -> tuple[dict, list, int]:
    """Learn once with each phase timed: {phase: [wall, system]}, the merges, and how many of them
    ran in NumPy."""
    spent: dict[str, list[float]] = {}
    in_numpy = [0]
    originals = {name: getattr(early_merges.ArrayMerges, name) for name in PHASES}

    def timed(name):
        def run(*args, **kwargs):
            in_numpy[0] += name == "merge"
            w, s = _usage()
            try:
                return originals[name](*args, **kwargs)
            finally:
                w2, s2 = _usage()
                cell = spent.setdefault(PHASES[name], [0.0, 0.0])
                cell[0] += w2 - w
                cell[1] += s2 - s
        return run

    for name in PHASES:
        setattr(early_merges.ArrayMerges, name, timed(name))
    try:
        w, s = _usage()
        merges = train_merges(counts, n_merges)
        w2, s2 = _usage()
    finally:
        for name, f in originals.items():
            setattr(early_merges.ArrayMerges, name, f)
    spent["Python loop and the rest"] = [w2 - w - sum(v[0] for v in spent.values()),
                                         s2 - s - sum(v[1] for v in spent.values())]
    spent["all"] = [w2 - w, s2 - s]
    return spent, merges, in_numpy[0]


def array_merges(counts, merges: list, fews: list[int]) -> tuple[list[float], dict]:
    """Replay ``merges`` (those the array phase ran) on one ArrayMerges per FEW value, taking
    turns merge by merge (at floor 1): total seconds per value, and by the bit length of the
    positions."""
    table = counts.keep(counts.sizes >= 2)
    states = [early_merges.ArrayMerges(table.data, table.sizes, table.counts) for _ in fews]
    saved = early_merges.FEW
    totals, by_size = [0.0] * len(fews), {}
    try:
        for k, (a, b) in enumerate(merges):
            key = a << early_merges.SHIFT | b
            turn = range(len(fews)) if k % 2 == 0 else range(len(fews) - 1, -1, -1)
            for i in turn:
                early_merges.FEW = fews[i]
                t = time.perf_counter()
                at = states[i].starts(key)
                states[i].merge(key, 256 + k, at)
                dt = time.perf_counter() - t
                totals[i] += dt
                by_size.setdefault(len(at).bit_length(), [0.0] * len(fews))[i] += dt
    finally:
        early_merges.FEW = saved
    return totals, by_size


def other_learner(root: Path):
    """``train_merges`` and ``ChunkTable`` of the checkout at ``root``, its ``bpe`` imported as the
    package ``bpe_against`` (bpe's own imports are relative)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bpe_against", root / "bpe" / "__init__.py",
                                                  submodule_search_locations=[str(root / "bpe")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["bpe_against"] = module
    spec.loader.exec_module(module)
    from bpe_against.train.chunk_table import ChunkTable
    from bpe_against.train.merge_learner import train_merges as theirs

    return theirs, ChunkTable


def against(counts, n_merges: int, root: Path, rounds: int) -> dict:
    """Seconds of each learner (this tree's, ``root``'s) per round, taking turns, the order
    reversed every other round; the merges checked equal."""
    theirs, their_table = other_learner(root)
    runs = {"this tree": (train_merges, counts),
            str(root): (theirs, their_table(counts.data, counts.sizes, counts.counts))}
    seconds: dict = {name: [] for name in runs}
    want = None
    for r in range(rounds):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            learn, table = runs[name]
            t = time.perf_counter()
            merges = learn(table, n_merges)
            seconds[name].append(time.perf_counter() - t)
            want = merges if want is None else want
            assert merges == want, f"{name} learned other merges"
    return seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="multilingual", help="code, prose or multilingual (default multilingual)")
    ap.add_argument("--size", type=float, default=50, help="MB of corpus (default 50)")
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--rounds", type=int, default=3, help="learning runs timed by phase (median; default 3)")
    ap.add_argument("--few", default="", help="FEW values to compare merge by merge, e.g. 0,48 (default: none)")
    ap.add_argument("--against", type=Path, help="another checkout whose merge learner to time beside this one")
    args = ap.parse_args(argv)
    print(f"{processor()}; load average {load_average()}")
    docs = corpus_docs(args.corpus, int(args.size * 1_000_000))
    counts = count_texts(docs, resolve_pattern("gpt4"), special_tokens=["<|endoftext|>"], table=True)
    del docs
    n = args.vocab - 257
    if args.against is not None:
        seconds = against(counts, n, args.against.resolve(), args.rounds)
        (ours, o), (theirs, t) = seconds.items()
        ratio = statistics.median(a / b for a, b in zip(o, t))
        print(f"\nLearning {n:,} merges ({args.corpus}, {args.size:g} MB), {args.rounds} rounds taking turns "
              f"in one process: median seconds")
        print(f"| {ours} | {theirs} | paired ratio |\n|---|---|---|")
        print(f"| {statistics.median(o):.3f} | {statistics.median(t):.3f} | **{ratio:.3f}** |")
        print(f"\nload average after: {load_average()}")
        return 0
    runs = [learn_phases(counts, n) for _ in range(args.rounds)]
    merges, in_numpy = runs[0][1], runs[0][2]
    assert all(r[1] == merges for r in runs)
    print(f"\nLearning {len(merges):,} merges from {len(counts):,} distinct chunks ({args.corpus}, "
          f"{args.size:g} MB), medians of {args.rounds}: seconds of wall time (of system CPU time)")
    print("| phase | wall s | system s |\n|---|---|---|")
    for phase in runs[0][0]:
        wall = statistics.median(r[0][phase][0] for r in runs)
        kernel = statistics.median(r[0][phase][1] for r in runs)
        print(f"| {phase} | {wall:.3f} | {kernel:.3f} |")
    if args.few:
        fews = [int(x) for x in args.few.split(",")]
        totals, by_size = array_merges(counts, merges[:in_numpy], fews)
        print(f"\nThe array phase's {in_numpy:,} merges replayed, FEW values taking turns merge by merge: seconds")
        print("| positions | " + " | ".join(f"FEW {f}" for f in fews) + " |")
        print("|---|" + "---|" * len(fews))
        for bits in sorted(by_size):
            span = "0" if bits == 0 else f"{1 << (bits - 1)}-{(1 << bits) - 1}"
            print(f"| {span} | " + " | ".join(f"{t:.3f}" for t in by_size[bits]) + " |")
        print("| all | " + " | ".join(f"**{t:.3f}**" for t in totals) + " |")
    print(f"\nload average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
