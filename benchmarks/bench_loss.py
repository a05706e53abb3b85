"""Cross-entropy over a language model's logits: forward and backward beside PyTorch's.

    python benchmarks/bench_loss.py                       # (2048, 6144): the default gpt train's batch
    python benchmarks/bench_loss.py --rows 4096 --vocab 50257 --rounds 5

The same float32 logits and targets for both; their losses and gradients must agree (1e-5)
before any time is printed. Then, in one process, ours (autograd.cross_entropy, the library's
threads) and torch.nn.functional.cross_entropy (PyTorch's own threads) take turns, each timed as
forward, backward and both, the median over the rounds' steps. Also ours with the pool task of
the CPU's passes at the L2-sized chunk of autograd.parallel (`--task-elements`, 2^16 by default),
the setting before autograd/ops/loss.py's 2 MiB blocks.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"


def ours(logits: np.ndarray, targets: np.ndarray, task_elements: int | None):
    """(forward s, backward s, loss, grad) of one step of our cross-entropy."""
    import autograd
    from autograd.ops import loss as loss_module

    old = loss_module._TASK_ELEMENTS
    if task_elements:
        loss_module._TASK_ELEMENTS = task_elements
    try:
        x = autograd.Tensor(logits, requires_grad=True)
        t0 = time.perf_counter()
        loss = autograd.cross_entropy(x, targets)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
    finally:
        loss_module._TASK_ELEMENTS = old
    return t1 - t0, t2 - t1, float(loss.item()), x.grad


def peer(logits: np.ndarray, targets: np.ndarray):
    """The same step in PyTorch (imported here: an optional peer)."""
    import torch

    x = torch.from_numpy(logits).requires_grad_(True)
    t = torch.from_numpy(targets)
    t0 = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(x, t)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, float(loss.item()), x.grad.numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=6144)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5, help="timed steps of each, each round")
    ap.add_argument("--task-elements", type=int, default=1 << 16)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((args.rows, args.vocab)) * 2).astype(np.float32)
    targets = rng.integers(0, args.vocab, args.rows)
    runs = {"ours": lambda: ours(logits, targets, None),
            f"ours, tasks of {args.task_elements} entries": lambda: ours(logits, targets, args.task_elements)}
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        runs["PyTorch"] = lambda: peer(logits, targets)
    else:
        print("PyTorch is not installed: ours only")
    results = {name: run() for name, run in runs.items()}   # the warm-up, and the check
    _, _, loss0, grad0 = results["ours"]
    for name, (_, _, loss, grad) in results.items():
        if abs(loss - loss0) > 1e-5 or np.abs(grad - grad0).max() > 1e-5:
            raise SystemExit(f"{name} disagrees with ours: loss {loss} against {loss0}, "
                             f"largest gradient difference {np.abs(grad - grad0).max():.2e}")
    import autograd
    print(f"logits ({args.rows}, {args.vocab}) float32; our threads {autograd.parallel.threads()}; "
          f"losses and gradients agree to 1e-5; load average {_load()} before")
    times = {name: ([], []) for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            for _ in range(args.steps):
                fwd, bwd, _, _ = run()
                times[name][0].append(fwd)
                times[name][1].append(bwd)
    print("| cross-entropy | forward ms | backward ms | both ms |")
    print("|---|---|---|---|")
    for name, (fwd, bwd) in times.items():
        both = [f + b for f, b in zip(fwd, bwd)]
        print(f"| {name} | {1e3 * statistics.median(fwd):.1f} | {1e3 * statistics.median(bwd):.1f} "
              f"| {1e3 * statistics.median(both):.1f} |")
    print(f"load average after: {_load()}")


if __name__ == "__main__":
    main()
