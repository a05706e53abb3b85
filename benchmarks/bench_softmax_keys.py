"""The causal attention's softmax over the keys, alone, on one thread: the library's
(autograd/ops/causal_attention.py's _keys_softmax: the scores exponentiated unshifted, a block
redone only where they leave exp's range) against the stable form that shifts every query by its
own max (_stable_keys_softmax, softmax_array over axis -2), taking turns call by call on the
same scores.

    python3 benchmarks/bench_softmax_keys.py
    python3 benchmarks/bench_softmax_keys.py --calls 3000 --scale 10

Shapes: the probabilities one pool task holds, keys down and queries across, (entries, heads,
keys, queries): config (a)'s (6 entries of 4 heads, one block of 64 x 64) and one entry of config
(b)'s last query block (6 heads, 256 keys by 64 queries). Printed: the medians in microseconds and
the median of each pair's own ratio (library / per query), and the load average.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autograd import set_threads  # noqa: E402
from autograd.ops import causal_attention as ca  # noqa: E402
from bench_train import _loadavg  # noqa: E402

SHAPES = {"(a)": (6, 4, 64, 64), "(b), last block": (1, 6, 256, 64)}
by_query = ca._stable_keys_softmax


def library(p, scores) -> None:
    def again(i=...):   # a block redone (scores beyond exp's range, --scale 18 or so) reads its scores again
        np.copyto(p[i], scores[i])

    ca._keys_softmax(p, again)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1500, help="calls of each (default 1500)")
    ap.add_argument("--scale", type=float, default=3.0, help="standard deviation of the scores (default 3)")
    args = ap.parse_args()
    set_threads(1)
    rng = np.random.default_rng(0)
    print(f"one thread, float32, scores N(0, {args.scale:g}), {args.calls} calls of each taking turns; "
          f"load average {_loadavg()}")
    print("| shape | per query µs | library µs | paired library / per query |\n|---|---|---|---|")
    for name, shape in SHAPES.items():
        scores = (rng.standard_normal(shape) * args.scale).astype(np.float32)
        p, times = np.empty_like(scores), {by_query: [], library: []}
        for i in range(args.calls):
            for fn in (by_query, library) if i % 2 else (library, by_query):
                np.copyto(p, scores)
                t = time.perf_counter()
                fn(p, scores)
                times[fn].append(time.perf_counter() - t)
        a, b = times[by_query], times[library]
        print(f"| {name} {shape} | {statistics.median(a) * 1e6:.1f} | {statistics.median(b) * 1e6:.1f} | "
              f"{statistics.median(y / x for x, y in zip(a, b)):.3f} |")
    print(f"load average after: {_loadavg()}")


if __name__ == "__main__":
    main()
