"""How many CPU threads a process computes on: the cores this process may run on, less those
other processes keep busy when it starts (measured over half a second), or the user's choice.
Every `gpt` command that runs a model (train, sample, eval, gradflow, translate) chooses here,
through `apply_threads`, and so does the library itself where nobody chose: autograd.parallel
calls `choose_threads` at the first op that would use its pool, so a model trained from Python
computes on the threads `gpt train` would take.

A step on the CPU splits its work, matrix products included, across the threads of
autograd.parallel. On a machine where another job holds a core, a thread that shares that core
is preempted for milliseconds at a time, and every op waits for the block it holds, so a thread
on a busy core slows the whole step down. So a command counts only the cores it finds free, and
OpenBLAS keeps one thread (its even split stalls on a busy core; the pool splits instead).

Override: GPT_THREADS=N; OPENBLAS_NUM_THREADS or OMP_NUM_THREADS, when set and GPT_THREADS is
not, are honoured as the thread count too; autograd.parallel.set_threads(n) over all of them.
Ranks of a data-parallel run share the free cores: `gpt train` passes its world size, and the
library's default takes the ranks its MPI launcher started on this node (`launched_local_ranks`).
A forked process measures again (its parent's measurement counted its siblings as idle).
bpe computes without BLAS, in worker processes that take work as they come free: its `--workers`
(default: the cores it may run on, bpe.workers) is its thread count.
"""
from __future__ import annotations

import functools
import os

ENV = "GPT_THREADS"
_BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
# How MPI launchers announce the ranks they started on this node (MPICH/hydra, Open MPI, PMIx).
_LOCAL_RANKS_ENV = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_LOCAL_SIZE")


def _requested() -> int | None:
    """The thread count the environment asks for, or None."""
    for name in (ENV,) + _BLAS_ENV:
        value = os.environ.get(name, "").strip()
        if value:
            try:
                n = int(value)
            except ValueError:
                raise ValueError(f"{name} must be a whole number of threads, got {value!r}") from None
            if n < 1:
                raise ValueError(f"{name} must be at least 1, got {n}")
            return n
    return None


@functools.lru_cache(maxsize=1)
def free_cores() -> int:
    """Cores this process may use that other processes left idle (measured once per process)."""
    from autograd import parallel

    cores = parallel.cpu_count()
    others = parallel.other_cpu_use(0.5)
    if others is None:
        return cores
    # a core counts as taken from 0.75 of it busy: a short blip of another process must not
    # halve a run on a quiet machine
    return max(1, min(cores, cores - int(others + 0.25)))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=free_cores.cache_clear)


def launched_local_ranks(environ=os.environ) -> int:
    """Ranks an MPI launcher started on this node (1 when not under one)."""
    for name in _LOCAL_RANKS_ENV:
        value = environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def choose_threads(requested: int | None = None, ranks: int = 1) -> int:
    """`requested`, else the environment's (see the module docstring), else this rank's share of
    the free cores (at least 1)."""
    if requested is None:
        requested = _requested()
    if requested is not None:
        if requested < 1:
            raise ValueError(f"threads must be at least 1, got {requested}")
        return int(requested)
    return max(1, free_cores() // max(1, ranks))


def apply_threads(requested: int | None = None, ranks: int = 1) -> int:
    """Choose (see choose_threads) and set autograd.parallel's thread count; returns it."""
    from autograd import parallel

    n = choose_threads(requested, ranks)
    parallel.set_threads(n)
    return n
