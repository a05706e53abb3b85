"""Benchmark of the scatter-add behind embedding / x[ids] backward: which method is fastest.

    python benchmarks/bench_scatter.py [--repeats 7]

For row ids (N,) into a table (V, C) with gradient rows (N, C), float32, it times
  add.at      numpy.add.at(out, ids, g)                       (the baseline to beat)
  reduceat    argsort ids, sum runs of equal ids with add.reduceat, assign once
  one-hot     a (V, N) one-hot matrix times g: one BLAS call, V*N extra floats
  bincount    per-column bincount over flat ids (V*C float64 output, then cast)
  engine      autograd.ops.index.scatter_rows (what embedding's backward runs)
and prints medians in milliseconds.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from autograd.ops.index import scatter_rows


def add_at(ids, g, V):
    out = np.zeros((V, g.shape[1]), g.dtype)
    np.add.at(out, ids, g)
    return out


def reduceat(ids, g, V):
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    out = np.zeros((V, g.shape[1]), g.dtype)
    out[s[starts]] = np.add.reduceat(g[order], starts, axis=0)
    return out


def one_hot(ids, g, V):
    m = np.zeros((V, len(ids)), g.dtype)
    m[ids, np.arange(len(ids))] = 1
    return m @ g


def bincount(ids, g, V):
    C = g.shape[1]
    flat = (ids[:, None] * C + np.arange(C)).reshape(-1)
    return np.bincount(flat, weights=g.reshape(-1), minlength=V * C).reshape(V, C).astype(g.dtype)


def engine(ids, g, V):
    return scatter_rows(ids, g, V)


METHODS = [add_at, reduceat, one_hot, bincount, engine]


def median_ms(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    cases = [(65, 2048, 384), (512, 2048, 384), (4096, 2048, 384), (50257, 2048, 384), (50257, 8192, 768)]
    print(f"scatter-add of N gradient rows into a (V, C) float32 table; medians of {args.repeats} runs, ms\n")
    print("| V | N | C | " + " | ".join(m.__name__ for m in METHODS) + " |")
    print("|---|---|---|" + "---|" * len(METHODS))
    for V, N, C in cases:
        ids = rng.integers(0, V, N)
        g = rng.standard_normal((N, C)).astype(np.float32)
        want = add_at(ids, g, V)
        row = []
        for m in METHODS:
            if m is one_hot and V * N > 1 << 26:
                row.append("(too big)")
                continue
            np.testing.assert_allclose(m(ids, g, V), want, rtol=1e-4, atol=1e-4)
            row.append(f"{median_ms(lambda: m(ids, g, V), args.repeats):.2f}")
        print(f"| {V} | {N} | {C} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
