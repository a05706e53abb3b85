"""What a hand-off to the thread pool costs, and how many a training step makes.

    python3 benchmarks/bench_pool.py                 # hand-off latency, then config (a)'s regions
    python3 benchmarks/bench_pool.py --config b --steps 10

Part 1 runs `parallel.for_chunks` over two chunks, one per thread, each a fixed matrix product,
and prints medians of: the product alone; the whole region; how long after the call the worker
started its chunk; how long after the worker's chunk ended the caller returned. The two delays
are the cost of waking a thread that waits (a futex, and on a virtual machine whose idle cores
halt, the host waking that core). Part 2 counts the regions a training step of a bench_train.py
config runs on the pool, with each one's median time, so that the two parts give the step's
hand-off cost. It also prints the kernel's idle driver, which decides whether an idle core polls
before it halts. Part 3 prices the other hand-off, of the GIL: two plain threads each run a loop of
NumPy calls on arrays of their own (a multiply and an add in place, OpenBLAS unused), against one
thread running both loops in turn, taking turns over --gil-rounds rounds. Each call releases the
GIL and takes it back, and when the other thread holds it then, waits to be woken: the smaller
the calls, the more of the second thread that waiting eats.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from autograd import parallel  # noqa: E402
from bench_train import _loadavg  # noqa: E402


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "-"


def idle_driver() -> str:
    """The cpuidle driver and, for haltpoll, how long an idle core polls before it halts."""
    driver = _read("/sys/devices/system/cpu/cpuidle/current_driver")
    poll = _read("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    return f"cpuidle driver {driver}" + (f", guest_halt_poll_ns {poll}" if driver == "haltpoll" else "")


def handoff(rounds: int) -> dict:
    """Medians in microseconds: one product, a region of two (one per thread), the worker's start
    delay and the caller's wake-up delay after the worker's end."""
    a = np.random.default_rng(0).random((128, 128), dtype=np.float32)
    b = np.random.default_rng(1).random((128, 512), dtype=np.float32)
    outs = [np.empty((128, 512), np.float32) for _ in range(2)]
    caller, marks = threading.get_ident(), {}

    def chunk(lo, hi):
        worker = threading.get_ident() != caller
        if worker:
            marks["start"] = time.perf_counter()
        np.matmul(a, b, out=outs[lo])
        if worker:
            marks["end"] = time.perf_counter()

    alone, region, start, wake = [], [], [], []
    for _ in range(rounds):
        t = time.perf_counter()
        np.matmul(a, b, out=outs[0])
        alone.append(time.perf_counter() - t)
        marks.clear()
        t = time.perf_counter()
        parallel.for_chunks(chunk, 2, 1 << 30, step=1)
        end = time.perf_counter()
        if "start" in marks:  # the worker took a chunk (not the caller both)
            region.append(end - t)
            start.append(marks["start"] - t)
            wake.append(end - marks["end"])
    us = lambda v: round(statistics.median(v) * 1e6, 1) if v else float("nan")  # noqa: E731
    return {"product alone": us(alone), "region of two": us(region), "worker start delay": us(start),
            "caller wake delay": us(wake), "regions with the worker": len(region)}


def gil_scaling(elements: int, rounds: int, calls: int = 4000) -> dict:
    """Per call µs on one thread, and the scaling of two threads each making `calls` NumPy calls
    over float32 arrays of `elements` against one thread making both loops (medians of `rounds`)."""
    rng = np.random.default_rng(0)

    def loop():
        a = rng.random(elements, dtype=np.float32)
        b = np.empty_like(a)

        def run():
            for _ in range(calls // 2):
                np.multiply(a, 1.0001, out=b)
                np.add(b, 1.0, out=b)
        return run

    first, second = loop(), loop()
    one, two = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        first()
        second()
        one.append(time.perf_counter() - t)
        other = threading.Thread(target=second)
        t = time.perf_counter()
        other.start()
        first()
        other.join()
        two.append(time.perf_counter() - t)
    one_s, two_s = statistics.median(one), statistics.median(two)
    return {"elements": elements, "µs a call": round(one_s / (2 * calls) * 1e6, 1),
            "two threads' scaling": round(one_s / two_s, 2)}


def step_regions(config: str, steps: int) -> list[tuple]:
    """(op, rows, row elements, calls per step, median µs, on the pool) of each kind of
    `for_chunks` call in a training step of `config`."""
    import bench_train as bt

    train_step = bt.framework_step("ours", config)
    batches = bt.batches_for(config, 4)
    for i in range(5):
        train_step(*batches[i % 4])
    seen = collections.defaultdict(list)
    real = parallel.for_chunks

    def counted(fn, n_rows, row_elements=1, step=None):
        t = time.perf_counter()
        real(fn, n_rows, row_elements, step)
        seen[(getattr(fn, "__qualname__", "?"), n_rows, row_elements)].append(time.perf_counter() - t)

    parallel.for_chunks = counted
    try:
        for i in range(steps):
            train_step(*batches[i % 4])
    finally:
        parallel.for_chunks = real
    rows = []
    for (name, n, width), times in sorted(seen.items(), key=lambda kv: -sum(kv[1])):
        pooled = n >= 2 and n * width >= parallel.MIN_PARALLEL
        rows.append((name.replace(".<locals>", ""), n, width, len(times) / steps,
                     round(statistics.median(times) * 1e6, 1), pooled))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3000, help="regions timed in part 1")
    ap.add_argument("--config", default="a", help="bench_train.py config of part 2 ('' to skip)")
    ap.add_argument("--steps", type=int, default=30, help="training steps counted in part 2")
    ap.add_argument("--gil-sizes", default="10000,50000,100000,200000,400000",
                    help="array sizes of part 3 ('' to skip)")
    ap.add_argument("--gil-rounds", type=int, default=7, help="rounds of each size in part 3")
    args = ap.parse_args()
    parallel.set_threads(2)
    print(f"{os.cpu_count()} CPUs, {parallel.threads()} threads; {idle_driver()}; "
          f"load average {_loadavg()}")
    print("\nHand-off (medians, µs):", handoff(args.rounds))
    if args.gil_sizes:
        print("\nThe GIL's hand-off: two threads of NumPy calls against one thread making both loops")
        print("| elements | µs a call | two threads' scaling |")
        print("|---|---|---|")
        for n in map(int, args.gil_sizes.split(",")):
            print("| " + " | ".join(str(v) for v in gil_scaling(n, args.gil_rounds).values()) + " |")
    if not args.config:
        return
    rows = step_regions(args.config, args.steps)
    print(f"\nRegions of one training step of ({args.config}), {args.steps} steps:")
    print("| op | rows | row elements | calls per step | median µs | on the pool |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    pooled = sum(r[3] for r in rows if r[5])
    print(f"\nregions on the pool per step: {pooled:g}; load average "
          f"{_loadavg()}")


if __name__ == "__main__":
    main()
