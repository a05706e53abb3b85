"""How many CPU threads a run uses: the cores this process may run on, less those other
processes keep busy when it starts (measured over a fraction of a second), or the user's choice.

A training step on the CPU splits its work across the threads of autograd.parallel (the pool and
OpenBLAS). On a machine where another job holds a core, a thread count that counts that core
makes every matrix product wait for the thread that shares it (OpenBLAS splits its work evenly),
and the step runs slower than on fewer threads. GPT_THREADS=N (or `gpt train --threads N`)
overrides the choice.
"""
from __future__ import annotations

import os

ENV = "GPT_THREADS"


def choose_threads(requested: int | None = None) -> int:
    """`requested`, else $GPT_THREADS, else the cores left free by other processes (at least 1)."""
    from autograd import parallel

    if requested is None and os.environ.get(ENV, "").strip():
        try:
            requested = int(os.environ[ENV])
        except ValueError:
            raise ValueError(f"{ENV} must be a whole number of threads, got {os.environ[ENV]!r}") from None
    if requested is not None:
        if requested < 1:
            raise ValueError(f"threads must be at least 1, got {requested}")
        return int(requested)
    cores = parallel.cpu_count()
    others = parallel.other_cpu_use(0.3)
    if others is None:
        return cores
    return max(1, min(cores, round(cores - others)))


def apply_threads(requested: int | None = None) -> int:
    """Choose (see choose_threads) and set the thread count of autograd.parallel; returns it."""
    from autograd import parallel

    n = choose_threads(requested)
    parallel.set_threads(n)
    return n
